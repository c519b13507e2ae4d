"""charts/pytorch-operator on the local control plane: installed through the Helm engine with
server-side apply, and its Deployment's container run as a local process that authenticates as
the chart's ServiceAccount. Until a node runs pods, two things a kubelet and kube-proxy would do
are done here: the webhook Secret becomes files where the operator reads them, and the webhook
Service gets an EndpointSlice on this machine's address. The pod's volumes (its service-account
token, its serving certificate) are folders, mounted for the operator alone where its code reads
them."""
from __future__ import annotations

import shutil
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from generator import helm, paths
from generator.controlplane import processes
from generator.controlplane.layout import MARKER, Layout

FIELD_MANAGER = "pytorchjob-kit"
RELEASE = "training-operator"
NAMESPACE = "kubeflow"
WEBHOOK_PORT = 9443  # the operator's --webhook-server-port default, which the chart keeps
HEALTH_PORT = 8081
TOKEN_SECONDS = 7 * 24 * 3600


@dataclass
class Installed:
    namespace: str
    deployment: str
    service_account: str
    container: dict
    webhook_secret: str
    webhook_service: str


def admin_client(layout: Layout):
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(layout.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


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


def install(layout: Layout, values: dict, release: str = RELEASE, namespace: str = NAMESPACE) -> Installed:
    from kubernetes import client

    objects = render(values, release, namespace)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    ns = deployment["metadata"]["namespace"]
    api = admin_client(layout)
    core = client.CoreV1Api(api)
    if not any(o["kind"] == "Namespace" for o in objects):  # as `helm install --create-namespace`
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    apply(api, objects, ns)
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "training-operator")
    secret = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--webhook-secret-name="))
    service = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--webhook-service-name="))
    installed = Installed(ns, deployment["metadata"]["name"], pod.get("serviceAccountName", "default"), container,
                          secret, service)
    _webhook_endpoints(api, installed)
    return installed


def node_ip() -> str:
    """This machine's own non-loopback IPv4 address. Endpoints may not be loopback addresses, and
    the operator listens on every interface, so the webhook's endpoint is this one."""
    import socket
    import subprocess

    address = ""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.254.254.254", 9))  # sends nothing: only picks the outgoing interface
            address = s.getsockname()[0]
        except OSError:
            pass
    if not address or address.startswith("127."):
        try:
            listing = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                                     text=True).stdout
            address = next((line.split()[3].split("/")[0] for line in listing.splitlines()), "")
        except OSError:
            pass
    if not address or address.startswith("127."):
        raise RuntimeError("this machine has no non-loopback IPv4 address, and Kubernetes refuses loopback "
                           "endpoints; bring up a network interface (even a dummy one) and try again")
    return address


def _webhook_endpoints(api, installed: Installed) -> None:
    """What the endpoint-slice controller writes once the operator's pod is Ready, pointing at
    the local process: the API server's aggregator routing sends webhook calls here."""
    from kubernetes import client

    service = client.CoreV1Api(api).read_namespaced_service(installed.webhook_service, installed.namespace)
    port = next(p for p in service.spec.ports if p.port == 443 or p.name == "webhook-server")
    body = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{installed.webhook_service}-local", "namespace": installed.namespace,
                     "labels": {"kubernetes.io/service-name": installed.webhook_service,
                                "endpointslice.kubernetes.io/managed-by": "pytorchjob-kit"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [node_ip()], "conditions": {"ready": True}}],
        "ports": [{"name": port.name, "port": WEBHOOK_PORT, "protocol": "TCP"}],
    }
    apply(api, [body], installed.namespace)


def service_account_token(layout: Layout, installed: Installed) -> str:
    """A TokenRequest token: the operator gets exactly the chart's RBAC, like its pod would."""
    from kubernetes import client

    request = client.CoreV1Api(admin_client(layout)).create_namespaced_service_account_token(
        installed.service_account, installed.namespace,
        {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}})
    return request.status.token


