"""Only root on this machine reaches a cluster's pods and its CoreDNS: they answer anyone who can
send them a packet, and the machine routes the cluster's /24, so without this every local user could
resolve its Services, read the operators' metrics and reach a job's MASTER_PORT.

A chain of the cluster's own, jumped to from the machine's OUTPUT chain for what a process of any
user but root sends to the cluster's /24, rejects all of it but the host's address on the bridge
(.1), where the API server and the kubelet listen and refuse anyone without credentials; there it
rejects only CoreDNS's port. The cluster's own processes on the host (API server, kubelet, CoreDNS,
the supervisor) run as root, and pods send from their own network namespaces, which OUTPUT here
never sees. The chain is named by the cluster's bridge, which its folder's name derives, so
`cluster down` removes exactly its own and nothing a state file could name."""
from __future__ import annotations

import ipaddress
import shlex
import subprocess

from generator.container import machine
from generator.controlplane.network import NetworkError
from generator.controlplane.realnode.dns import PORT as DNS_PORT  # CoreDNS's, on the host's address


def _iptables() -> str | None:
    found = machine.iptables()
    return str(found) if found else None


def chain(bridge: str) -> str:
    return f"PJK-{bridge}"  # iptables allows 28 characters; a bridge's name has 11


def rules(bridge: str, cidr: str) -> list[list[str]]:
    """The chain's rules, in order. Refused at once where DROP would hang: a TCP reset (ECONNREFUSED),
    else the send fails (EPERM); RETURN hands the rest of the host's address back to OUTPUT, whatever
    else the machine's rules say of it."""
    host = f"{ipaddress.ip_network(cidr).network_address + 1}/32"
    reset = ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"]
    return [["-d", host, "-p", "udp", "--dport", str(DNS_PORT), "-j", "REJECT"],
            ["-d", host, *reset[:2], "--dport", str(DNS_PORT), *reset[2:]],
            ["-d", host, "-j", "RETURN"], reset, ["-j", "REJECT"]]


def jump(bridge: str, cidr: str) -> list[str]:
    return ["-d", cidr, "-m", "owner", "!", "--uid-owner", "0", "-m", "comment", "--comment",
            f"pytorchjob-kit: only root reaches the pods of {bridge}", "-j", chain(bridge)]


def close(bridge: str, cidr: str) -> None:
    """Add the cluster's chain and OUTPUT's jump to it (an earlier run's go first)."""
    iptables = _iptables()
    if iptables is None:
        raise NetworkError("iptables is missing, and without it every user of this machine reaches the cluster's "
                           "pods; install it (Debian: `apt-get install iptables`)")
    open_(bridge)
    for args in (["-N", chain(bridge)], *(["-A", chain(bridge), *r] for r in rules(bridge, cidr)),
                 ["-I", "OUTPUT", *jump(bridge, cidr)]):
        done = subprocess.run([iptables, "-w", "5", *args], capture_output=True, text=True)
        if done.returncode != 0:
            open_(bridge)
            raise NetworkError(f"iptables {shlex.join(args)}: {done.stderr.strip()}")


def jumps(bridge: str) -> list[list[str]]:
    """OUTPUT's jumps to the cluster's chain, as `iptables -S` writes them, less `-A OUTPUT`."""
    iptables = _iptables()
    if iptables is None:
        return []
    listed = subprocess.run([iptables, "-w", "5", "-S", "OUTPUT"], capture_output=True, text=True)
    found = []
    for line in listed.stdout.splitlines():
        words = shlex.split(line)
        if words[:2] == ["-A", "OUTPUT"] and words[-2:] == ["-j", chain(bridge)]:
            found.append(words[2:])
    return found


def open_(bridge: str) -> list[str]:
    """Remove the cluster's chain and the jumps to it; what was removed, for `cluster down` to say."""
    iptables = _iptables()
    if iptables is None:
        return []
    for words in jumps(bridge):
        subprocess.run([iptables, "-w", "5", "-D", "OUTPUT", *words], capture_output=True)
    if subprocess.run([iptables, "-w", "5", "-S", chain(bridge)], capture_output=True).returncode != 0:
        return []
    subprocess.run([iptables, "-w", "5", "-F", chain(bridge)], capture_output=True)
    subprocess.run([iptables, "-w", "5", "-X", chain(bridge)], capture_output=True)
    return [f"the firewall chain {chain(bridge)} that kept other users from the cluster's pods (removed)"]
