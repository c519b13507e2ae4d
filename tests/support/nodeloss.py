"""A node lost under a PyTorchJob and a TrainJob on a local cluster of several nodes: the jobs spread
one pod per node, the node to kill, and the timeline from the kill to NotReady, eviction, the
remedy, the replacement pods and success, as e2e's test_nodes measures it and `make bench` prints.
Each figure is seconds after the kill, read from what the API server says, polled every second."""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.waiting import wait_for

KERNEL = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
          "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")


@dataclass(frozen=True)
class Job:
    name: str
    kind: str  # PyTorchJob or TrainJob

    @property
    def selector(self) -> str:
        key = "training.kubeflow.org/job-name" if self.kind == "PyTorchJob" else "jobset.sigs.k8s.io/jobset-name"
        return f"{key}={self.name}"

    @property
    def container(self) -> str:
        return "pytorch" if self.kind == "PyTorchJob" else "node"

    def is_rank0(self, pod) -> bool:
        if self.kind == "PyTorchJob":
            return pod.metadata.name == f"{self.name}-master-0"
        return (pod.metadata.labels or {}).get("batch.kubernetes.io/job-completion-index") == "0"


def kernel_settings() -> dict[str, str]:
    return {name: Path("/proc/sys", name.replace(".", "/")).read_text().strip() for name in KERNEL}


def _pod(name: str, node: str, image: str, argv: list[str]) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
        {"name": "main", "image": image, "command": argv}]}}


def on_every_node(cluster, nodes: list[str], image: str, argv: list[str], within: float = 420) -> dict[str, str]:
    """`argv` run once in a pod bound to each node, side by side: each node's pod's log."""
    core = cluster.core()
    names = {node: f"once-{i}" for i, node in enumerate(nodes)}
    for node, name in names.items():
        core.create_namespaced_pod("default", _pod(name, node, image, argv))
    try:
        def ended() -> bool:
            found = {n: core.read_namespaced_pod(n, "default") for n in names.values()}
            phases = {pod.status.phase for pod in found.values()}
            assert "Failed" not in phases, {n: why_failed(cluster, pod) for n, pod in found.items()}
            return phases == {"Succeeded"}

        wait_for(ended, within, f"{' '.join(argv)} to run on every node")
        return {node: cluster.log(name, "default").strip() for node, name in names.items()}
    finally:
        for name in names.values():
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        wait_for(lambda: not [p for p in core.list_namespaced_pod("default").items if p.metadata.name in
                              names.values()], 120, "the pods to go")


def why_failed(cluster, pod) -> dict:
    """What a failed pod's status says (a kubelet's rejection has a reason and no container), its
    containers' ends, and its log."""
    ends = {c.name: c.state.terminated.to_dict() for c in (pod.status.container_statuses or []) if c.state.terminated}
    return {"reason": pod.status.reason, "message": pod.status.message, "containers": ends,
            "log": cluster.log(pod.metadata.name, "default")}


def pull_everywhere(cluster, image: str, nodes: list[str]) -> None:
    """The image pulled into every node's containerd before the jobs (3 GB each, side by side), so
    the jobs' waits measure the jobs, as a CI job loads its images first."""
    on_every_node(cluster, nodes, image, ["true"], within=900)


def values(cluster, tmp_path: Path, job: Job, toleration: int | None, args: list[str]) -> Path:
    """Master and two Workers (v1) or three nodes (v2), each preferring a node of its own; a claim for
    the checkpoints, which every node reaches."""
    path = tmp_path / f"{job.name}.yaml"
    target = ["--target", "v2", "--backoff-limit", "3"] if job.kind == "TrainJob" else []
    shortened = ["--node-loss-toleration", str(toleration)] if toleration is not None else []
    cluster.cli("values", "--name", job.name, "--workers", "2", "--cpu", "100m", "--memory", "256Mi", "--output-size",
                "1Gi", *shortened, *target, *args, "-o", str(path), check=True)
    key, value = job.selector.split("=")
    chosen = yaml.safe_load(path.read_text())
    chosen["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {key: value}},
                                           "topologyKey": "kubernetes.io/hostname"}}]}}
    path.write_text(yaml.safe_dump(chosen))
    return path


def pods(cluster, job: Job) -> list:
    return cluster.core().list_namespaced_pod("default", label_selector=job.selector).items


def rank0_log(cluster, job: Job) -> str:
    running = [p for p in pods(cluster, job) if job.is_rank0(p) and not p.metadata.deletion_timestamp]
    return cluster.log(running[0].metadata.name, "default", job.container) if running else ""


def training_on(cluster, job: Job, count: int) -> dict[str, str] | None:
    """{pod: node} once the job's pods run on `count` nodes and rank 0 has checkpointed two epochs."""
    found = [p for p in pods(cluster, job) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    where = {p.metadata.name: p.spec.node_name for p in found}
    if len(set(where.values())) < count or "epoch 3 step" not in rank0_log(cluster, job):
        return None
    return where


def victim(nodes: list[str], spread: dict[str, dict[str, str]]) -> str:
    """A node other than the first (the cluster's controllers run there) that holds no job's rank 0."""
    rank0 = {node for where in spread.values() for pod, node in where.items() if pod.endswith("-master-0")
             or "-node-0-0-" in pod}
    return next(n for n in nodes[1:] if n not in rank0) if set(nodes[1:]) - rank0 else nodes[-1]


def ready(cluster, node: str) -> bool:
    from kubernetes import client

    try:
        found = cluster.core().read_node_status(node)
    except client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])


