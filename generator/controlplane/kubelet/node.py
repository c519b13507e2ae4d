"""The Node object of the process node: its capacity (this machine's CPUs and memory unless
told otherwise, plus nvidia.com/gpu when asked), its Ready condition, its addresses and the
port its log server listens on, and its heartbeat: a Lease renewed every ten seconds, as the
node lifecycle controller expects."""
from __future__ import annotations

import datetime
import platform

from generator.container.machine import allocatable as capacity  # noqa: F401 (the node's capacity is this machine's)

LEASE_SECONDS = 40
RENEW_SECONDS = 10.0
STATUS_SECONDS = 60.0  # the full status (conditions' heartbeat) when nothing changed


def kubelet_version() -> str:
    """The release of the control plane it joins, as go.mod pins it: stated there alone."""
    from generator.controlplane import build

    return build.kube_version()


def micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def manifest(name: str, pod_cidr: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": _arch(), "beta.kubernetes.io/os": "linux",
                                                  "beta.kubernetes.io/arch": _arch()},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}}


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def status(name: str, address: str, port: int, resources: dict[str, str], heartbeat: str) -> dict:
    def condition(kind: str, value: str, reason: str, message: str) -> dict:
        return {"type": kind, "status": value, "reason": reason, "message": message,
                "lastHeartbeatTime": heartbeat, "lastTransitionTime": heartbeat}

    return {
        "capacity": resources, "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "the process kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {"machineID": _machine_id(), "systemUUID": _machine_id(), "bootID": _boot_id(),
                     "kernelVersion": platform.release(), "osImage": _os_image(),
                     "containerRuntimeVersion": "process://pytorchjob-kit", "kubeletVersion": kubelet_version(),
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": _arch()},
    }


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _machine_id() -> str:
    return _read("/etc/machine-id") or "pytorchjob-kit"


def _boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return platform.system()


def register(core, name: str, pod_cidr: str) -> None:
    from kubernetes import client

    try:
        core.create_node(manifest(name, pod_cidr))
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def post_status(core, name: str, address: str, port: int, resources: dict[str, str]) -> None:
    # A merge patch: capacity and conditions are this node's to state in full.
    core.patch_node_status(name, {"status": status(name, address, port, resources, micro()[:19] + "Z")},
                           _content_type="application/merge-patch+json")


def renew_lease(coordination, name: str) -> None:
    """The heartbeat: create the node's Lease, or move its renewTime on."""
    from kubernetes import client

    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro()}}
    try:
        coordination.patch_namespaced_lease(name, "kube-node-lease", {"spec": body["spec"]},
                                            _content_type="application/merge-patch+json")
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        coordination.create_namespaced_lease("kube-node-lease", body)
