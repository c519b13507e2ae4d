"""What the real node changes on the machine, and how each change is undone: the cluster's cgroup
in every hierarchy (made before the kubelet starts, killed and removed at the end), the mounts
containerd and the kubelet make under the node's folder, the CNI plugins' state, the node's
network namespace, and the three kernel settings the kubelet sets machine-wide. `teardown` undoes
all of it from what it finds, not from a record, so it works after the supervisor was killed,
and twice."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import signal
import time
from pathlib import Path

from generator.controlplane import network
from generator.controlplane.layout import Layout, carries, started_by
from generator.controlplane.realnode import cgroups, folder_name, kernel, netns
from generator.controlplane.realnode.config import NODE_MARKER, Folders

CNI_RESULTS = Path("/var/lib/cni/results")  # libcni's cache of each attachment, the machine's one
# A shim's socket is the machine's, whatever containerd's state: named for the sha256 of containerd's address,
# the namespace and the sandbox the shim serves (containerd's pkg/shim SocketAddress).
SHIM_SOCKETS = Path("/run/containerd/s")
# The kubelet links each container's log here, whatever its podLogsDir (a fixed path in the kubelet).
CONTAINER_LOG_LINKS = Path("/var/log/containers")
_MNT_DETACH = 2


# --- cgroups ---------------------------------------------------------------------------------
def hierarchies() -> list[Path]:
    """Every cgroup hierarchy mounted here, v1 and v2: the kubelet with cgroupfs uses each."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
            out.append(Path(_unescape(parts[1])))
    return list(dict.fromkeys(out))


def cgroup_folders(root: Path, index: int | None = None) -> list[Path]:
    """The cluster's cgroup in each hierarchy, or one node's inside it."""
    name = cgroups.cluster_name(root)
    return [h / name / (folder_name(index) if index is not None else "") for h in hierarchies()]


def make_cgroup_root(root: Path, index: int = 0) -> list[Path]:
    """The node's cgroup, in the cluster's, in each hierarchy: the kubelet refuses a cgroupRoot
    missing from one. A new cpuset cgroup has no CPUs or memory nodes until given its parent's."""
    made = []
    for folder in cgroup_folders(root, index):
        for level in (folder.parent, folder):
            level.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                own, parent = level / name, level.parent / name
                if own.exists() and parent.exists() and not own.read_text().strip():
                    own.write_text(parent.read_text().strip())
        made.append(folder)
    return made


def _kill_cgroups(root: Path) -> list[int]:
    killed: list[int] = []
    for folder in cgroup_folders(root):
        killed += cgroups.kill_tree(folder)
    return sorted(set(killed))


def _remove_cgroups(root: Path) -> list[Path]:
    return [f for f in cgroup_folders(root) if not cgroups.remove_tree(f)]


# --- mounts ----------------------------------------------------------------------------------
def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash in octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_under(folder: Path) -> list[Path]:
    """Mount points at or below `folder`, deepest first."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            point = Path(_unescape(parts[1]))
            if point == folder or folder in point.parents:
                found.append(point)
    return sorted(dict.fromkeys(found), key=lambda p: len(p.parts), reverse=True)


def unmount_all(folder: Path) -> tuple[int, list[str]]:
    """Detach every mount below `folder` (overlay roots, shm, network namespaces, the kubelet's
    volumes), deepest first; (how many, what could not be)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    count, failed = 0, []
    for _ in range(5):  # a mount stacked on another shows once the upper one is gone
        points = mounts_under(folder)
        if not points:
            break
        for point in points:
            if libc.umount2(str(point).encode(), _MNT_DETACH) == 0:
                count += 1
            else:
                failed.append(f"{point} ({os.strerror(ctypes.get_errno())})")
    left = mounts_under(folder)
    return count, [f for f in failed if any(f.startswith(f"{p} ") for p in left)]


# --- processes -------------------------------------------------------------------------------
def _marked(root: Path) -> list[int]:
    """The cluster's processes (containerd's shims among them: they carry its environment)."""
    me = {os.getpid(), os.getppid()}
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) not in me and started_by(int(e.name), root)]


def power_cut(root: Path, index: int) -> list[int]:
    """One node gone at once, as when its machine loses power: every process of it (its containers,
    containerd, the shims, the kubelet and kube-proxy) stopped first, so none sees the others go and
    reacts, then killed; its folder is all that is left. The pids killed."""
    folders = Folders.of(Layout(root), index)
    groups = cgroup_folders(root, index)
    own = [p for p in _marked(root) if carries(p, NODE_MARKER, str(folders.root))]
    victims = sorted({*(p for g in groups for p in cgroups.pids(g)), *own})
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    for group in groups:  # what forked before it was stopped
        cgroups.kill_tree(group)
    _wait_gone(victims)
    return victims


