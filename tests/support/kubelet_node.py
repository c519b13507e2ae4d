"""The kubelet as one PodWorker sees it (generator/controlplane/kubelet/pod.py asks its node for
these), for tests that drive a pod worker without a cluster: what it records (events, log lines,
status reports) is kept for the test to read."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from generator.controlplane.kubelet import cgroups as cgroup_tree
from generator.controlplane.layout import Layout


class Node:
    def __init__(self, root: Path, *, cgroups: cgroup_tree.Hierarchies | None = None, cgroup_cluster: str = "test",
                 core=None, node_ip: str = "10.244.0.1", allocatable: dict | None = None) -> None:
        self.layout = Layout(root)  # the provisioner's folder under it is the only host folder
        self.root, self.toolbox, self.aliases, self.node_ip = root, root / "toolbox", {}, node_ip
        self.allocatable = allocatable or {"cpu": "2", "memory": "4Gi"}
        # No hierarchies unless given: nothing to make or kill
        self.cgroups, self.cgroup_cluster = cgroups or cgroup_tree.Hierarchies(None, None, None), cgroup_cluster
        self.events: list[tuple[str, str, str]] = []
        self.lines: list[str] = []
        self.reports: list[dict] = []
        self.core = core or SimpleNamespace(
            patch_namespaced_pod_status=lambda name, ns, body, **_: self.reports.append(body))

    def event(self, pod: dict, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))

    def log(self, text: str) -> None:
        self.lines.append(text)

    def base_env(self, program, worker) -> dict:
        return {"PATH": "/usr/bin:/bin"}

    def hosts_file(self, worker) -> Path:
        path = worker.folder / "hosts"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("127.0.0.1 localhost\n")
        return path


def ready(worker, now: float, pod_ip: str = "10.244.7.2"):
    """A worker past its sandbox: the pod has its IP and no volumes to refresh."""
    worker.sandbox, worker.refreshed, worker.pod_ip = True, now, pod_ip
    worker.volumes = SimpleNamespace(paths={}, refresh=lambda: None, remove=lambda: None)
    return worker
