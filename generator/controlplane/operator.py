"""charts/pytorch-operator on the local control plane, installed by `helm install` as a release.
The Deployment's pod then runs on the node like any pod; this module only waits for
it. `apply` is server-side apply, for what the cluster itself installs (its StorageClass)."""
from __future__ import annotations

import time

from generator import FIELD_MANAGER, helm, paths
from generator.controlplane import processes
from generator.controlplane.layout import Layout
from generator.controlplane.state import OperatorRelease

RELEASE = "training-operator"
NAMESPACE = "kubeflow"


def admin_client(layout: Layout):
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(layout.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def holds(obj, condition: str) -> bool:
    """Whether an object the API returned (a Node, Pod, Deployment, APIService) has `condition` True:
    the one reading of Ready and Available every wait and report here uses."""
    return any(c.type == condition and c.status == "True" for c in (obj.status.conditions or []))


def render(values: dict, release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict]:
    """What `helm install` creates: the rendered objects without `helm test` hooks."""
    return [o for o in helm.render_objects(paths.OPERATOR_CHART, values, release, namespace)
            if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]


def apply(api, objects: list[dict], namespace: str) -> None:
    """Server-side apply in dependency order: namespaces and CRDs (established) first."""
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
            processes.wait_until(lambda name=crd["metadata"]["name"]: _established(dyn, name), 60,
                                 f"CRD {crd['metadata']['name']} to be established")


def _established(dyn, name: str) -> bool:
    crd = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition").get(name=name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def helm_env(layout: Layout) -> dict[str, str]:
    """The helm CLI against this cluster, as the user's shell would run it."""
    import os

    from generator.controlplane import components

    return {**os.environ, **components.helm_env(layout)}


def install(layout: Layout, values: dict, release: str = RELEASE, namespace: str = NAMESPACE) -> OperatorRelease:
    """`helm install` of charts/pytorch-operator as a release that `helm list`, `helm upgrade`,
    `helm test` and `helm uninstall` see, as a user would install it on any cluster."""
    import subprocess

    from generator.controlplane import components

    objects = render(values, release, namespace)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    ns = deployment["metadata"]["namespace"]
    helm = components.operator_install(layout, values, release, ns,
                                       create_namespace=not any(o["kind"] == "Namespace" for o in objects))
    components.write_files(helm)
    proc = subprocess.run(helm.argv, env=helm_env(layout), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"helm install {release} charts/pytorch-operator failed: {proc.stderr.strip()}")
    return OperatorRelease(ns, deployment["metadata"]["name"], release)


def wait_ready(layout: Layout, installed: OperatorRelease, kubelet: processes.Child, timeout: float = 300) -> None:
    """The Deployment available (its pod Ready by its readiness probe: the certificate written,
    mounted and injected), and the API server reaching the webhook through its endpoints."""
    from kubernetes import client

    end = time.monotonic() + timeout  # one timeout for every step, as loaded a machine may be
    apps = client.AppsV1Api(admin_client(layout))

    def available() -> bool:
        return holds(apps.read_namespaced_deployment_status(installed.deployment, installed.namespace), "Available")

    processes.wait_until(available, processes.left(end), f"deployment {installed.namespace}/{installed.deployment} to be available "
                         "(its pod run by the kubelet and Ready)", kubelet, interval=1.0)
    # A dry-run that only the webhook refuses is refused by it.
    processes.wait_until(lambda: webhook_answers(layout), processes.left(end), "the API server to reach the operator's "
                         "webhook", kubelet)


def webhook_answers(layout: Layout) -> bool:
    from kubernetes import client

    from generator.kinds import PYTORCHJOB as kind

    job = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "webhook-probe"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {"spec": {
               "containers": [{"name": kind.container, "image": "busybox"}]}}}}}}
    try:
        client.CustomObjectsApi(admin_client(layout)).create_namespaced_custom_object(
            kind.group, kind.version, "default", kind.plural, job, dry_run="All")
    except client.ApiException as exc:
        return "admission webhook" in (exc.body or "") and "denied" in (exc.body or "")
    return False
