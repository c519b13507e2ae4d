"""This process's limits as its cgroups set them: the tightest over its own cgroup and every
mounted ancestor, cgroup v2 or v1 (a hybrid machine keeps some controllers on v1)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# v1 writes "no limit" on memory as the largest multiple of the page size below 2**63.
NO_MEMORY_LIMIT = 1 << 62


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
    """The v2 hierarchy ("") and v1's cpu and memory controllers, each as first mounted."""
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
        elif kind == "cgroup":
            for controller in ("cpu", "memory"):
                if controller in options.split()[-1].split(","):
                    found.setdefault(controller, mount)
    return found


def _folders(proc: Path, controller: str) -> Iterator[tuple[Path, bool]]:
    """(folder, is v2) for this process's cgroup of `controller` and each mounted ancestor."""
    mounts = _mounts(proc)
    try:
        lines = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and "" in mounts:
            v2, mount = True, mounts[""]
        elif controller in controllers.split(",") and controller in mounts:
            v2, mount = False, mounts[controller]
        else:
            continue
        # The cgroup as seen through the mount: outside the mounted subtree (or with ..), not readable.
        inside = os.path.relpath(path, mount.root) if path.startswith("/") else ".."
        if inside == ".." or inside.startswith("../"):
            continue
        folder = (mount.point / inside) if inside != "." else mount.point
        while True:  # a limit on any ancestor binds this process too
            yield folder, v2
            if folder == mount.point or mount.point not in folder.parents:
                break
            folder = folder.parent


def _tightest(proc: Path, controller: str, read: Callable[[Path, bool], float | None]) -> float | None:
    limits = [limit for folder, v2 in _folders(proc, controller) if (limit := read(folder, v2)) is not None]
    return min(limits) if limits else None


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


def _memory(folder: Path, v2: bool) -> float | None:
    """Bytes this one cgroup may use; None for no limit or nothing readable."""
    try:
        raw = (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
        if raw == "max" or int(raw) >= NO_MEMORY_LIMIT:
            return None
        return float(int(raw))
    except (OSError, ValueError):
        return None


def quota_cpus(proc: Path = Path("/proc")) -> float | None:
    """The tightest CFS quota over this process's cgroup and its mounted ancestors, in CPUs."""
    return _tightest(proc, "cpu", _quota)


def memory_limit(proc: Path = Path("/proc")) -> int | None:
    """The tightest memory limit over this process's cgroup and its mounted ancestors, in bytes."""
    limit = _tightest(proc, "memory", _memory)
    return None if limit is None else int(limit)
