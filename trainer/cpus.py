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
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class _Mount:
    root: str  # the cgroup that is mounted, as /proc/self/cgroup names cgroups
    point: Path


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mounts(proc: Path) -> dict[str, _Mount]:
    """The v2 hierarchy ("") and v1's cpu controller ("cpu"), each as first mounted."""
    found: dict[str, _Mount] = {}
    try:
        lines = (proc / "self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        kind, _, options = line.split(" - ", 1)[1].partition(" ")
        mount = _Mount(_unescape(fields[3]), Path(_unescape(fields[4])))
        if kind == "cgroup2":
            found.setdefault("", mount)
        elif kind == "cgroup" and "cpu" in options.split()[-1].split(","):
            found.setdefault("cpu", mount)
    return found


def _quota(folder: Path, v2: bool) -> float | None:
    """CPUs allowed by this one cgroup's own quota; None for no limit or nothing readable."""
    try:
        if v2:
            quota, period = (folder / "cpu.max").read_text().split()
        else:
            quota, period = (folder / "cpu.cfs_quota_us").read_text(), (folder / "cpu.cfs_period_us").read_text()
        if quota.strip() in ("max", "-1") or int(period) <= 0:
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        return None


def quota_cpus(proc: Path = Path("/proc")) -> float | None:
    """The tightest CFS quota over this process's cgroup and its mounted ancestors, in CPUs."""
    mounts = _mounts(proc)
    try:
        lines = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and "" in mounts:
            v2, mount = True, mounts[""]
        elif "cpu" in controllers.split(",") and "cpu" in mounts:
            v2, mount = False, mounts["cpu"]
        else:
            continue
        # The cgroup as seen through the mount: outside the mounted subtree (or with ..), not readable.
        inside = os.path.relpath(path, mount.root) if path.startswith("/") else ".."
        if inside == ".." or inside.startswith("../"):
            continue
        folder = (mount.point / inside) if inside != "." else mount.point
        while True:  # a limit on any ancestor binds this process too
            limit = _quota(folder, v2)
            if limit is not None:
                limits.append(limit)
            if folder == mount.point or mount.point not in folder.parents:
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
