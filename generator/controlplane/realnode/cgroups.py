"""The cluster's own cgroup, one in every hierarchy: the kubelet's cgroupRoot, under which it puts
every pod (cgroupfs driver), so `cluster down` kills whatever the cluster's pods left whole, and
removes the cgroup after them."""
from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path


def cluster_name(root: Path) -> str:
    """One cluster's cgroup: named for its folder, so two clusters never share one."""
    return f"pytorchjob-kit-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass


def pids(folder: Path | None) -> list[int]:
    """Every process in `folder` and the cgroups below it."""
    if folder is None or not folder.is_dir():
        return []
    out = []
    for procs in folder.rglob("cgroup.procs"):
        try:
            out += [int(p) for p in procs.read_text().split()]
        except (OSError, ValueError):
            pass
    return sorted(set(out))


def kill_tree(folder: Path | None, wait: float = 5.0) -> list[int]:
    """SIGKILL to every process of a cgroup and its children (cgroup.kill where the kernel has it,
    else each pid until none is left); the pids it held."""
    found = pids(folder)
    if not found:
        return []
    end = time.monotonic() + wait
    while True:
        if folder is not None and (folder / "cgroup.kill").exists():
            _try_write(folder / "cgroup.kill", "1")
        else:
            for pid in pids(folder):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not pids(folder) or time.monotonic() > end:
            return found
        time.sleep(0.05)


def remove_tree(folder: Path) -> bool:
    """The folder and its children, deepest first, once empty (a cgroup is removed with rmdir);
    False when the folder is still there."""
    if not folder.is_dir():
        return True
    for child in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            child.rmdir()
        except OSError:
            pass
    try:
        folder.rmdir()
    except OSError:
        return False
    return True
