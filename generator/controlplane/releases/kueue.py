"""Kueue on the local cluster (`cluster up --kueue`), installed as a user installs it: upstream's
kueue chart through the helm CLI, from the Go module cache that `cluster build` filled (never
copied into the repository), with the PyTorchJob and TrainJob integrations on. Then the queues a
job's `kueue.queueName` names: a ResourceFlavor, a ClusterQueue whose quota is the node's (or what
`--kueue-quota` says) and the LocalQueue `default` in namespace default. The chart's image is read
from the chart; the registry on this machine holds it, made from the built controller."""
from __future__ import annotations

import functools
from pathlib import Path

import yaml

from generator import kinds
from generator.controlplane import pins
from generator.controlplane.layout import Layout
from generator.controlplane.releases.base import Probe, Release, check_chart, module_chart
from generator.errors import UserError

NAME = "kueue"
NAMESPACE = "kueue-system"
CONTROLLER = f"{NAME}-controller-manager"  # the chart's fullname is the release's name
# The integrations this project's jobs need. Since v0.19 the chart's default list (which also turns on
# Ray, MPI and more) leaves Kubeflow Trainer v1's out, as deprecated: kubeflow.org/pytorchjob is named
# here to keep PyTorchJobs queued. Plain Jobs and JobSets stay on: Kueue's batch Job webhook (seen in
# v0.17.0), which the chart registers whatever is on, panics on every Job (a nil queue manager) when
# the batch/job integration is off, so JobSet could not create a TrainJob's Jobs; and a JobSet a
# TrainJob owns is then known as Kueue's own child, not queued again. WaitForPodsReady, on by default
# since v0.19 (30 minutes, blockAdmission off), is left as the chart has it: a job whose pods are not
# all Ready within 30 minutes of admission (an image pull that long, a Worker waiting for its Master)
# is evicted and queued again.
FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", *(k.kueue_integration for k in kinds.ALL)]
FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE, QUEUE_NAMESPACE = "default-flavor", "cluster-queue", "default", "default"
API = "kueue.x-k8s.io/v1beta2"
QUOTA_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
NO_QUEUES = "none"
# A ClusterQueue whose quota names another resource than it covers: the CRD's own rules let it pass,
# Kueue's webhook alone refuses it.
PROBE = Probe({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "webhook-probe"},
               "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "probe", "resources": [
                   {"name": "memory", "nominalQuota": "1"}]}]}]}}, "clusterqueues", namespaced=False)
# The controller Available (Ready once it wrote its certificate and leads), its webhooks answering and
# its visibility API served: until then the webhooks' `failurePolicy: Fail` refuses every PyTorchJob and
# TrainJob, and discovery fails.
RELEASE = Release(NAME, NAMESPACE, (CONTROLLER,), "Kueue's webhooks", (PROBE,), "kueue-values.yaml",
                  api_services=(("v1beta2.visibility.kueue.x-k8s.io", "Kueue's visibility API"),))


def chart_folder(cache: Path | None = None) -> Path:
    return module_chart(pins.KUEUE_MODULE, pins.KUEUE_VERSION, "kueue", cache)


def checked_chart() -> Path:
    return check_chart(chart_folder(), f"go mod download {pins.KUEUE_MODULE}@{pins.KUEUE_VERSION}")


@functools.lru_cache(maxsize=1)
def images() -> dict[str, str]:
    """role -> the image repository the chart's defaults name; empty when the chart is not in the
    module cache (nothing can install it then)."""
    try:
        values = yaml.safe_load((checked_chart() / "values.yaml").read_text())
    except UserError:
        return {}
    return {"kueue": values["controllerManager"]["manager"]["image"]["repository"]}


def values(path: Path) -> dict:
    """The chart's values with only FRAMEWORKS integrated: its manager configuration is one YAML
    string, so the chart's own is read and changed, not restated."""
    default = yaml.safe_load((path / "values.yaml").read_text())
    config = yaml.safe_load(default["managerConfig"]["controllerManagerConfigYaml"])
    config["integrations"] = {**(config.get("integrations") or {}), "frameworks": FRAMEWORKS}
    return {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False)}}


def parse_quota(text: str | None) -> dict[str, str] | None:
    """`--kueue-quota`: RESOURCE=QUANTITY,... (cpu, memory, nvidia.com/gpu), each replacing the
    node's own; `none` for no queues at all. Raises ValueError with what to write instead."""
    from generator.job import quantity

    if text is None:
        return {}
    if text.strip() == NO_QUEUES:
        return None
    quota: dict[str, str] = {}
    for part in text.split(","):
        name, sep, amount = part.strip().partition("=")
        if not sep or name not in QUOTA_RESOURCES:
            raise ValueError(f"{part.strip()!r}: write RESOURCE=QUANTITY with RESOURCE one of "
                             f"{', '.join(QUOTA_RESOURCES)} (cpu=3,memory=8Gi), or `{NO_QUEUES}` for no queues")
        try:
            if quantity.parse(amount) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{name}={amount!r} is not a quantity; {quantity.hint_for(amount)}") from None
        quota[name] = amount
    return quota


def quota_for(node: dict, asked: dict[str, str]) -> dict[str, str]:
    """The ClusterQueue's nominal quota: the node's allocatable CPU, memory and GPUs, each replaced
    by what `--kueue-quota` asked for."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    quota = {r: allocatable[r] for r in QUOTA_RESOURCES if r in allocatable and allocatable[r] not in ("0", 0)}
    return {**quota, **asked}


def queues(quota: dict[str, str]) -> list[dict]:
    """A ResourceFlavor for the one node, a ClusterQueue with `quota` for every namespace, and the
    LocalQueue `default` that jobs in namespace default name."""
    return [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": list(quota), "flavors": [{"name": FLAVOR, "resources": [
                 {"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}},
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE, "namespace": QUEUE_NAMESPACE},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ]


def create_queues(layout: Layout, node_names: tuple[str, ...], asked: dict[str, str], end: float) -> dict[str, str]:
    """Apply the queues (server-side, so a restart keeps them as they are) within what the deadline
    `end` has left, as large as every node together unless asked otherwise; the quota applied."""
    from kubernetes import client

    from generator.controlplane.admin import admin_client, apply
    from generator.job import quantity

    api = admin_client(layout)
    core = client.CoreV1Api(api)
    each = [quota_for(api.sanitize_for_serialization(core.read_node(n)), {}) for n in node_names]
    summed = each[0] if len(each) == 1 else {  # one node's quota as its Node writes it
        r: quantity.write(sum(quantity.parse(q[r]) for q in each if r in q), binary=r == "memory") for r in each[0]}
    quota = {**summed, **asked}
    apply(api, queues(quota), QUEUE_NAMESPACE, end)
    return quota
