"""The process kubelet: the node of the local control plane. It registers a Node and keeps its
Lease fresh, runs each pod the scheduler binds to it as local processes (pod.py), answers the
API server's pods/log (logs.py), and gives each pod a sandbox and a resolver.

The sandbox is a network namespace with the pod's own IP on the cluster's bridge, shared by its
containers: they reach each other on localhost, listen on any port without meeting another
pod, and the API server reaches the pod at its IP, as the EndpointSlice controller lists it. The
resolver is an /etc/hosts of the pod's own, kept current, in which each Service names the IPs
of the pods kube-proxy would send its traffic to (there is no kube-proxy for ClusterIPs), and a
headless Service those of all its running pods, ready ones first.

    python -m generator.controlplane.kubelet DIR --server URL --bridge NAME --pod-cidr CIDR
        [--node-name NAME] [--port PORT] [--node JSON]

--node is state.NodeOptions as JSON (capacity and image aliases), as the supervisor encodes it
(components.kubelet builds this command line)."""
from __future__ import annotations

import argparse
import faulthandler
import signal
import socket
import threading
import time
import traceback
from pathlib import Path

from generator.container import ports, programs
from generator.controlplane import build, network, pki
from generator.controlplane.kubelet import cgroups, logs, node
from generator.controlplane.kubelet.pod import SHUTDOWN_GRACE, PodWorker, now, transient
from generator.controlplane.layout import MARKER, Layout
from generator.controlplane.state import NodeOptions

EVENT_REPEAT_SECONDS = 300.0  # the same event for the same pod is told once in this long
RESOLVER_SECONDS = 1.0

# busybox's nslookup, answered by the pod's resolver: the operator's init container waits with it.
NSLOOKUP = """#!/bin/sh
# nslookup NAME: what cluster DNS answers, from this pod's /etc/hosts (the process kubelet keeps it).
for name in "$@"; do case "$name" in -*) ;; *) target="$name"; break;; esac; done
answer=$(getent hosts "$target") || { echo "** server can't find $target: NXDOMAIN"; exit 1; }
echo "Server:    process-kubelet"
echo "Name:      $target"
echo "Address:   ${answer%% *}"
"""

# apk in a shell image: what sits beside it already (kubectl) is installed; anything else is not there
# to install, as for an alpine without network. The process node's toolbox holds it, and so does the
# alpine stand-in the real node pulls (controlplane/chart_images.py), with the cluster's own kubectl.
APK = """#!/bin/sh
[ "$1" = add ] || { echo "apk $1: not available on the process node" >&2; exit 1; }
shift
packages=""
for pkg in "$@"; do
  case "$pkg" in -*) continue;; esac
  [ -x "$(dirname "$0")/$pkg" ] || { echo "ERROR: unable to select packages: $pkg (no such package)" >&2; exit 1; }
  packages="$packages $pkg"
done
echo "OK:$packages already here (no network to install from)"
"""


def node_name() -> str:
    """This machine's hostname as a Node name (DNS-1123, lower case)."""
    raw = socket.gethostname().lower()
    name = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in raw).strip("-.")
    return name[:63] or "localhost"


