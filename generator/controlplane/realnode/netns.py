"""The real node's own network namespace, as kind gives each node a container of its own: the
pods' bridge, the CNI plugins' work and kube-proxy's firewall rules all live inside it, so two
clusters on one machine each have their own tables and the machine's stay as they were. One veth
joins it to the cluster's bridge on the host, where the API server, the kubelet and CoreDNS listen
on the bridge's address; the host routes the upper half of the cluster's /24, the pods' addresses,
through it. containerd and the kubelet stay on the host (they pull from the machine's registry on
loopback): only what touches the pods' network runs inside, through `enter`.

With several nodes (`cluster up --nodes N`) each has a namespace and a veth of its own on the one
bridge, the next address of the lower half, and an equal block of the upper half for its pods;
every namespace routes each other node's block straight to that node over the bridge, so pods on
different nodes reach each other directly, as on a flat cluster network."""
from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator.controlplane.network import NETNS_DIR, NetworkError

UPLINK = "eth0"  # the node's side of the veth, inside its namespace
POD_BRIDGE = "pods"  # the pods' bridge, inside the node's namespace
NSENTER = "/usr/bin/nsenter"


MAX_NODES = 8  # the upper half of a /24 in blocks of /28: 13 pods a node


def pod_blocks(cidr: str, count: int) -> list[ipaddress.IPv4Network]:
    """The pods' addresses of each of `count` nodes: the upper half of the cluster's /24, split
    into as many equal blocks as the next power of two holds (one node keeps the whole half)."""
    upper = list(ipaddress.ip_network(cidr).subnets(prefixlen_diff=1))[1]
    return list(upper.subnets(prefixlen_diff=max(count - 1, 0).bit_length()))[:count]


@dataclass(frozen=True)
class NodeNetwork:
    bridge: str  # the cluster's bridge on the host
    cidr: str  # the cluster's /24: the lower half the host's bridge, the upper the pods'
    index: int = 0  # which of the cluster's nodes (0 is the first)
    count: int = 1  # how many nodes the cluster has

    @property
    def _halves(self) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
        lower, upper = ipaddress.ip_network(self.cidr).subnets(prefixlen_diff=1)
        return lower, upper

    @property
    def name(self) -> str:
        return name(self.bridge, self.index)

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def host_veth(self) -> str:
        return host_veth(self.bridge, self.index)

    @property
    def host_address(self) -> str:
        """The host bridge's address: the API server, the kubelet and CoreDNS listen here."""
        return str(self._halves[0].network_address + 1)

    @property
    def address(self) -> str:
        """The node's address on the host's bridge: the next hop to its pods."""
        return self.address_of(self.index)

    def address_of(self, index: int) -> str:
        return str(self._halves[0].network_address + 2 + index)

    @property
    def pod_cidr(self) -> str:
        """This node's pods' addresses."""
        return str(pod_blocks(self.cidr, self.count)[self.index])

    @property
    def pods_cidr(self) -> str:
        """Every node's pods' addresses: the upper half of the cluster's /24."""
        return str(self._halves[1])

    @property
    def pod_gateway(self) -> str:
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)

    def routes(self) -> list[tuple[str, str]]:
        """(block, next hop) for each other node's pods, straight over the bridge."""
        return [(str(block), self.address_of(i)) for i, block in enumerate(pod_blocks(self.cidr, self.count))
                if i != self.index]

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
            *([*inside, "ip", "route", "add", block, "via", hop, "dev", UPLINK] for block, hop in self.routes()),
            ["ip", "route", "replace", self.pod_cidr, "via", self.address, "dev", self.bridge],
        ):
            _run(argv)

    def cut(self) -> None:
        """The node's cable pulled: its veth down on the host, so nothing reaches it or its pods."""
        subprocess.run(["ip", "link", "set", self.host_veth, "down"], capture_output=True)

    def delete(self) -> bool:
        return remove(self.bridge, self.index)


def name(bridge: str, index: int = 0) -> str:
    """Named with the cluster's sandbox prefix, so removing the cluster's network removes it too."""
    return f"{bridge}-node" + (f"{index + 1}" if index else "")


def host_veth(bridge: str, index: int = 0) -> str:
    return f"{bridge}n" + (f"{index + 1}" if index else "")  # 13 characters at most of the 15 a name may have


def remove(bridge: str, index: int = 0) -> bool:
    """One node's namespace of the cluster whose bridge is `bridge` (its veth, the pods' bridge and
    its firewall rules go with it; the host's route to the pods goes with the host's bridge, or is
    replaced at the next start). Whether there was one."""
    found = (NETNS_DIR / name(bridge, index)).exists()
    subprocess.run(["ip", "netns", "delete", name(bridge, index)], capture_output=True)
    subprocess.run(["ip", "link", "delete", host_veth(bridge, index)], capture_output=True)
    return found


def remove_all(bridge: str) -> list[str]:
    """Every node's namespace of the cluster, found by name (a killed run's count is not known):
    the names removed."""
    found = sorted(p.name for p in NETNS_DIR.glob(f"{bridge}-node*") if p.name[len(bridge) + 5:].isdigit()
                   or p.name == name(bridge)) if NETNS_DIR.is_dir() else []
    for index in range(MAX_NODES):
        if name(bridge, index) in found:
            remove(bridge, index)
    return found


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip()}")
