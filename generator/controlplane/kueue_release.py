"""Kueue on the local cluster (`cluster up --kueue`), installed as a user installs it: upstream's
kueue chart through the helm CLI, from the Go module cache that `cluster build` filled (never
copied into the repository), with the PyTorchJob and TrainJob integrations on. Then the queues a
job's `kueue.queueName` names: a ResourceFlavor, a ClusterQueue whose quota is the node's (or what
`--kueue-quota` says) and the LocalQueue `default` in namespace default. The chart's image is read
from the chart; the registry on this machine holds it, made from the built controller."""
from __future__ import annotations

import functools
import subprocess
import time
from pathlib import Path

import yaml

from generator import kinds
from generator.controlplane import build, pins, processes
from generator.controlplane.layout import Layout
from generator.controlplane.state import OperatorRelease
from generator.errors import UserError

RELEASE = "kueue"
NAMESPACE = "kueue-system"
CONTROLLER = f"{RELEASE}-controller-manager"  # the chart's fullname is the release's name
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


def chart(cache: Path | None = None) -> Path:
    from generator.controlplane.trainer_release import module_cache

    return (cache or module_cache()) / f"{pins.KUEUE_MODULE}@{pins.KUEUE_VERSION}" / "charts" / "kueue"


def checked_chart() -> Path:
    path = chart()
    if not (path / "Chart.yaml").is_file():
        raise UserError(f"{path}: no such chart in the Go module cache, where `cluster build` leaves it; run "
                        f"`go mod download {pins.KUEUE_MODULE}@{pins.KUEUE_VERSION}` (or `python -m generator "
                        "cluster build` after clearing the cache)")
    return path


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


def install(layout: Layout, env: dict[str, str]) -> OperatorRelease:
    path = checked_chart()
    values_file = layout.root / "kueue-values.yaml"
    values_file.write_text(yaml.safe_dump(values(path)))
    argv = [str(build.binary(pins.HELM_BINARY)), "install", RELEASE, str(path), "--namespace", NAMESPACE,
            "--create-namespace", "--values", str(values_file), "--timeout", "5m"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"helm install {RELEASE} {path} failed: {proc.stderr.strip()}")
    return OperatorRelease(NAMESPACE, CONTROLLER, RELEASE)


def wait_ready(layout: Layout, kubelet: processes.Child, timeout: float = 300) -> None:
    """The controller's Deployment available (Ready once it wrote its certificate and leads), its
    webhooks answering through the API server, and its visibility API served: until then the
    webhooks' `failurePolicy: Fail` refuses every PyTorchJob and TrainJob, and discovery fails."""
    from kubernetes import client

    from generator.controlplane.operator import admin_client, holds

    end = time.monotonic() + timeout  # one timeout for every step, as loaded a machine may be
    api = admin_client(layout)
    apps = client.AppsV1Api(api)

    def available() -> bool:
        return holds(apps.read_namespaced_deployment_status(CONTROLLER, NAMESPACE), "Available")

    processes.wait_until(available, processes.left(end), f"deployment {NAMESPACE}/{CONTROLLER} to be available (its pod run by "
                         "the kubelet and Ready)", kubelet, interval=0.5)
    processes.wait_until(lambda: webhooks_answer(api), processes.left(end), "the API server to reach Kueue's webhooks", kubelet,
                         interval=0.5)
    processes.wait_until(lambda: _visibility_served(api), processes.left(end), "the API server to serve Kueue's visibility API",
                         kubelet, interval=0.5)


def webhooks_answer(api) -> bool:
    """A dry-run ClusterQueue whose quota names another resource than it covers is refused by
    Kueue's webhook alone (the CRD's own rules let it pass): it answers only once the API server
    reaches it with a certificate it trusts."""
    from kubernetes import client

    probe = {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "webhook-probe"},
             "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "probe", "resources": [
                 {"name": "memory", "nominalQuota": "1"}]}]}]}}
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", probe,
                                                                  dry_run="All")
    except client.ApiException as exc:
        return "admission webhook" in (exc.body or "") and "denied" in (exc.body or "")
    return False


def _visibility_served(api) -> bool:
    from kubernetes import client

    from generator.controlplane.operator import holds

    try:
        service = client.ApiregistrationV1Api(api).read_api_service("v1beta2.visibility.kueue.x-k8s.io")
    except client.ApiException:
        return False
    return holds(service, "Available")


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


def create_queues(layout: Layout, node_name: str, asked: dict[str, str]) -> dict[str, str]:
    """Apply the queues (server-side, so a restart keeps them as they are); the quota applied."""
    from kubernetes import client

    from generator.controlplane.operator import admin_client, apply

    api = admin_client(layout)
    node = api.sanitize_for_serialization(client.CoreV1Api(api).read_node(node_name))
    quota = quota_for(node, asked)
    apply(api, queues(quota), QUEUE_NAMESPACE)
    return quota
