"""Three real nodes on one control plane (`cluster up --nodes 3`), and a node lost mid-training.

Pods on different nodes reach each other, their Services and the cluster's DNS; a PyTorchJob and a
TrainJob spread one pod per node train together across them. Then a node holding a Worker of each
loses its power (`cluster node kill`): Kubernetes marks it NotReady after the rehearsal's grace
period, the taint manager evicts its pods after the jobs' nodeLossTolerationSeconds, they stay
Terminating, `diagnose` names the lost node and the remedies, and both jobs resume from their
checkpoints and succeed after each remedy: the node started again, and the node deleted (PodGC
removes its pods). `cluster down` after a kill leaves nothing running, mounted or changed. The
times from the kill to each step are written to the module's timeline (tests/support/nodeloss.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import forget_images, leftover_processes, needs_real_node, start_cluster, stop_cluster, trainer_image
from tests.support import nodeloss
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.alone, needs_real_node, pytest.mark.timeout(1500)]
NODES = 3
GRACE = 10  # --node-grace-period: seconds to NotReady
TOLERATION = 5  # nodeLossTolerationSeconds: seconds on a lost node before eviction
DIGITS = ["--arg=--dataset=digits", "--arg=--threads=1", "--arg=--epochs=30",
          # A lost peer sends nothing: the survivors find out at the process group's timeout.
          "--arg=--rdzv-timeout=45"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nodes") / "c"
    kernel = nodeloss.kernel_settings()
    c = start_cluster(folder, None, ["--nodes", str(NODES), "--trainer", "--node-grace-period", str(GRACE),
                                     "--timeout", "900"])
    try:
        nodeloss.pull_everywhere(c, trainer_image(), c.nodes())
        yield c
    finally:
        stop_cluster(c)
        forget_images(folder)
    assert leftover_processes(folder) == []
    assert nodeloss.kernel_settings() == kernel  # put back once, by the last cluster to let go


def test_the_nodes_register_under_stable_names_and_status_lists_them(cluster):
    status = json.loads(cluster.cli("cluster", "status", "--dir", str(cluster.dir), "--format", "json", check=True).stdout)
    names = [n["name"] for n in status["nodes"]]
    assert len(names) == NODES and names[1:] == [f"{names[0]}-node{i}" for i in range(2, NODES + 1)]
    assert all(n["ready"] and n["phase"] == "ready" and set(n["processes"]) == {"containerd", "kubelet", "kube-proxy"}
               for n in status["nodes"])
    assert {n.metadata.name for n in cluster.core().list_node().items} == set(names)


def test_a_pod_on_every_node_reaches_the_api_servers_service_by_name(cluster):
    """DNS answers on every node and each node's kube-proxy routes the `kubernetes` Service."""
    results = nodeloss.on_every_node(cluster, cluster.nodes(), "docker.io/curlimages/curl:8.10.1", [
        "curl", "-sk", "--retry", "10", "--retry-all-errors", "-o", "/dev/null", "-w", "%{http_code}",
        "https://kubernetes.default.svc.cluster.local/version"])
    assert results == {node: "401" for node in cluster.nodes()}  # answered, and refused without credentials


@pytest.mark.parametrize("remedy", nodeloss.REMEDIES)
def test_a_lost_node_holds_both_kinds_until_the_remedy_then_they_resume_and_succeed(cluster, tmp_path, remedy):
    def while_lost(jobs, victim):  # diagnose names the lost node while the jobs wait on it
        for job in jobs:
            said = cluster.cli("diagnose", job.name, check=False).stdout
            assert "NodeLost" in said and f"on node {victim}" in said, said
            assert f"cluster node start {victim}" in said and "kubectl delete" in said, said
            assert ("JobSet" if job.kind == "TrainJob" else "no pod holds its index") in said, said

    timeline = nodeloss.rehearse(cluster, tmp_path, remedy, TOLERATION, DIGITS, while_lost, NODES)
    marks = timeline.marks
    assert marks["NotReady"] < marks["evicted"] < marks["replaced"] < marks["succeeded"], marks
    nodeloss.record(timeline, remedy, Path(cluster.dir).parent / "timeline.json")
    if remedy == "node deleted":  # the machine back after all: it registers its Node anew
        cluster.cli("cluster", "node", "start", timeline.node, "--dir", str(cluster.dir), check=True)
        wait_for(lambda: nodeloss.ready(cluster, timeline.node), 120, f"{timeline.node} to register again")


def test_cluster_down_after_a_kill_leaves_nothing_running_mounted_or_changed(cluster):
    victim = cluster.nodes()[-1]
    cluster.cli("cluster", "node", "kill", victim, "--dir", str(cluster.dir), check=True)
    listed = json.loads(cluster.cli("cluster", "node", "list", "--dir", str(cluster.dir), "--format", "json",
                                    check=True).stdout)
    assert [(n["name"], n["phase"], n["processes"]) for n in listed if n["name"] == victim] == [(victim, "killed", {})]
    stop_cluster(cluster)
    assert nodeloss.machine_leftovers(cluster.dir) == []
