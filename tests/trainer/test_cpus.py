"""Threads per rank follow the container's CPU limit: fake cgroup trees for each layout, then a
real cgroup with a CFS quota (root)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import cpus

ROOT = Path(__file__).resolve().parents[2]


def machine(tmp_path: Path, cgroup: str, mounts: str, files: dict[str, str]) -> Path:
    """A /proc/self with `cgroup` and `mounts` (mountinfo lines, SYS for the fake /sys) and cgroup files."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/cgroup").write_text(cgroup)
    (proc / "self/mountinfo").write_text(mounts.replace("SYS", str(tmp_path / "sys")))
    for rel, text in files.items():
        path = tmp_path / "sys" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return proc


V2 = "30 23 0:26 / SYS/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_a_v2_pod_limit_on_an_ancestor_binds_its_container(tmp_path):
    proc = machine(tmp_path, "0::/kubepods/pod1/app\n", V2,
                   {"fs/cgroup/kubepods/pod1/cpu.max": "250000 100000\n",
                    "fs/cgroup/kubepods/pod1/app/cpu.max": "max 100000\n"})
    assert cpus.quota_cpus(proc) == 2.5


def test_the_tightest_of_nested_v1_quotas_on_a_hybrid_machine(tmp_path):
    proc = machine(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/a/b\n0::/\n",
                   "31 23 0:27 / SYS/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                   "30 23 0:26 / SYS/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n",
                   {"fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us": "150000\n",
                    "fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us": "100000\n",
                    "fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us": "-1\n",
                    "fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n"})
    assert cpus.quota_cpus(proc) == 1.5


def test_a_mounted_sub_cgroup_is_read_where_it_is_mounted(tmp_path):
    # A container without a cgroup namespace: its own cgroup is bind-mounted at the top.
    proc = machine(tmp_path, "0::/kubepods/pod1/app\n",
                   "30 23 0:26 /kubepods/pod1/app SYS/fs/cgroup rw - cgroup2 cgroup2 rw\n",
                   {"fs/cgroup/cpu.max": "200000 100000\n"})
    assert cpus.quota_cpus(proc) == 2.0


def test_unreadable_and_malformed_entries_mean_no_limit(tmp_path):
    proc = machine(tmp_path, "garbage\n0::/../elsewhere\n", V2 + "not a mountinfo line\n",
                   {"fs/cgroup/cpu.max": "100000 0\n"})
    assert cpus.quota_cpus(proc) is None
    assert cpus.quota_cpus(tmp_path / "no-proc") is None


def test_no_limit_leaves_the_affinity(tmp_path):
    proc = machine(tmp_path, "0::/\n", V2, {"fs/cgroup/cpu.max": "max 100000\n"})
    assert cpus.quota_cpus(proc) is None
    assert cpus.threads_per_rank(1, proc) == len(os.sched_getaffinity(0))


def test_ranks_in_one_container_share_its_whole_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    proc = machine(tmp_path, "0::/\n", V2, {"fs/cgroup/cpu.max": "450000 100000\n"})  # 4.5 CPUs
    assert [cpus.threads_per_rank(n, proc) for n in (1, 2, 3, 8)] == [4, 2, 1, 1]


def test_local_ranks_come_from_torchrun(monkeypatch):
    for raw, expected in (("", 1), ("3", 3), ("0", 1), ("x", 1)):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", raw)
        assert cpus.local_ranks() == expected


def _trainer_threads(tmp_path: Path, env: dict, preexec=None) -> int:
    """The threads a real trainer run used, from its metrics.json."""
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    subprocess.run([sys.executable, "-m", "trainer", "--dataset", "synthetic", "--synthetic-size", "256", "--epochs", "1",
                    "--no-resume", "--output-dir", str(out)], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   preexec_fn=preexec)
    return json.loads((out / "metrics.json").read_text())["threads"]


def _cpu_cgroup(name: Path) -> Path | None:
    """A new cgroup with the cpu controller (v1's cpu hierarchy, or v2 where it holds cpu); None without one."""
    from generator.controlplane.realnode import cgroups, host

    for hierarchy in host.hierarchies():
        v1 = (hierarchy / "cpu.cfs_quota_us").exists()
        v2 = "cpu" in ((hierarchy / "cgroup.controllers").read_text().split()
                       if (hierarchy / "cgroup.controllers").exists() else [])
        if (v1 or v2) and os.access(hierarchy, os.W_OK):
            if v2:
                (hierarchy / "cgroup.subtree_control").write_text("+cpu")
            folder = hierarchy / cgroups.cluster_name(name)
            folder.mkdir(exist_ok=True)
            return folder
    return None


@pytest.mark.trains
def test_the_trainer_runs_as_many_threads_as_its_cpu_limit_allows(tmp_path):
    from generator.controlplane.realnode import cgroups

    container = _cpu_cgroup(tmp_path / "cgroup-name")
    if os.geteuid() != 0 or container is None:
        pytest.skip("needs root and a writable cpu cgroup")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    try:
        # resources.limits.cpu: 1, as runc writes it for the kubelet: a CFS quota of one period.
        quota = ("cpu.max", "100000 100000") if (container / "cpu.max").exists() else ("cpu.cfs_quota_us", "100000")
        (container / quota[0]).write_text(quota[1])
        join = lambda: (container / "cgroup.procs").write_text(str(os.getpid()))  # noqa: E731
        assert _trainer_threads(tmp_path, env, join) == 1
    finally:
        cgroups.kill_tree(container)
        cgroups.remove_tree(container)
    # The same run outside: this test's own limit, and never more than torch's own default.
    default = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert _trainer_threads(tmp_path, env) == min(int(default), cpus.threads_per_rank(1))
    assert _trainer_threads(tmp_path, {**env, "OMP_NUM_THREADS": "1"}) == 1  # the user's setting wins
