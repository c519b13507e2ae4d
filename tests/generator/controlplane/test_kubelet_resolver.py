"""The process node's resolver: which pod IPs a pod's /etc/hosts gives for each Service."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from generator.controlplane.kubelet import Kubelet


def pod(ip: str, ready: bool, deleting: bool = False, labels: dict | None = None):
    meta = {"labels": labels or {"app": "operator"}, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return SimpleNamespace(pod_ip=ip, sandbox=True, finished=threading.Event(), namespace="kubeflow", ready=ready,
                           hostname=f"pod-{ip}", pod={"metadata": meta, "spec": {}})


def service(name: str, cluster_ip: str = "10.96.0.10"):
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace="kubeflow"),
                           spec=SimpleNamespace(selector={"app": "operator"}, cluster_ip=cluster_ip))


def addresses(pods: list, svc) -> list[str]:
    node = SimpleNamespace(lock=threading.Lock(), workers={i: p for i, p in enumerate(pods)}, host_hosts="")
    me = pod("10.244.0.99", True, labels={"app": "client"})
    text = Kubelet._hosts(node, me, [svc])
    return [line.split("\t")[0] for line in text.splitlines() if f"\t{svc.metadata.name} " in line]


def test_a_service_sends_clients_to_the_old_pod_until_the_new_one_is_ready():
    """A Deployment rolling over: the new pod runs but is not Ready yet, and must not be reached."""
    metrics = service("metrics")
    old, new = pod("10.244.0.2", True), pod("10.244.0.3", False)
    assert addresses([old, new], metrics) == ["10.244.0.2"]
    # The new pod is Ready and the old one is being deleted: only the new one.
    old, new = pod("10.244.0.2", True, deleting=True), pod("10.244.0.3", True)
    assert addresses([old, new], metrics) == ["10.244.0.3"]
    # Nothing else Ready: a pod still serving while it is deleted is better than none, as kube-proxy does.
    assert addresses([old, pod("10.244.0.3", False)], metrics) == ["10.244.0.2"]


def test_a_headless_service_names_every_running_pod_ready_ones_first():
    headless = service("job-master-0", cluster_ip="None")
    assert addresses([pod("10.244.0.3", False), pod("10.244.0.2", True)], headless) == ["10.244.0.2", "10.244.0.3"]
