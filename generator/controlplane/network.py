"""The local cluster's network: a Linux bridge whose first address is the API server's and the
node's, and a /24 of pod addresses behind it (the node's network namespace and its pods' veths:
realnode/netns.py). Pods get their own IPs and ports, as on a cluster, and the API server reaches
webhooks and probes at those IPs."""
from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

POD_RANGE = ipaddress.ip_network("10.244.0.0/16")  # one /24 of it per cluster
NETNS_DIR = Path("/run/netns")


class NetworkError(Exception):
    """The pod network could not be set up; the message says what to change."""


def _ip(*args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise NetworkError("the `ip` command (iproute2) is missing; install it, e.g. `apt-get install iproute2`") from None
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def check() -> None:
    """The pod network needs root (CAP_NET_ADMIN) and iproute2; say so before anything starts."""
    if os.geteuid() != 0:
        raise NetworkError("the local cluster gives each pod its own network namespace, which needs root "
                           "(CAP_NET_ADMIN); run it as root, for example in a VM or a privileged container")
    if shutil.which("ip") is None:
        _ip("-V")


@contextlib.contextmanager
def choosing():
    """Held by one cluster of this machine at a time from choosing its /24 to creating its bridge:
    two clusters coming up together would otherwise both find the same /24 free."""
    import fcntl

    NETNS_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(NETNS_DIR.parent / "pytorchjob-kit-network.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def bridge_name(root: Path) -> str:
    """The bridge of the cluster in `root`: the same name for the same folder, whatever its state file says."""
    return "pjk" + hashlib.sha256(str(root).encode()).digest()[:4].hex()


@dataclass(frozen=True)
class PodNetwork:
    bridge: str
    cidr: str

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(self.cidr)

    @property
    def gateway(self) -> str:
        """The bridge's address: the API server listens here and it is the node's InternalIP."""
        return str(self.subnet.network_address + 1)

    @classmethod
    def for_cluster(cls, root: Path) -> PodNetwork:
        """The same bridge and subnet for the same folder, moved on from any /24 this machine
        already routes (another cluster, a VPN)."""
        digest = hashlib.sha256(str(root).encode()).digest()
        bridge = bridge_name(root)
        used = []
        for line in _ip("-4", "route", "show").splitlines():
            words = line.split()
            # The default route covers everything; this cluster's own bridge, left by a crash, goes anyway.
            if words and words[0][0].isdigit() and f"dev {bridge} " not in f"{line} ":
                used.append(ipaddress.ip_network(words[0], strict=False))
        blocks = list(POD_RANGE.subnets(new_prefix=24))
        for i in range(len(blocks)):
            block = blocks[(digest[4] + i) % len(blocks)]
            if not any(block.overlaps(u) for u in used):
                return cls(bridge, str(block))
        raise NetworkError(f"every /24 of {POD_RANGE} is routed on this machine already; free one")

    # --- the bridge --------------------------------------------------------------------------
    def create(self) -> None:
        self.delete()  # a crashed cluster's bridge
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def delete(self) -> None:
        _ip("link", "delete", self.bridge, check=False)
