"""The local cluster's API as its admin kubeconfig reaches it: the client every step, wait and
report of the control plane uses, the one reading of a condition, and server-side apply for what
the cluster itself installs (its StorageClass, CoreDNS's RBAC, Kueue's queues)."""
from __future__ import annotations

from generator import FIELD_MANAGER
from generator.controlplane import processes
from generator.controlplane.layout import Layout


def admin_client(layout: Layout):
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(layout.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def holds(obj, condition: str) -> bool:
    """Whether an object the API returned (a Node, Pod, Deployment, APIService) has `condition` True:
    the one reading of Ready and Available every wait and report here uses."""
    return any(c.type == condition and c.status == "True" for c in (obj.status.conditions or []))


def apply(api, objects: list[dict], namespace: str, end: float) -> None:
    """Server-side apply in dependency order: namespaces and CRDs (established within what the
    deadline `end`, the bring-up's, has left) first."""
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(api)
    first = [o for o in objects if o["kind"] in ("Namespace", "CustomResourceDefinition")]
    rest = [o for o in objects if o not in first]
    for group in (first, rest):
        for obj in group:
            resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            ns = obj["metadata"].get("namespace") or (namespace if resource.namespaced else None)
            resource.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=ns,
                                       field_manager=FIELD_MANAGER, force_conflicts=True)
        for crd in (o for o in group if o["kind"] == "CustomResourceDefinition"):
            processes.wait_until(lambda name=crd["metadata"]["name"]: _established(dyn, name), processes.left(end),
                                 f"CRD {crd['metadata']['name']} to be established")


def _established(dyn, name: str) -> bool:
    return holds(dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition").get(name=name),
                 "Established")
