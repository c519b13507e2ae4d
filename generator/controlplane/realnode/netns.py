"""The real node's own network namespace, as kind gives each node a container of its own: the
pods' bridge, the CNI plugins' work and kube-proxy's firewall rules all live inside it, so two
clusters on one machine each have their own tables and the machine's stay as they were. One veth
joins it to the cluster's bridge on the host, where the API server, the kubelet and CoreDNS listen
on the bridge's address; the host routes the upper half of the cluster's /24, the pods' addresses,
through it. containerd and the kubelet stay on the host (they pull from the machine's registry on
loopback): only what touches the pods' network runs inside, through `enter`."""
from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator.controlplane.network import NETNS_DIR, NetworkError

UPLINK = "eth0"  # the node's side of the veth, inside its namespace
POD_BRIDGE = "pods"  # the pods' bridge, inside the node's namespace
NSENTER = "/usr/bin/nsenter"


@dataclass(frozen=True)
class NodeNetwork:
    bridge: str  # the cluster's bridge on the host
    cidr: str  # the cluster's /24: the lower half the host's bridge, the upper the pods'

    @property
    def _halves(self) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
        lower, upper = ipaddress.ip_network(self.cidr).subnets(prefixlen_diff=1)
        return lower, upper

    @property
    def name(self) -> str:
        return name(self.bridge)

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def host_veth(self) -> str:
        return host_veth(self.bridge)

    @property
    def host_address(self) -> str:
        """The host bridge's address: the API server, the kubelet and CoreDNS listen here."""
        return str(self._halves[0].network_address + 1)

    @property
    def address(self) -> str:
        """The node's address on the host's bridge: the next hop to every pod."""
        return str(self._halves[0].network_address + 2)

    @property
    def pod_cidr(self) -> str:
        return str(self._halves[1])

    @property
    def pod_gateway(self) -> str:
        return str(self._halves[1].network_address + 1)

    def enter(self, argv: list[str]) -> list[str]:
        """argv run in the node's network namespace (and nothing else of the process changed)."""
        return [NSENTER, f"--net={self.path}", "--", *argv]

    # --- on the machine ----------------------------------------------------------------------
    def create(self) -> None:
        """The namespace, its veth to the host's bridge, forwarding inside it, and the host's route
        to the pods through it. Idempotent: an earlier run's namespace is removed first."""
        self.delete()
        prefix = ipaddress.ip_network(self.cidr).prefixlen + 1
        inside = ["ip", "netns", "exec", self.name]
        for argv in (
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", UPLINK, "netns", self.name],
            ["ip", "link", "set", self.host_veth, "master", self.bridge, "up"],
            [*inside, "ip", "link", "set", "lo", "up"],
            [*inside, "ip", "addr", "add", f"{self.address}/{prefix}", "dev", UPLINK],
            [*inside, "ip", "link", "set", UPLINK, "up"],
            [*inside, "ip", "route", "add", "default", "via", self.host_address],
            # A new namespace forwards nothing: its pods reach the host, and each other through Services, by it.
            [*inside, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
            ["ip", "route", "replace", self.pod_cidr, "via", self.address, "dev", self.bridge],
        ):
            _run(argv)

    def delete(self) -> bool:
        return remove(self.bridge)


def name(bridge: str) -> str:
    """Named with the cluster's sandbox prefix, so removing the cluster's network removes it too."""
    return f"{bridge}-node"


def host_veth(bridge: str) -> str:
    return f"{bridge}n"


def remove(bridge: str) -> bool:
    """The node's namespace of the cluster whose bridge is `bridge` (its veth, the pods' bridge and
    its firewall rules go with it; the host's route to the pods goes with the host's bridge, or is
    replaced at the next start). Whether there was one."""
    found = (NETNS_DIR / name(bridge)).exists()
    subprocess.run(["ip", "netns", "delete", name(bridge)], capture_output=True)
    subprocess.run(["ip", "link", "delete", host_veth(bridge)], capture_output=True)
    return found


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip()}")