class Kubelet:
    def __init__(self, layout: Layout, server: str, resources: dict[str, str], name: str, pods: network.PodNetwork,
                 port: int, aliases: dict[str, str] | None = None):
        from kubernetes import client, config

        self.layout, self.server, self.name, self.port = layout, server, name, port
        self.network, self.addresses = pods, network.Addresses(pods)
        self.node_ip = pods.gateway
        self.allocatable = resources
        self.aliases = aliases or {}
        self.root = layout.root / "kubelet"
        self.toolbox = self.root / "toolbox"
        self.cgroups, self.cgroup_cluster = cgroups.Hierarchies.find(), cgroups.cluster_name(layout.root)
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(layout.component_kubeconfig("kubelet")), client_configuration=configuration)
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.told: dict[tuple, float] = {}
        self.services: list = []  # the last Service listing that worked
        self.services_failing = False
        self.host_hosts = Path("/etc/hosts").read_text(errors="replace") if Path("/etc/hosts").exists() else ""

    def log(self, text: str) -> None:
        print(f"{now()} {text}", flush=True)

    # --- what pods get ---------------------------------------------------------------------
    def base_env(self, program: programs.Program, worker: PodWorker) -> dict[str, str]:
        """The image's ENV and what the kubelet adds to every container."""
        from urllib.parse import urlparse

        url = urlparse(self.server)
        return {**program.env(), "HOSTNAME": worker.hostname, "HOME": str(worker.folder / "home"),
                # The API server listens on the bridge here, not at the `kubernetes` Service's ClusterIP.
                "KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(url.port), "KUBERNETES_PORT": f"tcp://{url.hostname}:{url.port}",
                MARKER: str(self.layout.root)}

    def hosts_file(self, worker: PodWorker) -> Path:
        path = worker.folder / "hosts"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self._hosts(worker, self._services()))
        return path

    def _services(self) -> list:
        """The cluster's Services. A failed listing is not "no Services": the pods' resolvers keep
        the last listing (told once in the log, until a listing works again) and the resolver's
        next round tries again."""
        try:
            items = self.core.list_service_for_all_namespaces().items
        except transient() as exc:
            if not self.services_failing:
                self.log(f"listing Services failed: {exc!r}; pods' resolvers keep the last listing and it is tried "
                         f"again every {RESOLVER_SECONDS:g}s")
            self.services_failing = True
            return self.services
        if self.services_failing:
            self.log("listing Services works again")
        self.services, self.services_failing = items, False
        return items

    def _hosts(self, worker: PodWorker, services: list) -> str:
        with self.lock:
            running = [w for w in self.workers.values() if w.pod_ip and w.sandbox and not w.finished.is_set()]
        lines = [self.host_hosts.rstrip("\n"), f"{worker.pod_ip or '127.0.0.1'}\t{worker.hostname}  # this pod",
                 "# Services, with the running pods each selects"]
        for svc in services:
            ns, selector = svc.metadata.namespace, svc.spec.selector
            if not selector:
                continue
            n = svc.metadata.name
            names = f"{n}.{ns} {n}.{ns}.svc {n}.{ns}.svc.cluster.local"
            if ns == worker.namespace:
                names = f"{n} {names}"
            selected = [w for w in running if w.namespace == ns and all(
                (w.pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
            if svc.spec.cluster_ip == "None":
                # Ready pods first: a resolver answers with the first line that names the host.
                chosen = sorted(selected, key=lambda w: not w.ready)
            else:
                chosen = _serving(selected)
            lines += [f"{w.pod_ip}\t{names}" for w in chosen]
            if svc.spec.cluster_ip == "None":
                # A headless Service also names each pod whose subdomain it is: <hostname>.<service>,
                # as JobSet's PET_MASTER_ADDR <job>-node-0-0.<job> expects.
                for w in chosen:
                    if w.pod["spec"].get("subdomain") == n:
                        full = f"{w.hostname}.{n}"
                        short = f"{full} " if ns == worker.namespace else ""
                        lines.append(f"{w.pod_ip}\t{short}{full}.{ns} {full}.{ns}.svc {full}.{ns}.svc.cluster.local")
        return "\n".join(lines) + "\n"

    def _resolver(self) -> None:
        """Keeps every pod's /etc/hosts current, in place: it is bind-mounted by inode."""
        while not self.stopping.wait(RESOLVER_SECONDS):
            services = self._services()
            with self.lock:
                workers = list(self.workers.values())
            for w in workers:
                path = w.folder / "hosts"
                if path.exists():
                    content = self._hosts(w, services)
                    if path.read_text() != content:
                        path.write_text(content)

    def event(self, pod: dict, kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        key = (meta["uid"], reason, message)
        if time.monotonic() - self.told.get(key, -EVENT_REPEAT_SECONDS) < EVENT_REPEAT_SECONDS:
            return
        self.told[key] = time.monotonic()
        stamp = now()
        body = {"metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": meta["namespace"],
                                   "uid": meta["uid"], "resourceVersion": meta.get("resourceVersion")},
                "reason": reason, "message": message, "type": kind, "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": self.name},
                "reportingComponent": "kubelet", "reportingInstance": self.name}
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except Exception as exc:
            self.log(f"event {reason} for {meta['namespace']}/{meta['name']} not recorded: {exc}")

    def container(self, namespace: str, pod: str, name: str):
        """(worker, container) for the log server."""
        with self.lock:
            worker = next((w for w in self.workers.values() if w.namespace == namespace and w.pod_name == pod), None)
        if worker is None:
            raise logs.NotFound(f'pod "{pod}" in namespace "{namespace}" not found on node {self.name}')
        container = worker.find(name)
        if container is None:
            raise logs.NotFound(f'container "{name}" in pod "{pod}" not found')
        return worker, container

    # --- the node --------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        last_status = time.monotonic()
        while not self.stopping.wait(node.RENEW_SECONDS):
            try:
                node.renew_lease(self.coordination, self.name)
                if time.monotonic() - last_status >= node.STATUS_SECONDS:
                    node.post_status(self.core, self.name, self.node_ip, self.port, self.allocatable)
                    last_status = time.monotonic()
            except Exception as exc:
                self.log(f"heartbeat failed: {exc}")

    def _pod(self, obj) -> dict:
        return self.api.sanitize_for_serialization(obj)

    def _seen(self, pod: dict, deleted: bool = False) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
        if worker is not None:
            if deleted:
                worker.gone = True
            else:
                worker.update(pod)
            return
        if deleted:
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            # Finished before this kubelet started: nothing to run; a deletion only needs its last step.
            if pod["metadata"].get("deletionTimestamp"):
                from kubernetes import client

                try:
                    self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                    body=client.V1DeleteOptions(
                                                        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)))
                except client.ApiException:
                    pass
            return
        worker = PodWorker(self, pod)
        with self.lock:
            self.workers[uid] = worker
        worker.start()

    def _watch(self) -> None:
        from kubernetes import watch

        selector = f"spec.nodeName={self.name}"
        while not self.stopping.is_set():
            try:
                listing = self.core.list_pod_for_all_namespaces(field_selector=selector)
                present = set()
                for obj in listing.items:
                    pod = self._pod(obj)
                    present.add(pod["metadata"]["uid"])
                    self._seen(pod)
                with self.lock:
                    missing = [w for uid, w in self.workers.items() if uid not in present]
                for w in missing:
                    w.gone = True
                stream = watch.Watch()
                for event in stream.stream(self.core.list_pod_for_all_namespaces, field_selector=selector,
                                           resource_version=listing.metadata.resource_version, timeout_seconds=60):
                    if self.stopping.is_set():
                        stream.stop()
                        break
                    self._seen(self._pod(event["object"]), deleted=event["type"] == "DELETED")
            except Exception as exc:
                if not self.stopping.is_set():
                    self.log(f"pod watch: {exc}; listing again")
                    self.stopping.wait(1.0)
            self._forget()

    def _forget(self) -> None:
        with self.lock:
            for uid in [uid for uid, w in self.workers.items() if w.finished.is_set()]:
                del self.workers[uid]

    def run(self) -> None:
        self.toolbox.mkdir(parents=True, exist_ok=True)
        for name, text in (("nslookup", NSLOOKUP), ("apk", APK)):
            (self.toolbox / name).write_text(text)
            (self.toolbox / name).chmod(0o755)
        kubectl = self.toolbox / "kubectl"  # the shell images' kubectl: the cluster's own release
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(build.binary("kubectl"))
        ca = pki.Authority(self.layout.pki)
        serving = ca.issue(f"kubelet-serving-{self.node_ip}", self.name, server=True, names=[self.name],
                           ips=[self.node_ip, "127.0.0.1"])
        self.logs = logs.serve(self, self.node_ip, self.port, serving[0], serving[1], ca.cert_path)
        node.register(self.core, self.name, self.network.cidr)
        node.post_status(self.core, self.name, self.node_ip, self.port, self.allocatable)
        node.renew_lease(self.coordination, self.name)
        self.log(f"node {self.name} registered at {self.node_ip}, capacity {self.allocatable}; logs on port {self.port}")
        for target in (self._heartbeat, self._resolver):
            threading.Thread(target=target, name=target.__name__, daemon=True).start()
        self._watch()

    def stop(self) -> None:
        """Every pod's processes stopped: nothing outlives the node."""
        self.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stopping.set()
        for w in workers:
            w.finished.wait(SHUTDOWN_GRACE + 15)
        if getattr(self, "logs", None):
            self.logs.shutdown()


