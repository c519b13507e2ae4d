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
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/cgroup").write_text(cgroup)
    (proc / "self/mounts").write_text(mounts.replace("SYS", str(tmp_path / "sys")))
    for rel, text in files.items():
        path = tmp_path / "sys" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return proc


def test_a_v2_pod_limit_on_an_ancestor_binds_its_container(tmp_path):
    proc = machine(tmp_path, "0::/kubepods/pod1/app\n", "cgroup2 SYS/fs/cgroup cgroup2 rw 0 0\n",
                   {"fs/cgroup/kubepods/pod1/cpu.max": "250000 100000\n",
                    "fs/cgroup/kubepods/pod1/app/cpu.max": "max 100000\n"})
    assert cpus.quota_cpus(proc) == 2.5


def test_the_tightest_of_nested_v1_quotas(tmp_path):
    proc = machine(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/a/b\n0::/\n",
                   "cgroup SYS/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\ncgroup2 SYS/fs/cgroup/unified cgroup2 rw 0 0\n",
                   {"fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us": "150000\n",
                    "fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us": "100000\n",
                    "fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us": "-1\n",
                    "fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n"})
    assert cpus.quota_cpus(proc) == 1.5


def test_no_limit_leaves_the_affinity(tmp_path):
    proc = machine(tmp_path, "0::/\n", "cgroup2 SYS/fs/cgroup cgroup2 rw 0 0\n", {"fs/cgroup/cpu.max": "max 100000\n"})
    assert cpus.quota_cpus(proc) is None
    assert cpus.threads_per_rank(1, proc) == len(os.sched_getaffinity(0))


def test_ranks_share_the_limit_and_each_keeps_one_thread(tmp_path):
    proc = machine(tmp_path, "0::/\n", "cgroup2 SYS/fs/cgroup cgroup2 rw 0 0\n", {"fs/cgroup/cpu.max": "150000 100000\n"})
    assert cpus.threads_per_rank(1, proc) == 1  # 1.5 CPUs: a second thread would be throttled
    assert cpus.threads_per_rank(4, proc) == 1


def _trainer_threads(tmp_path: Path, env: dict, preexec=None) -> int:
    """The threads a real trainer run used, from its metrics.json."""
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    subprocess.run([sys.executable, "-m", "trainer", "--dataset", "synthetic", "--synthetic-size", "256", "--epochs", "1",
                    "--no-resume", "--output-dir", str(out)], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   preexec_fn=preexec)
    return json.loads((out / "metrics.json").read_text())["threads"]


@pytest.mark.trains
def test_the_trainer_runs_as_many_threads_as_its_cpu_limit_allows(tmp_path):
    from generator.controlplane.kubelet import cgroups

    where = cgroups.Hierarchies.find()
    if os.geteuid() != 0 or where.cpu is None:
        pytest.skip("needs root and a writable cpu cgroup")
    container = cgroups.Container(where, cgroups.cluster_name(tmp_path), "pod-uid", "trainer")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    try:
        assert container.create(None, 1000) == []  # resources.limits.cpu: 1
        assert _trainer_threads(tmp_path, env, container.join) == 1
    finally:
        container.kill()
        container.remove()
    assert _trainer_threads(tmp_path, env) == cpus.threads_per_rank(1)  # the same run outside: this test's own limit
    assert _trainer_threads(tmp_path, {**env, "OMP_NUM_THREADS": "1"}) == 1  # the user's setting wins
