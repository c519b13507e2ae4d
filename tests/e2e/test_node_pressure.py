"""A loaded, nearly full machine, on the real kubelet: `cluster up` with a CPU hog on every core
comes up within its --timeout; then the cluster's folder, on a small filesystem of this module's
own, is filled until the kubelet reports DiskPressure and the node is tainted, and `diagnose` of a
job whose pods it keeps Pending names the node's condition and the fix (free disk space), never a
toleration. The operator runs as system-cluster-critical, as platform teams run controllers, so
the kubelet keeps it while it evicts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.e2e.conftest import _down, needs_real_node, start_cluster
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, needs_real_node, pytest.mark.timeout(1200)]
SIZE = 4 << 30  # the small filesystem: the operator's image, etcd and the logs fit many times over
LEFT = 20 << 20  # what the filling leaves free: under the kubelet's nodefs.available of 1%, enough for etcd's writes


@pytest.fixture(scope="module")
def small_filesystem(tmp_path_factory):
    """An ext4 filesystem of SIZE bytes in a sparse file, loop-mounted 0700 (root's, as the cluster's folder must be)."""
    if shutil.which("mkfs.ext4") is None or os.geteuid() != 0:
        pytest.fail("this module needs root and mkfs.ext4 (Debian: e2fsprogs) to make a filesystem of its own")
    image = tmp_path_factory.mktemp("small-fs-image") / "fs.ext4"
    mount = tmp_path_factory.mktemp("small-fs")
    with open(image, "wb") as f:
        f.truncate(SIZE)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True, capture_output=True)
    try:
        mount.chmod(0o700)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True, capture_output=True)
        image.unlink()


@pytest.fixture(scope="module")
def hogged_up(small_filesystem):
    """`cluster up` (its default --timeout) while a busy loop runs on every core, at the same priority."""
    hogs = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
            for cpu in sorted(os.sched_getaffinity(0))]
    try:
        c = start_cluster(small_filesystem / "cluster", {"priorityClassName": "system-cluster-critical"})
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    try:
        yield c
    finally:
        _down(c)


@pytest.fixture(scope="module")
def cluster(hogged_up):
    return hogged_up


def test_cluster_up_under_a_cpu_hog_on_every_core_comes_up_within_its_timeout(cluster):
    (node,) = cluster.core().list_node().items
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert operator_phases(cluster) == ["Running"]


def operator_phases(cluster) -> list[str]:
    namespace = json.loads((cluster.dir / "state.json").read_text())["operator"]["namespace"]
    pods = cluster.core().list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=controller").items
    return [p.status.phase for p in pods]


def pressure(cluster) -> dict:
    (node,) = cluster.core().list_node().items
    conditions = {c.type: c for c in node.status.conditions}
    taints = {t.key for t in node.spec.taints or []}
    return {"condition": conditions["DiskPressure"].status, "tainted": "node.kubernetes.io/disk-pressure" in taints}


def test_a_full_disk_is_named_by_diagnose_with_the_fix_to_free_space_not_a_toleration(cluster, small_filesystem, tmp_path):
    assert pressure(cluster) == {"condition": "False", "tainted": False}
    fill = small_filesystem / "fill"
    free = shutil.disk_usage(small_filesystem).free
    subprocess.run(["fallocate", "-l", str(free - LEFT), str(fill)], check=True, capture_output=True)
    try:
        # The kubelet's eviction manager looks every 10 s; the node controller taints from the condition.
        wait_for(lambda: pressure(cluster) == {"condition": "True", "tainted": True}, 300,
                 "the kubelet to report DiskPressure and the node to be tainted disk-pressure", interval=2)
        values = tmp_path / "full.yaml"
        cluster.cli("values", "--name", "full", "--workers", "1", "--cpu", "250m", "--memory", "512Mi",
                    "--arg=--dataset=digits", "-o", str(values), check=True)
        cluster.cli("submit", str(values), check=True)
        core = cluster.core()
        label = "training.kubeflow.org/job-name=full"

        def unschedulable():
            pods = core.list_namespaced_pod("default", label_selector=label).items
            return len(pods) == 2 and all(any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                                              for c in p.status.conditions or []) for p in pods)

        wait_for(unschedulable, 300, "the job's two pods to be left unscheduled on the tainted node", interval=2)
        found = cluster.cli("diagnose", "full", "--format", "json")
        assert found.returncode == 1, found.stdout + found.stderr
        findings = json.loads(found.stdout)
        (node,) = [f for f in findings if f["object"].startswith("Node/")]
        assert node["reason"] == "DiskPressure" and "is short of disk space" in node["message"], findings
        assert "free disk space on the node's filesystem" in node["fix"] and "cluster down --purge" in node["fix"]
        # No finding tells the user to tolerate the pressure taint; each that names it says not to.
        assert all("do not add a toleration" in f["fix"] for f in findings if "disk-pressure" in f["message"]), findings
        assert not [f for f in findings if "one entry per taint" in f["fix"]], findings
        # The kubelet kept the critical operator while it evicted.
        assert operator_phases(cluster) == ["Running"]
    finally:
        fill.unlink(missing_ok=True)
        cluster.cli("delete", "full")