def _env(container: dict, installed: Installed) -> dict[str, str]:
    """The container's env, with the downward API filled as the kubelet would."""
    pod_name = f"{installed.deployment}-local"
    fields = {"metadata.namespace": installed.namespace, "metadata.name": pod_name,
              "spec.serviceAccountName": installed.service_account, "status.podIP": node_ip()}
    env = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in (item.get("valueFrom") or {}):
            env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
    return env


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where client-go looks in a pod
SERVING_CERTS_DIR = "/tmp/k8s-webhook-server/serving-certs"  # compiled into the operator (pkg/cert)
# Run inside a private mount namespace: the pod's volumes mounted where the operator's code
# expects them ($1: service-account folder, $2: serving-certs folder, $3: the image's binary),
# visible to it alone. Fresh tmpfs over /var/run and /tmp hide the host's; everything passes
# through /var/run/pod first because a source may itself live under /tmp.
_POD_MOUNTS = f"""set -e
mount -t tmpfs pod-run /var/run
mkdir -p {SERVICE_ACCOUNT_DIR} /var/run/pod/certs
: > /var/run/pod/manager
mount --bind "$1" {SERVICE_ACCOUNT_DIR}
mount --bind "$2" /var/run/pod/certs
mount --bind "$3" /var/run/pod/manager
mount -t tmpfs pod-tmp /tmp
mkdir -p {SERVING_CERTS_DIR}
mount --bind /var/run/pod/certs {SERVING_CERTS_DIR}
shift 3
exec /var/run/pod/manager "$@"
"""


def volumes(layout: Layout) -> tuple[Path, Path]:
    """(service-account folder, serving-certs folder) of the operator's pod on this machine."""
    base = layout.root / "volumes" / "training-operator"
    return base / "serviceaccount", base / "serving-certs"


def process(layout: Layout, installed: Installed, server: str, ca: Path, bins: Path) -> tuple[list[str], dict]:
    """argv and env of the operator as its pod would run it: the Deployment's args, the image's
    binary, the container's env, and the in-cluster service-account mount with a TokenRequest
    token, so the chart's RBAC is all it gets."""
    import os
    from urllib.parse import urlparse

    container = installed.container
    command = container.get("command") or ["/manager"]
    if command != ["/manager"]:
        raise RuntimeError(f"the operator chart's container runs {command}, not the image's /manager")
    account, certs = volumes(layout)
    shutil.rmtree(account.parent, ignore_errors=True)
    account.mkdir(parents=True)
    certs.mkdir(parents=True)
    (account / "token").write_text(service_account_token(layout, installed))
    (account / "namespace").write_text(installed.namespace)
    shutil.copy(ca, account / "ca.crt")
    url = urlparse(server)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", **_env(container, installed), MARKER: str(layout.root),
           # What the kubelet gives every pod; the API server is on loopback here, not at its ClusterIP.
           "KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port)}
    # Unprivileged, a user namespace allows the mounts.
    unshare = ["unshare", "--mount", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])
    return [*unshare, "sh", "-c", _POD_MOUNTS, "pod", str(account), str(certs), str(bins / "training-operator.v1"),
            *container.get("args", [])], env


class WebhookSecretSync(threading.Thread):
    """The kubelet's Secret volume: the webhook Secret's keys as files in the pod's
    serving-certs folder, kept current."""

    def __init__(self, layout: Layout, installed: Installed, stopping: threading.Event):
        super().__init__(name="webhook-secret-sync", daemon=True)
        self.layout, self.installed, self.stopping = layout, installed, stopping
        self.folder = volumes(layout)[1]

    def run(self) -> None:
        import base64

        from kubernetes import client

        core = client.CoreV1Api(admin_client(self.layout))
        written: dict[str, bytes] = {}
        while not self.stopping.is_set():
            try:
                secret = core.read_namespaced_secret(self.installed.webhook_secret, self.installed.namespace)
                data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
                if data and data != written:
                    for key, value in data.items():
                        tmp = self.folder / f".{key}.tmp"
                        tmp.write_bytes(value)
                        tmp.replace(self.folder / key)
                    written = data
            except Exception:  # the API server restarting: try again
                pass
            self.stopping.wait(1.0)


def wait_ready(layout: Layout, installed: Installed, child: processes.Child, timeout: float = 180) -> None:
    """Ready as its readiness probe says: the certificate is written, mounted and injected."""
    processes.wait_until(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/readyz", timeout=2).status == 200,
        timeout, "the operator's /readyz (its webhook certificate written, mounted and injected)", child)
    # And the API server reaches the webhook: a dry-run that only the webhook refuses is refused by it.
    processes.wait_until(lambda: webhook_answers(layout), 60, "the API server to reach the operator's webhook", child)


def webhook_answers(layout: Layout) -> bool:
    from kubernetes import client

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "webhook-probe"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {"spec": {
               "containers": [{"name": "pytorch", "image": "busybox"}]}}}}}}
    try:
        client.CustomObjectsApi(admin_client(layout)).create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", job, dry_run="All")
    except client.ApiException as exc:
        return "admission webhook" in (exc.body or "") and "denied" in (exc.body or "")
    return False
