"""What the real node changes on the machine is undone: mounts under the node's folder detached,
the cluster's cgroups killed and removed in every hierarchy. Mounts and cgroups are the machine's own (root needed: skipped, saying why, without)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from generator.controlplane.realnode import cgroups, host

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounts and cgroups of the machine need root")


@needs_root
def test_every_mount_under_the_node_folder_is_detached_deepest_first(tmp_path):
    node = tmp_path / "node"
    upper = node / "containerd" / "state" / "rootfs"
    upper.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(upper)], check=True)
    (upper / "shm").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(upper / "shm")], check=True)
    beside = tmp_path / "beside"
    beside.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(beside)], check=True)
    try:
        assert host.mounts_under(node) == [upper / "shm", upper]
        assert host.unmount_all(node) == (2, [])
        assert host.mounts_under(node) == []
        assert host.mounts_under(beside) == [beside]  # outside the node's folder: left alone
    finally:
        subprocess.run(["umount", "-R", str(beside)], check=False)
        subprocess.run(["umount", "-R", str(upper)], check=False)


def writable_cgroups() -> bool:
    return ROOT and bool(host.hierarchies()) and all(os.access(h, os.W_OK) for h in host.hierarchies())


@pytest.mark.skipif(not writable_cgroups(), reason="needs root and writable cgroup hierarchies")
def test_the_clusters_cgroup_is_made_in_every_hierarchy_and_teardown_kills_and_removes_it(tmp_path):
    # The machine's kernel-settings record is left alone: this folder never held it.
    cluster = tmp_path / "cluster"
    made = host.make_cgroup_root(cluster)
    assert made == [h / cgroups.cluster_name(cluster) / "node" for h in host.hierarchies()] and all(p.is_dir() for p in made)
    cpuset = next((p for p in made if (p / "cpuset.cpus").exists()), None)
    if cpuset is not None:  # a new cpuset cgroup is empty until given its parent's CPUs and memory nodes
        assert (cpuset / "cpuset.cpus").read_text() == (cpuset.parent / "cpuset.cpus").read_text()
        assert (cpuset / "cpuset.mems").read_text() == (cpuset.parent / "cpuset.mems").read_text()
    # A container's process, in a pod's cgroup below the root in every hierarchy, as runc puts it.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        for folder in made:
            pod = folder / "kubepods" / "podx"
            pod.mkdir(parents=True)
            if (pod / "cpuset.cpus").exists():
                (folder / "kubepods" / "cpuset.cpus").write_text((folder / "cpuset.cpus").read_text())
                (folder / "kubepods" / "cpuset.mems").write_text((folder / "cpuset.mems").read_text())
                (pod / "cpuset.cpus").write_text((folder / "cpuset.cpus").read_text())
                (pod / "cpuset.mems").write_text((folder / "cpuset.mems").read_text())
            (pod / "cgroup.procs").write_text(str(proc.pid))
        done, problems = host.teardown(cluster)
        assert proc.wait(10) == -9
        assert problems == [] and done[0] == "1 container processes (killed)"
        assert not any(p.exists() for p in made)
    finally:
        proc.kill()
        for folder in made:
            for sub in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if sub.is_dir():
                    sub.rmdir()
            if folder.is_dir():
                folder.rmdir()


def test_teardown_removes_only_its_own_nodes_container_log_links(tmp_path):
    """/var/log/containers is the machine's: other clusters' and a real kubelet's links live
    there beside ours (a folder of the test's own stands for it)."""
    from generator.controlplane.layout import Layout
    from generator.controlplane.realnode.config import Folders

    ours, theirs = Folders.of(Layout(tmp_path / "ours")), Folders.of(Layout(tmp_path / "ours-too"))
    links = tmp_path / "containers"
    links.mkdir()
    own = links / "job-master-0_default_pytorch-abc.log"
    own.symlink_to(ours.pod_logs / "default_job-master-0_uid" / "pytorch" / "0.log")
    other_cluster = links / "job-master-0_default_pytorch-def.log"  # a sibling folder sharing the prefix
    other_cluster.symlink_to(theirs.pod_logs / "default_job-master-0_uid2" / "pytorch" / "0.log")
    kubelet = links / "coredns-1_kube-system_coredns-0123.log"  # a real kubelet's
    kubelet.symlink_to("/var/log/pods/kube-system_coredns-1_uid/coredns/0.log")
    plain = links / "notes.log"  # not a link at all
    plain.write_text("kept\n")
    assert host.container_log_links(ours, links) == [own]
    assert host.remove_container_log_links(ours, links) == 1
    assert sorted(p.name for p in links.iterdir()) == sorted([other_cluster.name, kubelet.name, plain.name])
    assert host.remove_container_log_links(ours, links) == 0  # twice: nothing more


@pytest.mark.skipif(not writable_cgroups(), reason="needs root and writable cgroup hierarchies")
def test_a_power_cut_kills_one_nodes_containers_and_processes_and_nothing_of_the_other_nodes(tmp_path):
    """`cluster node kill`: a container in the node's cgroup and a process carrying the node's marker
    (its kubelet, containerd, a shim) die; the same of the cluster's first node lives on."""
    from generator.controlplane.layout import MARKER
    from generator.controlplane.realnode.config import NODE_MARKER

    cluster = tmp_path / "cluster"
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    started = []
    try:
        for index, folder in ((0, "node"), (1, "node2")):
            (cluster / folder).mkdir(parents=True)
            made = host.make_cgroup_root(cluster, index)
            container = subprocess.Popen(sleep)
            for group in made:
                (group / "cgroup.procs").write_text(str(container.pid))
            env = {**os.environ, MARKER: str(cluster), NODE_MARKER: str(cluster / folder)}
            started.append((container, subprocess.Popen(sleep, env=env)))
        from generator.controlplane.layout import carries
        from tests.support.waiting import wait_for

        # Under a loaded machine's scheduler, a process just started may not show its environment yet.
        wait_for(lambda: all(carries(k.pid, NODE_MARKER, str(cluster / f)) for (_, k), f in zip(started, ("node", "node2"), strict=True)),
                 30, "the started processes to show their environment")
        killed = host.power_cut(cluster, 1)
        (first_container, first_kubelet), (container, kubelet) = started
        assert sorted(killed) == sorted([container.pid, kubelet.pid])
        assert container.wait(10) == -9 and kubelet.wait(10) == -9
        assert first_container.poll() is None and first_kubelet.poll() is None
    finally:
        for pair in started:
            for proc in pair:
                proc.kill()
                proc.wait()
        host.teardown(cluster)
    assert not any(p.exists() for p in host.cgroup_folders(cluster))