def _kill_node_processes(root: Path) -> list[int]:
    """containerd, its shims, the kubelet and CoreDNS: they carry the cluster's marker (a shim inherits
    containerd's environment), and are told apart from the rest of the cluster by their program."""
    killed = []
    for pid in _marked(root):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if Path(exe).name in ("containerd", "containerd-shim-runc-v2", "kubelet", "coredns", "kube-proxy"):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def container_log_links(folders: Folders, links: Path = CONTAINER_LOG_LINKS) -> list[Path]:
    """The kubelet's links in `links` (/var/log/containers) to this node's pod logs: other
    clusters' and a real kubelet's links share the folder."""
    try:
        found = [p for p in links.iterdir() if p.is_symlink()]
    except OSError:
        return []
    return [p for p in found if folders.pod_logs in Path(os.readlink(p)).parents]


def remove_container_log_links(folders: Folders, links: Path = CONTAINER_LOG_LINKS) -> int:
    """Remove this node's links in `links`, and only them; how many."""
    own = container_log_links(folders, links)
    for link in own:
        link.unlink(missing_ok=True)
    return len(own)


def clean_node(folders: Folders) -> tuple[list[str], list[str]]:
    """What a node's killed processes left on the machine: its mounts, the CNI plugins' and the
    shims' state for its sandboxes, its log links and its run-time folders (its images and the
    kubelet's folder stay, as a machine's disk does). (what was done, what could not be)."""
    done, problems = [], []
    count, failed = unmount_all(folders.root)
    if count:
        done.append(f"{count} mounts under {folders.root} (unmounted)")
    problems += [f"mount {f} not unmounted" for f in failed]
    # libcni caches each attachment machine-wide as <network>-<sandbox>-<interface>: the bridge's under the
    # cluster's network name, the loopback's under containerd's own, by sandbox.
    sandboxes = [p.name for p in (folders.containerd / "root" / "io.containerd.grpc.v1.cri" / "sandboxes").glob("*")]
    if CNI_RESULTS.is_dir():
        for result in CNI_RESULTS.iterdir():
            if any(f"-{s}-" in result.name for s in sandboxes):
                result.unlink(missing_ok=True)
    for sandbox in sandboxes:  # a killed shim leaves its socket behind
        for path in (f"{folders.socket}/k8s.io/{sandbox}", f"{folders.socket}/k8s.io/{sandbox}/debug"):
            (SHIM_SOCKETS / hashlib.sha256(path.encode()).hexdigest()).unlink(missing_ok=True)
    remove_container_log_links(folders)
    for state in (folders.ipam, folders.containerd / "state"):
        if state.exists():
            shutil.rmtree(state, ignore_errors=True)
    return done, problems


def teardown(root: Path) -> tuple[list[str], list[str]]:
    """Undo everything the real nodes did on the machine for the cluster in `root`: its containers
    and its node processes killed, its mounts detached, its cgroups, network namespaces and CNI
    state removed, the kernel settings put back. (what was done, what could not be)."""
    done, problems = [], []
    containers = _kill_cgroups(root)
    if containers:
        done.append(f"{len(containers)} container processes (killed)")
    node = _kill_node_processes(root)
    if node:
        done.append(f"{len(node)} node processes: containerd, shims, kubelet, CoreDNS, kube-proxy (killed)")
    _wait_gone(containers + node)
    for folders in Folders.every(Layout(root)):
        cleaned, failed = clean_node(folders)
        done, problems = done + cleaned, problems + failed
    if CNI_RESULTS.is_dir():  # the cluster's network's, whichever sandbox they were of
        for result in CNI_RESULTS.glob(f"{network.bridge_name(root)}-*"):
            result.unlink(missing_ok=True)
    left = _remove_cgroups(root)
    problems += [f"cgroup {p} not removed (busy)" for p in left]
    removed = netns.remove_all(network.bridge_name(root))
    if removed:
        done.append(f"the nodes' network namespaces {', '.join(removed)} (removed)")
    restored = kernel.release_kernel_settings(root)
    if restored:
        done.append(f"kernel settings put back ({', '.join(restored)})")
    return done, problems


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(Path(f"/proc/{p}").exists() and _not_zombie(p) for p in pids):
        time.sleep(0.05)


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
