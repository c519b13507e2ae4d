"""`cluster down` and `cluster down --purge`: stop the supervisor (which stops its children, last
started first), then whatever the cluster left behind, found by the marker in its processes'
environment, its cgroup and its bridge's name; and remove the keys and data it wrote."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from generator.controlplane import firewall, network, processes, releases, state
from generator.controlplane.layout import Layout, started_by
from generator.errors import UserError


def ours(pid: int, layout: Layout) -> bool:
    """Whether `pid` is a live process this cluster started: after a reboot or PID reuse, the number
    in state.json may belong to anybody's process, which must never be signalled."""
    return processes.pid_alive(pid) and started_by(pid, layout.root)


def _kill(pid: int, sig: int = signal.SIGKILL) -> str:
    """Signal the process, and its group when it leads one; '' when done, else why not."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return "it had already exited"
    except PermissionError as exc:
        return f"not allowed ({exc.strerror})"
    return ""


# What `cluster down --purge` removes: every key, token, certificate and datum the cluster wrote,
# with the configuration it wrote for the API server and the releases (tests/e2e/test_readme_cluster.py
# purges a real cluster's folder and finds only the marker left).
def _purged() -> tuple[str, ...]:
    from generator.controlplane import requests
    from generator.controlplane.realnode import folder_name, netns

    return ("pki", "etcd", "kubeconfigs", "kubeconfig", "kubelet", *(folder_name(i) for i in range(netns.MAX_NODES)),
            "volumes", "logs", "state.json", "admission.yaml", "helm", requests.FOLDER, *releases.VALUES_FILES)


PURGED = _purged()


def purge(layout: Layout) -> list[str]:
    """Remove the cluster's keys and data, only the entries it writes under its own folder; refused
    for a folder that is not this user's cluster folder, and while any of its processes runs."""
    import shutil

    layout.check_ours()
    if strays(layout.root):
        raise UserError(f"the cluster in {layout.root} still has processes running; run `python -m generator "
                        f"cluster down --dir {layout.root}` first")
    removed = []
    for name in PURGED:
        target = layout.root / name
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target, onerror=_gone_already)
        else:
            continue
        removed.append(str(target))
    return removed


def _gone_already(_function, _path, info) -> None:
    """A file that went while the tree was removed (a pod's, as its container ended) is no error."""
    if not issubclass(info[0], FileNotFoundError):
        raise info[1]


def strays(root: Path) -> list[int]:
    """Processes of the cluster in `root` that still run: each carries its folder in its environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and processes.pid_alive(int(entry.name)) \
                and started_by(int(entry.name), root):
            found.append(int(entry.name))
    return found


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def down(layout: Layout, grace: float = 60, warn=_warn) -> list[str]:
    """Stop the supervisor (which stops its children in order), then anything left behind. What
    it returns was stopped; what could not be, or was not ours to stop, goes to `warn`. Refused,
    with nothing done, for a folder that is not the user's own (its state file is not theirs)."""
    layout.check_owned()
    try:
        current = state.load(layout.state_file)
    except state.StateError:
        return _down_without_state(layout, warn)
    stopped: list[str] = []
    killed: set[int] = set()  # what this run SIGKILLed: still listed, and marked, until the kernel has it exit
    pid = current.pid if current else None
    if pid and processes.pid_alive(pid) and not started_by(pid, layout.root):
        warn(f"pid {pid}, which {layout.state_file} names as the supervisor, is another process now (after a "
             "reboot or a reused process id): left alone")
        pid = None
    if pid and processes.pid_alive(pid):
        why = _kill(pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while not why and processes.pid_alive(pid) and time.monotonic() < end:
            time.sleep(0.2)
        if why:
            warn(f"supervisor (pid {pid}) not signalled: {why}")
        else:
            stopped.append(f"supervisor (pid {pid})")
    for name, info in (current.processes if current else {}).items():
        if ours(info.pid, layout):
            _killed(f"{name} (pid {info.pid}", _kill(info.pid), stopped, warn, info.pid, killed)
    if pid and ours(pid, layout):
        _killed(f"supervisor (pid {pid}, after the grace period", _kill(pid), stopped, warn, pid, killed)
    stopped += _kill_strays(layout, warn, killed)
    stopped += _real_node_teardown(layout, warn)
    if current and current.pod_network:  # the bridge and pods' namespaces of a supervisor that could not stop them
        # Named from the folder, never from the file: a name written there is only what the file says.
        stopped += _remove_network(network.PodNetwork(network.bridge_name(layout.root), current.pod_network.cidr))
    stopped += firewall.open_(network.bridge_name(layout.root))
    if current:
        current.phase = "stopped"
        state.save(layout.state_file, current)
    return stopped


def _real_node_teardown(layout: Layout, warn=_warn) -> list[str]:
    """What a real node left on the machine (a supervisor killed before it could stop it)."""
    from generator.controlplane.realnode import config, folder_name, host, netns

    linked = [p for p in (layout.root / folder_name(i) for i in range(netns.MAX_NODES)) if p.is_symlink()]
    for node in linked:
        warn(f"{node} is a symbolic link, which no cluster makes: left alone, and nothing done through it")
    if linked:
        return []
    if not config.Folders.every(layout):
        return []
    done, problems = host.teardown(layout.root)
    for problem in problems:
        warn(problem)
    return done


def _down_without_state(layout: Layout, warn=_warn) -> list[str]:
    """A state file this version cannot read: what the cluster started is still found by the marker
    in its environment, and its bridge by the folder's name; the file goes, as the error promised."""
    stopped = _kill_strays(layout, warn)
    stopped += _real_node_teardown(layout, warn)
    stopped += _remove_network(network.PodNetwork(network.bridge_name(layout.root), "0.0.0.0/32"))
    stopped += firewall.open_(network.bridge_name(layout.root))
    layout.state_file.unlink(missing_ok=True)
    return [*stopped, f"{layout.state_file} (unreadable, removed)"]


def _killed(what: str, why: str, stopped: list[str], warn, pid: int, killed: set[int]) -> None:
    if not why:
        stopped.append(f"{what}, killed)")
        killed.add(pid)
    elif why != "it had already exited":
        warn(f"{what}) not killed: {why}")


def _kill_strays(layout: Layout, warn=_warn, killed: set[int] | None = None) -> list[str]:
    """What is left of the cluster, but for what this run killed already: a killed process (or a
    member of a group killed whole) stays in /proc and its cgroup until it has exited, and is not
    left behind (under load that takes long enough for the sweep to meet it)."""
    stopped: list[str] = []
    killed = set() if killed is None else killed
    for stray in strays(layout.root):  # a pod's process whose kubelet died before it
        if stray not in killed and _group(stray) not in killed:
            _killed(f"pid {stray} (left behind", _kill(stray), stopped, warn, stray, killed)
    return stopped


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _remove_network(pods: network.PodNetwork) -> list[str]:
    if Path(f"/sys/class/net/{pods.bridge}").exists():
        try:
            pods.delete()
            return [f"pod network {pods.bridge} (left behind, removed)"]
        except network.NetworkError:
            pass
    return []
