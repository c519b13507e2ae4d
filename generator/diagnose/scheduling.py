"""What decides whether a job's pods may start, beside the scheduler itself: the gang schedulers'
PodGroup for the job, and Kueue's Workload for it with the LocalQueue and ClusterQueue it names.
Each is read only where the cluster serves it and the user may read it."""
from __future__ import annotations

from generator.cluster import apierrors
from generator.cluster.client import Cluster
from generator.diagnose import reads

# The gang schedulers' PodGroups, as the operator creates them: (group, version).
POD_GROUP_APIS = {"volcano": ("scheduling.volcano.sh", "v1beta1"), "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1")}
# Kueue's API: v1beta2 since v0.15 (its conversion webhook serves v1beta1 too, but only while Kueue runs);
# v1beta1 alone before.
KUEUE_GROUP, KUEUE_VERSIONS = "kueue.x-k8s.io", ("v1beta2", "v1beta1")


def workload(c: Cluster, job: dict) -> dict | None:
    """Kueue's Workload for the job: the one it owns."""
    for version in KUEUE_VERSIONS:
        listing = reads.optional(lambda v=version: c.custom.list_namespaced_custom_object(
            KUEUE_GROUP, v, c.namespace, "workloads", _request_timeout=c.request_timeout))
        if listing is None:
            continue
        uid = job["metadata"].get("uid")
        for item in listing.get("items") or []:
            if any(o.get("uid") == uid for o in item["metadata"].get("ownerReferences") or []):
                item["metadata"].pop("managedFields", None)
                return item
        return None
    return None


def queues(c: Cluster, name: str) -> tuple[dict | None, dict | None]:
    """The LocalQueue `name` of the job's namespace and the ClusterQueue it points at."""
    for version in KUEUE_VERSIONS:
        local = reads.optional(lambda v=version: c.custom.get_namespaced_custom_object(
            KUEUE_GROUP, v, c.namespace, "localqueues", name, _request_timeout=c.request_timeout))
        if local is None:
            continue
        local["metadata"].pop("managedFields", None)
        target = (local.get("spec") or {}).get("clusterQueue")
        cluster = reads.optional(lambda v=version, t=target: c.custom.get_cluster_custom_object(
            KUEUE_GROUP, v, "clusterqueues", t, _request_timeout=c.request_timeout)) if target else None
        if cluster:
            cluster["metadata"].pop("managedFields", None)
        return local, cluster
    return None, None


def pod_groups(c: Cluster, name: str) -> dict[str, dict | None]:
    """The job's PodGroup by gang scheduler: None where the scheduler's kind exists and the job has
    none; a scheduler whose PodGroups cannot be read (refused, or no such kind) is left out."""
    found: dict[str, dict | None] = {}
    for scheduler, (group, version) in POD_GROUP_APIS.items():
        try:
            found[scheduler] = c.custom.get_namespaced_custom_object(group, version, c.namespace, "podgroups", name,
                                                                     _request_timeout=c.request_timeout)
        except apierrors.failures() as exc:
            if reads.status(exc) == 404 and _crd_exists(c, group, version):
                found[scheduler] = None
    return found


def _crd_exists(c: Cluster, group: str, version: str) -> bool:
    """Whether the API serves podgroups of this group: a list answers 404 only when it does not."""
    return reads.optional(lambda: c.custom.list_namespaced_custom_object(
        group, version, c.namespace, "podgroups", limit=1, _request_timeout=c.request_timeout)) is not None


def kueue_version(c: Cluster) -> str | None:
    """Kueue's release, from the label its chart (and its release manifests) put on its Workload CRD:
    `v0.19.2`. None where the CRD is absent, unlabelled, or not readable with these credentials."""
    from kubernetes import client

    crd = reads.optional(lambda: client.ApiextensionsV1Api(c.core.api_client).read_custom_resource_definition(
        f"workloads.{KUEUE_GROUP}", _request_timeout=c.request_timeout))
    labels = (crd.metadata.labels or {}) if crd is not None else {}
    return labels.get("app.kubernetes.io/version")
