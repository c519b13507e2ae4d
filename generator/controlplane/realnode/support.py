"""Whether the real node can run on this machine, and if not, why and what to change: `cluster up`
and `cluster build` take it where it can run and fall back to the process node where it cannot
(lifecycle.choose_node). Each check is a pure function of `Machine`, what `Machine.read` finds here,
so each reason can be given without the machine that has it. A check only reads: runc and the CNI
plugins and iptables count as there when the node's build would install them (build.host_packages)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from generator.controlplane.realnode import build

# What runs the real node's pods, as `cluster up` and `cluster status` name it.
RUNS = "kubelet, containerd, runc"


@dataclass(frozen=True)
class Machine:
    """What the real node needs of this machine, as read from it."""
    euid: int
    runc: bool  # runc on PATH or where Debian puts it
    cni: bool  # the CNI plugins the bridge network needs, in one folder
    apt_get: bool
    cgroups: tuple[tuple[Path, bool], ...]  # each mounted hierarchy, and whether it is writable
    iptables: bool  # kube-proxy's, on PATH or where Debian puts it
    gcc: bool
    pause_built: bool  # the sandbox image, which gcc builds, is in the cache already

    @classmethod
    def read(cls) -> Machine:
        from generator.controlplane.realnode import host

        return cls(euid=os.geteuid(), runc=build.runc() is not None, cni=build.cni_dir() is not None,
                   apt_get=shutil.which("apt-get") is not None,
                   cgroups=tuple((h, os.access(h, os.W_OK)) for h in host.hierarchies()),
                   iptables=build.iptables() is not None, gcc=shutil.which("gcc") is not None,
                   pause_built=build.PAUSE_ARCHIVE not in build.missing())


def root(machine: Machine) -> str | None:
    if machine.euid != 0:
        return (f"the real node needs root (containerd, runc, the node's cgroups and mounts), and this runs as uid "
                f"{machine.euid}: run it as root")
    return None


def _lacking(machine: Machine) -> list[str]:
    return [what for what, there in (
        ("runc", machine.runc), ("iptables, with which kube-proxy writes Services' rules", machine.iptables),
        (f"the CNI plugins ({', '.join(build.CNI_PLUGINS)} in one of {', '.join(map(str, build.CNI_DIRS))})", machine.cni))
        if not there]


def installs_packages(machine: Machine) -> bool:
    """Whether the real node's first start here installs runc, iptables and the CNI plugins (as
    build.host_packages does: only as root, with apt-get)."""
    return bool(_lacking(machine)) and machine.euid == 0 and machine.apt_get


def packages(machine: Machine) -> str | None:
    lacking = _lacking(machine)
    if not lacking or installs_packages(machine):
        return None
    return (f"the real node needs {' and '.join(lacking)}, and apt-get is not here to install them: install "
            f"{' and '.join(build.PACKAGES)}")


def cgroups(machine: Machine) -> str | None:
    if not machine.cgroups:
        return ("the real node puts its pods in cgroups, and no cgroup hierarchy is mounted here (/proc/self/mounts): "
                "mount one (cgroup2 on /sys/fs/cgroup)")
    closed = [str(h) for h, writable in machine.cgroups if not writable]
    if closed:
        return (f"the real node makes its cgroup in every cgroup hierarchy, and {', '.join(closed)} "
                f"{'is' if len(closed) == 1 else 'are'} not writable (mounted read-only, as in an unprivileged "
                "container): run it where the cgroups are writable")
    return None


def gcc(machine: Machine) -> str | None:
    if not machine.pause_built and not machine.gcc:
        return ("the real node's sandbox image is built with gcc -static, and gcc is not on PATH: install it "
                "(`apt-get install -y gcc libc6-dev`)")
    return None


CHECKS = (root, packages, cgroups, gcc)


def why_not(machine: Machine) -> str | None:
    """The first reason the real node cannot run on `machine`, with what to change; None when it can."""
    return next((reason for check in CHECKS if (reason := check(machine))), None)


def process_only(cpu: str | None, memory: str | None, gpus: int, images: dict[str, str]) -> str | None:
    """What in `cluster up`'s options only the process node takes, said as the reason the real node
    does not; None when nothing."""
    hosted = sorted(ref for ref, target in images.items() if target == "host")
    if hosted:
        return (f"--image {hosted[0]}=host runs your code with this machine's python, which only the process node "
                "does; the real node runs images")
    sized = [flag for flag, given in (("--cpu", cpu), ("--memory", memory), ("--gpus", gpus)) if given]
    if sized:
        verb = "size" if len(sized) > 1 else "sizes"
        return (f"{' and '.join(sized)} {verb} the process node; the real node offers this machine's CPUs and memory "
                "as its kubelet measures them")
    return None