@dataclass
class Timeline:
    cluster: object
    node: str
    jobs: list[Job]
    start: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)
    remedy: str = ""

    def kill(self) -> None:
        self.start = time.monotonic()

    def wait(self, mark: str, check, within: float) -> None:
        wait_for(check, within, f"{mark} after {self.node} was killed", interval=1.0)
        self.marks[mark] = round(time.monotonic() - self.start, 1)

    def remedied(self, remedy: str) -> None:
        self.remedy = remedy
        self.marks["remedy"] = round(time.monotonic() - self.start, 1)

    def not_ready(self) -> bool:
        return not ready(self.cluster, self.node)

    def evicted(self) -> bool:
        held = [p for job in self.jobs for p in pods(self.cluster, job) if p.spec.node_name == self.node]
        return bool(held) and all(p.metadata.deletion_timestamp for p in held)

    def replaced(self) -> bool:
        for job in self.jobs:
            found = pods(self.cluster, job)
            if any(p.spec.node_name == self.node and p.metadata.deletion_timestamp for p in found):
                return False
            if len([p for p in found if p.status.phase == "Running"]) < 3:
                return False
        return True

    def succeeded(self) -> bool:
        states = [json.loads(self.cluster.cli("status", j.name, "--format", "json", check=True).stdout)["state"]
                  for j in self.jobs]
        assert "Failed" not in states, states
        return all(s in ("Succeeded", "Complete") for s in states)


REMEDIES = ("node started again", "node deleted")


def rehearse(cluster, tmp_path: Path, remedy: str, toleration: int | None, args: list[str], while_lost=None,
             nodes: int = 3) -> Timeline:
    """A PyTorchJob and a TrainJob spread over the nodes, one node holding neither's rank 0 killed
    once both have checkpointed, `while_lost(jobs, node)` while their pods are Terminating there,
    then `remedy`, until both succeed; the jobs deleted after. The timeline of it."""
    tag = "back" if remedy == REMEDIES[0] else "gone"
    jobs = [Job(f"{tag}-v1", "PyTorchJob"), Job(f"{tag}-v2", "TrainJob")]
    for job in jobs:
        cluster.cli("submit", str(values(cluster, tmp_path, job, toleration, args)), check=True)
    try:
        spread = {job.name: wait_for(lambda j=job: training_on(cluster, j, nodes), 420,
                                     f"{job.name} to train with one pod on each node") for job in jobs}
        timeline = Timeline(cluster, victim(cluster.nodes(), spread), jobs)
        cluster.cli("cluster", "node", "kill", timeline.node, "--dir", str(cluster.dir), check=True)
        timeline.kill()
        timeline.wait("NotReady", timeline.not_ready, 600)
        timeline.wait("evicted", timeline.evicted, 900)
        if while_lost:
            while_lost(jobs, timeline.node)
        if remedy == REMEDIES[0]:
            cluster.cli("cluster", "node", "start", timeline.node, "--dir", str(cluster.dir), check=True)
        else:
            from generator.controlplane import build

            subprocess.run([str(build.binary("kubectl")), "delete", "node", timeline.node], env=cluster.env,
                           check=True, capture_output=True, timeout=120)
        timeline.remedied(remedy)
        timeline.wait("replaced", timeline.replaced, 600)
        timeline.wait("succeeded", timeline.succeeded, 900)
        for job in jobs:
            assert "resumed from /opt/pytorch/output/checkpoints/" in rank0_log(cluster, job), job
        return timeline
    finally:
        for job in jobs:
            cluster.cli("delete", job.name, check=False)
            cluster.core().delete_namespaced_persistent_volume_claim(f"{job.name}-output", "default")
        wait_for(lambda: not any(pods(cluster, j) for j in jobs), 300, "the jobs' pods to go")


def record(timeline: Timeline, remedy: str, path: Path) -> dict:
    """The timeline added to the JSON file at `path` (one entry per remedy), and returned."""
    entry = {"remedy": remedy, "kinds": [j.kind for j in timeline.jobs], "seconds_after_kill": timeline.marks}
    known = json.loads(path.read_text()) if path.is_file() else []
    path.write_text(json.dumps([*known, entry], indent=2))
    print(f"node loss, {remedy}: {timeline.marks}", flush=True)
    return entry


def machine_leftovers(cluster_dir: Path) -> list[str]:
    """What of a stopped cluster still shows on the machine: its network namespaces and links, mounts
    under its folder, its cgroups."""
    from generator.controlplane import network
    from generator.controlplane.realnode import host

    bridge = network.bridge_name(cluster_dir)
    found = [f"netns {n}" for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if n.startswith(bridge)]
    found += [f"link {line.split(':')[1].strip()}" for line in
              subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
              if bridge in line]
    found += [f"mount {m}" for m in host.mounts_under(cluster_dir)]
    found += [f"cgroup {c}" for c in host.cgroup_folders(cluster_dir) if c.exists()]
    return found
