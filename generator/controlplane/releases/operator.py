"""charts/pytorch-operator as the release `cluster up` installs, from the registry on this machine
as a user installs a chart from theirs: the Deployment's pod then runs on the node like any pod,
and is waited for as every release is (base.py)."""
from __future__ import annotations

from generator import helm, paths
from generator.controlplane.releases.base import Chart, Probe, Release
from generator.kinds import PYTORCHJOB as _KIND

NAME = "training-operator"
NAMESPACE = "kubeflow"

# A PyTorchJob of two Masters: the CRD lets it pass, the operator's webhook alone refuses it.
PROBE = Probe({"apiVersion": _KIND.api_version, "kind": _KIND.kind, "metadata": {"name": "webhook-probe"},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {"spec": {
                   "containers": [{"name": _KIND.container, "image": "busybox"}]}}}}}}, _KIND.plural)
# Its Deployment is where the chart renders it with the user's values: `release(values)`.
RELEASE = Release(NAME, NAMESPACE, (), "the operator's webhook", (PROBE,), "operator-values.yaml")


def render(values: dict, name: str = NAME, namespace: str = NAMESPACE) -> list[dict]:
    """What `helm install` creates: the rendered objects without `helm test` hooks."""
    return [o for o in helm.render_objects(paths.OPERATOR_CHART, values, name, namespace)
            if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]


def release(values: dict) -> tuple[Release, bool]:
    """The release with `values`: its Deployment where the chart renders it, and whether helm must
    create its namespace (the chart makes one of its own when told to)."""
    objects = render(values)
    deployment = next(o for o in objects if o["kind"] == "Deployment")["metadata"]
    return (RELEASE.with_deployment(deployment["namespace"], deployment["name"]),
            not any(o["kind"] == "Namespace" for o in objects))


def chart() -> Chart:
    """charts/pytorch-operator from the registry on this machine, which holds it as an OCI artifact
    (oci_charts.py): `helm install NAME oci://127.0.0.1:PORT/charts/pytorch-operator --version V`."""
    from generator.controlplane import oci_charts, registry

    return oci_charts.source(registry.default(), paths.OPERATOR_CHART)
