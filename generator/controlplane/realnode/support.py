"""Whether the node can run on this machine, and if not, why and what to change (`cluster up` and
`cluster build` refuse with it: lifecycle.check_machine), and what of `cluster up`'s options the
node takes. Each check is a pure function of what `Machine.read` and `Capacity.read` find here, so
each reason can be given without the machine that has it. A check only reads: runc and the CNI
plugins and iptables count as there when the node's start would install them (packaged.install)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from generator.controlplane import build, pins
from generator.controlplane.realnode import packaged
from generator.errors import UserError

# What runs the node's pods, as `cluster up` names it.
RUNS = "kubelet, containerd, runc"
# The answer to `--node process`, the pods-as-processes node that was retired.
ONE_NODE = (f"the local cluster has one kind of node, the real one ({RUNS} and kube-proxy, as on your cluster); it "
            "needs root, writable cgroups, runc, iptables and the CNI plugins (installed from Debian's packages when "
            "missing): drop --node")
# The kubelet's memory.available eviction threshold (config.kubelet_config): allocatable memory is what is
# left of the machine's after it and what the kubelet reserves.
EVICTION_MEMORY = "100Mi"


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

        return cls(euid=os.geteuid(), runc=packaged.runc() is not None, cni=packaged.cni_dir() is not None,
                   apt_get=shutil.which("apt-get") is not None,
                   cgroups=tuple((h, os.access(h, os.W_OK)) for h in host.hierarchies()),
                   iptables=packaged.iptables() is not None, gcc=shutil.which("gcc") is not None,
                   pause_built=pins.PAUSE_ARCHIVE not in build.missing([build.group_of(pins.PAUSE_ARCHIVE)]))


def root(machine: Machine) -> str | None:
    if machine.euid != 0:
        return (f"the real node needs root (containerd, runc, the node's cgroups and mounts), and this runs as uid "
                f"{machine.euid}: run it as root")
    return None


def _lacking(machine: Machine) -> list[str]:
    return [what for what, there in (
        ("runc", machine.runc), ("iptables, with which kube-proxy writes Services' rules", machine.iptables),
        (f"the CNI plugins ({', '.join(packaged.CNI_PLUGINS)} in one of {', '.join(map(str, packaged.CNI_DIRS))})", machine.cni))
        if not there]


def installs_packages(machine: Machine) -> bool:
    """Whether the real node's first start here installs runc, iptables and the CNI plugins (as
    packaged.install does: only as root, with apt-get)."""
    return bool(_lacking(machine)) and machine.euid == 0 and machine.apt_get


def packages(machine: Machine) -> str | None:
    lacking = _lacking(machine)
    if not lacking or installs_packages(machine):
        return None
    return (f"the real node needs {' and '.join(lacking)}, and apt-get is not here to install them: install "
            f"{' and '.join(packaged.PACKAGES)}")


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


def hosted_image(images: dict[str, str]) -> str | None:
    """`--image REPO=host` is `run`'s (this machine's python runs the code); the node runs images."""
    hosted = sorted(ref for ref, target in images.items() if target == "host")
    if not hosted:
        return None
    return (f"--image {hosted[0]}=host runs your code with this machine's python, which only `generator run` does; the "
            f"node runs images: give your code's folder instead, `--image {hosted[0]}=DIR[:PATH]` (DIR laid over the "
            "image at PATH, default its workingDir), or put your own image into the registry on this machine "
            "(`python -m generator image load IMAGE`)")


@dataclass(frozen=True)
class Capacity:
    """This machine's CPUs and memory, as the kubelet measures them (cadvisor: online CPUs, MemTotal)."""
    cpus: int
    memory: int  # bytes

    @classmethod
    def read(cls) -> Capacity:
        total = 0
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
        return cls(os.cpu_count() or 1, total)


def system_reserved(node, machine: Capacity) -> dict[str, str]:
    """The kubelet's systemReserved that leaves the node's allocatable at `--cpu` and `--memory`
    (state.NodeOptions); {} when neither is given. More than the machine has is refused, naming the
    way to test a smaller quota without a smaller node."""
    from generator.job import quantity

    reserved = {}
    if node.cpu:
        asked = quantity.parse(node.cpu)
        if asked > machine.cpus:
            _too_much("--cpu", node.cpu, f"{machine.cpus} CPUs")
        left = round((machine.cpus - asked) * 1000)
        if left:
            reserved["cpu"] = f"{left}m"
    if node.memory:
        asked = quantity.parse(node.memory)
        most = machine.memory - quantity.parse(EVICTION_MEMORY)
        if asked > most:
            _too_much("--memory", node.memory, f"{most / 2**20:.0f}Mi (its {machine.memory / 2**20:.0f}Mi less the "
                                               f"kubelet's eviction threshold of {EVICTION_MEMORY})")
        left = int(most - asked)
        if left:
            reserved["memory"] = str(left)
    return reserved


def _too_much(flag: str, value: str, most: str) -> None:
    raise UserError(f"{flag} {value}: the node's allocatable can be at most what this machine has, {most}; give less, "
                    "or, to test jobs against a smaller quota than the machine, keep the node whole and use "
                    "`--kueue --kueue-quota cpu=...,memory=...`")
