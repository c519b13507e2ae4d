"""Each container of the process node in its own cgroup: the node's cleanup kills every process a
container started, even one that left its session and cleared its env, and a memory limit is the
kernel's, reported as OOMKilled as a kubelet reports it. Real containers, real cgroups (root)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from generator.controlplane.kubelet import cgroups
from generator.controlplane.kubelet import pod as pods
from tests.support.kubelet_node import Node, ready
from tests.support.waiting import wait_for

WHERE = cgroups.Hierarchies.find()
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or WHERE.v2 is None, reason="needs root and a writable cgroup v2")


@pytest.fixture
def node(tmp_path):
    """Real cgroups under a cluster name of the test's own."""
    root = tmp_path / "cluster"
    node = Node(root, cgroups=WHERE, cgroup_cluster=cgroups.cluster_name(root))
    node.layout.create()
    node.toolbox.mkdir()
    yield node
    cgroups.kill_cluster(node.root)


def worker(node: Node, container: dict) -> pods.PodWorker:
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": f"uid-{time.monotonic_ns()}"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "app", "image": "busybox", **container}]}}
    w = pods.PodWorker(node, pod)
    return ready(w, w.clock())


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_process_that_left_its_session_and_cleared_its_env_dies_with_its_pod(node):
    # $$$$: Kubernetes turns $$ into $ in a command.
    w = worker(node, {"command": ["sh", "-c", "setsid env -i sh -c 'echo escaped $$$$; exec sleep 300' & "
                                              "exec sleep 300"]})
    w._step()
    log = w.log_path(w.main[0], 0)
    wait_for(lambda: "escaped" in (log.read_text() if log.exists() else ""), 20, "the escaped process's pid in the log",
             interval=0.05)
    escaped = int(log.read_text().split("escaped ")[1].split()[0])
    assert alive(escaped) and os.getsid(escaped) == escaped  # its own session, out of the container's group
    w._kill_all(1.0)
    wait_for(lambda: not alive(escaped), 5, f"the escaped process {escaped} to die", interval=0.05)
    assert w.main[0].state["terminated"]["exitCode"] == 143  # its own process stopped by SIGTERM, as before


@pytest.mark.skipif(WHERE.memory is None, reason="needs a writable memory cgroup")
def test_a_container_over_its_memory_limit_is_oom_killed_and_reported_so(node):
    w = worker(node, {"command": ["python3", "-c", "x = bytearray(300 * 2**20); print(len(x))"],
                      "resources": {"limits": {"memory": "64Mi"}}})
    w._step()

    def failed() -> bool:
        w._step()
        return w.phase == "Failed"

    wait_for(failed, 30, "the container over its limit to fail", interval=0.1)
    terminated = w.main[0].state["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
