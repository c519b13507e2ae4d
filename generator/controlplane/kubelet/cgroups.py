"""Each container of the process node in a cgroup of its own, under one cgroup per pod and one per
cluster: the node kills a container whole (every process it started, whatever it did to its
session, its process group or its env) and `cluster down` kills the cluster whole; the memory
limit is the kernel's, so an OOM kill is the kernel's and is reported as a kubelet reports it;
the CPU limit is a CFS quota.

cgroup v2 tracks processes and kills (cgroup.kill). Memory and CPU come from v2 where its
controllers are there, else from the v1 hierarchies of a hybrid machine (v2 at
/sys/fs/cgroup/unified beside v1 memory and cpu)."""
from __future__ import annotations

import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CFS_PERIOD_US = 100_000


def _mounts() -> list[tuple[Path, str, set[str]]]:
    out = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((Path(parts[1]), parts[2], set(parts[3].split(","))))
    return out


@dataclass(frozen=True)
class Hierarchies:
    """Where this machine's cgroups are: v2 (tracking, kill), and memory and cpu (v2 or v1)."""
    v2: Path | None
    memory: Path | None
    cpu: Path | None
    memory_unified: bool = False
    cpu_unified: bool = False

    @classmethod
    def find(cls) -> Hierarchies:
        v2 = memory = cpu = None
        for path, kind, options in _mounts():
            if kind == "cgroup2" and os.access(path, os.W_OK):
                v2 = path
            elif kind == "cgroup" and "memory" in options and os.access(path, os.W_OK):
                memory = path
            elif kind == "cgroup" and "cpu" in options and os.access(path, os.W_OK):
                cpu = path
        controllers = set()
        if v2 is not None:
            try:
                controllers = set((v2 / "cgroup.controllers").read_text().split())
            except OSError:
                pass
        return cls(v2, v2 if "memory" in controllers else memory, v2 if "cpu" in controllers else cpu,
                   "memory" in controllers, "cpu" in controllers)


def cluster_name(root: Path) -> str:
    """One cluster's cgroup: named for its folder, so two clusters never share one."""
    return f"pytorchjob-kit-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"


class Container:
    """One container's cgroups: create before it starts, `join` in the child before exec."""

    def __init__(self, where: Hierarchies, cluster: str, pod_uid: str, name: str):
        self.where = where
        rel = Path(cluster) / pod_uid / name
        self.v2 = where.v2 / rel if where.v2 else None
        self.memory = where.memory / rel if where.memory else None
        self.cpu = where.cpu / rel if where.cpu else None
        self.oom_before = 0

    def _folders(self) -> list[Path]:
        return list(dict.fromkeys(p for p in (self.v2, self.memory, self.cpu) if p is not None))

    def create(self, memory: int | None, cpu_millis: int | None) -> list[str]:
        """The folders, with the limits; what could not be set, for the pod's event."""
        missing = []
        for folder in self._folders():
            _make(folder, self.where)
        if memory:
            if self.memory is None:
                missing.append("resources.limits.memory (no writable memory cgroup on this machine)")
            elif self.where.memory_unified:
                (self.memory / "memory.max").write_text(str(memory))
                _try_write(self.memory / "memory.swap.max", "0")
            else:
                (self.memory / "memory.limit_in_bytes").write_text(str(memory))
                _try_write(self.memory / "memory.memsw.limit_in_bytes", str(memory))  # no swapping past the limit
        if cpu_millis:
            quota = max(1000, cpu_millis * CFS_PERIOD_US // 1000)
            if self.cpu is None:
                missing.append("resources.limits.cpu (no writable cpu cgroup on this machine)")
            elif self.where.cpu_unified:
                (self.cpu / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            else:
                (self.cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
                (self.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        self.oom_before = self.oom_kills()
        return missing

    def join(self) -> None:
        """In the child between fork and exec: everything it starts from here on is in these cgroups."""
        pid = str(os.getpid())
        for folder in self._folders():
            with open(folder / "cgroup.procs", "w") as f:
                f.write(pid)

    def oom_kills(self) -> int:
        if self.memory is None:
            return 0
        name = "memory.events" if self.where.memory_unified else "memory.oom_control"
        try:
            for line in (self.memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this container for its memory since `create`."""
        return self.oom_kills() > self.oom_before

    def pids(self) -> list[int]:
        return _pids(self.v2 or self.memory)

    def kill(self) -> list[int]:
        """SIGKILL to every process in the container's cgroup; the pids it had."""
        return kill_tree(self.v2 or self.memory)

    def remove(self) -> None:
        """Its folders, and the pod's once its last container's are gone."""
        for folder in self._folders():
            remove_tree(folder)
            try:
                folder.parent.rmdir()
            except OSError:
                pass


def _make(folder: Path, where: Hierarchies) -> None:
    """The folder and its parents; on v2, each parent hands the memory and cpu controllers down."""
    base = next(h for h in (where.v2, where.memory, where.cpu) if h is not None and h in folder.parents)
    handed = [c for c, on in (("memory", where.memory_unified), ("cpu", where.cpu_unified)) if on] if base == where.v2 else []
    current = base
    for part in folder.relative_to(base).parts:
        for controller in handed:
            _try_write(current / "cgroup.subtree_control", f"+{controller}")
        current = current / part
        current.mkdir(exist_ok=True)


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass


def _pids(folder: Path | None) -> list[int]:
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
    found = _pids(folder)
    if not found:
        return []
    end = time.monotonic() + wait
    while True:
        if folder is not None and (folder / "cgroup.kill").exists():
            _try_write(folder / "cgroup.kill", "1")
        else:
            for pid in _pids(folder):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not _pids(folder) or time.monotonic() > end:
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


def cluster_folders(root: Path, where: Hierarchies | None = None) -> list[Path]:
    where = where or Hierarchies.find()
    name = cluster_name(root)
    return list(dict.fromkeys(h / name for h in (where.v2, where.memory, where.cpu) if h is not None))


def kill_cluster(root: Path) -> list[int]:
    """Every pod process of the cluster in `root`, killed whole; their pids. Its cgroups are removed."""
    killed: list[int] = []
    for folder in cluster_folders(root):
        killed += kill_tree(folder)
        remove_tree(folder)
    return sorted(set(killed))
