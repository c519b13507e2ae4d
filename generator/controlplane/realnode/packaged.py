"""What the real node takes from this machine rather than building it (its built parts are the
node's groups of controlplane/build.py): runc (crun refuses hybrid cgroups), the CNI plugins the
bridge network needs and iptables for kube-proxy's Service rules, from Debian's packages."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from generator import debian
from generator.container import machine
from generator.errors import UserError

RUNC_PATHS = [Path("/usr/sbin/runc"), Path("/usr/bin/runc")]
IPTABLES_PATHS = machine.IPTABLES_PATHS
CNI_DIRS = [Path("/usr/lib/cni"), Path("/opt/cni/bin")]
CNI_PLUGINS = ["bridge", "host-local", "loopback", "portmap"]
PACKAGES = ["runc", "containernetworking-plugins", "iptables"]


def runc() -> Path | None:
    found = shutil.which("runc")
    return Path(found) if found else next((p for p in RUNC_PATHS if p.is_file()), None)


def iptables() -> Path | None:
    return machine.iptables()


def cni_dir() -> Path | None:
    return next((d for d in CNI_DIRS if all((d / p).is_file() for p in CNI_PLUGINS)), None)


def install(say=print) -> tuple[Path, Path]:
    """runc and the CNI plugins' folder, installed from Debian's packages with iptables when any is
    missing (as root)."""
    if runc() and cni_dir() and iptables():
        return runc(), cni_dir()
    command = f"apt-get update && apt-get install -y {' '.join(PACKAGES)}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise UserError(f"the node needs runc, iptables and the CNI plugins {', '.join(CNI_PLUGINS)} (in one of "
                        f"{', '.join(map(str, CNI_DIRS))}); install them as root: `{command}`")
    say(f"installing runc, iptables and the CNI plugins from Debian's packages, as root: {command}")
    failed = debian.install(PACKAGES)
    if failed:
        raise UserError(f"{failed}\ninstall {' and '.join(PACKAGES)} yourself")
    if not (runc() and cni_dir() and iptables()):
        raise UserError(f"{' and '.join(PACKAGES)} are installed but runc, iptables or the CNI plugins "
                        f"{', '.join(CNI_PLUGINS)} are not where the node looks "
                        f"({', '.join(map(str, RUNC_PATHS + IPTABLES_PATHS + CNI_DIRS))})")
    return runc(), cni_dir()
