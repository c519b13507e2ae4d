"""How many CPU threads a rank should use: no more than the CPUs its container may run on.

torch's default is one thread per physical core of the node. A pod limited to 2 CPUs on a 64-core
node then runs 32 threads against a CFS quota of 2 and spends most of each period throttled. The
limit is the tightest CFS quota on the path from this process's cgroup up to the root of what is
mounted (cgroup v2's cpu.max, or v1's cfs_quota_us where the cpu controller is still on v1), and
never more than the CPUs in this process's affinity mask. Processes that share the container
(LOCAL_WORLD_SIZE) share that; torchrun, when it starts several, sets OMP_NUM_THREADS=1 itself,
and the trainer leaves a set OMP_NUM_THREADS alone.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from .cgroups import quota_cpus


def threads_per_rank(local_ranks: int, proc: Path = Path("/proc")) -> int:
    """At least 1: the whole CPUs this container may use, split among the ranks it runs."""
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    quota = quota_cpus(proc)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, math.floor(cpus / max(1, local_ranks)))


def local_ranks(env=None) -> int:
    """Processes torchrun runs in this container (the operator's env runs one per pod)."""
    raw = (os.environ if env is None else env).get("LOCAL_WORLD_SIZE", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def for_rank(requested: int, torch_default: int, env=None) -> int | None:
    """The thread count to set, or None to leave torch's: `--threads` when given; torch's own when
    OMP_NUM_THREADS or MKL_NUM_THREADS is set (the user's, or torchrun's for several processes);
    else torch's default (one per physical core) lowered to this container's CPUs, never raised."""
    env = os.environ if env is None else env
    if requested:
        return requested
    if env.get("OMP_NUM_THREADS") or env.get("MKL_NUM_THREADS"):
        return None
    return min(torch_default, threads_per_rank(local_ranks(env)))
