"""This machine as a node: what its containers may use (the downward API's resourceFieldRef
reads it where a container sets no limit): `generator run` resolves those references against it,
as the kubelet resolves them against its node's allocatable."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

POD_CAPACITY = "110"  # the kubelet's default maxPods
# Where Debian puts iptables, for root's commands run with a PATH that lacks the sbin folders.
IPTABLES_PATHS = [Path("/usr/sbin/iptables"), Path("/sbin/iptables")]


def iptables() -> Path | None:
    """This machine's iptables: the cluster's firewall and kube-proxy, and `run --container`'s undoing of podman's chains."""
    found = shutil.which("iptables")
    return Path(found) if found else next((p for p in IPTABLES_PATHS if p.is_file()), None)


def memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def allocatable(cpu: str | None = None, memory: str | None = None, gpus: int = 0) -> dict[str, str]:
    """This machine's CPUs and memory unless told otherwise, plus nvidia.com/gpu when asked."""
    out = {"cpu": cpu or str(os.cpu_count() or 1), "memory": memory or f"{memory_bytes() // 1024}Ki",
           "pods": POD_CAPACITY, "ephemeral-storage": "100Gi"}
    if gpus:
        out["nvidia.com/gpu"] = str(gpus)
    return out
