"""How many CPU threads a rank should use: the CPUs its container may run on, shared among the
ranks that torchrun starts beside it.

torch's default is every core it can see. A pod limited to 2 CPUs on a 64-core node then runs 32
threads against a CFS quota of 2 and spends most of each period throttled, and two ranks on one
2-core machine each run 2 threads on the same 2 cores. The limit is the tightest CFS quota on the
path from this process's cgroup up to the root (cgroup v2's cpu.max, or v1's cfs_quota_us where
the cpu controller is still on v1), and never more than the CPUs in this process's affinity mask.
"""
from __future__ import annotations

import math
import os
from pathlib import Path


def _mounts(proc: Path) -> dict[str, Path]:
    """Mount point by controller ("" for the v2 hierarchy)."""
    found: dict[str, Path] = {}
    try:
        lines = (proc / "self/mounts").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup2":
            found.setdefault("", Path(parts[1]))
        elif parts[2] == "cgroup" and "cpu" in parts[3].split(","):
            found.setdefault("cpu", Path(parts[1]))
    return found


def _quota(folder: Path, v2: bool) -> float | None:
    """CPUs allowed by this one cgroup's own quota; None for no limit or nothing readable."""
    try:
        if v2:
            quota, period = (folder / "cpu.max").read_text().split()
        else:
            quota, period = (folder / "cpu.cfs_quota_us").read_text(), (folder / "cpu.cfs_period_us").read_text()
        if quota.strip() in ("max", "-1"):
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        return None


def quota_cpus(proc: Path = Path("/proc")) -> float | None:
    """The tightest CFS quota over this process's cgroup and its ancestors, in CPUs."""
    mounts = _mounts(proc)
    try:
        lines = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and "" in mounts:
            v2, mount = True, mounts[""]
        elif "cpu" in controllers.split(",") and "cpu" in mounts:
            v2, mount = False, mounts["cpu"]
        else:
            continue
        folder = mount / path.lstrip("/")
        while True:  # a limit on any ancestor binds this process too
            limit = _quota(folder, v2)
            if limit is not None:
                limits.append(limit)
            if folder == mount or mount not in folder.parents:
                break
            folder = folder.parent
    return min(limits) if limits else None


def threads_per_rank(local_ranks: int, proc: Path = Path("/proc")) -> int:
    """At least 1: the whole CPUs this container may use, split among the ranks it runs."""
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    quota = quota_cpus(proc)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, math.floor(cpus / max(1, local_ranks)))