def _serving(pods: list[PodWorker]) -> list[PodWorker]:
    """The pods a Service with a ClusterIP sends traffic to, as kube-proxy picks them: the Ready ones
    not being deleted, else the Ready ones being deleted; never a pod that is not Ready. So while a
    Deployment rolls, clients reach the old pod until the new one is Ready. (A resolver sorts the
    addresses of a name by their prefix shared with its own, so order alone cannot keep them away.)"""
    ready = [w for w in pods if w.ready]
    staying = [w for w in ready if not w.pod["metadata"].get("deletionTimestamp")]
    return staying or ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.controlplane.kubelet")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--server", required=True)
    parser.add_argument("--bridge", required=True, help="the cluster's bridge, whose first address is the node's")
    parser.add_argument("--pod-cidr", required=True, help="the bridge's subnet, from which pods take their IPs")
    parser.add_argument("--node-name", default=None)
    parser.add_argument("--port", type=int, default=0, help="the log server's port (default: a free one)")
    parser.add_argument("--node", type=NodeOptions.decode, default=NodeOptions(), metavar="JSON",
                        help="capacity and image aliases (state.NodeOptions as JSON)")
    args = parser.parse_args(argv)
    name = args.node_name or node_name()
    options: NodeOptions = args.node
    pods = network.PodNetwork(args.bridge, args.pod_cidr)
    kubelet = Kubelet(Layout(args.dir.resolve()), args.server, node.capacity(options.cpu, options.memory, options.gpus),
                      name, pods, args.port or ports.free_port(pods.gateway), options.images)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: kubelet.stopping.set())
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1` writes every thread's stack to the kubelet's log
    runner = threading.Thread(target=kubelet.run, name="kubelet", daemon=True)
    runner.start()
    try:
        while runner.is_alive() and not kubelet.stopping.wait(0.5):
            pass
    except Exception:
        traceback.print_exc()
    kubelet.stop()
    return 0 if kubelet.stopping.is_set() else 1

