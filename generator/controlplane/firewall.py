"""Only root on this machine reaches a cluster's addresses: its pods and CoreDNS (on the bridge's
address) answer anyone who can send them a packet, and the machine routes the cluster's /24, so
without this every local user could resolve its Services, read the operators' metrics and reach a
job's MASTER_PORT. One rule in the machine's OUTPUT chain rejects what a process of any other user
sends to the cluster's /24; the cluster's own processes on the host (API server, kubelet, CoreDNS,
the supervisor) run as root, and pods send from their own network namespaces, which OUTPUT here
never sees. The rule is named by the cluster's bridge, which its folder's name derives, so
`cluster down` removes exactly its own and no rule a state file could name."""
from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from generator.controlplane.network import NetworkError

IPTABLES_PATHS = (Path("/usr/sbin/iptables"), Path("/sbin/iptables"))


def _iptables() -> str | None:
    found = shutil.which("iptables")
    return found or next((str(p) for p in IPTABLES_PATHS if p.is_file()), None)


def comment(bridge: str) -> str:
    return f"pytorchjob-kit {bridge}: only root reaches this cluster"


def rule(bridge: str, cidr: str) -> list[str]:
    """The rule after `-I OUTPUT` / `-D OUTPUT`: REJECT answers at once (ECONNREFUSED), where DROP would hang."""
    return ["-d", cidr, "-m", "owner", "!", "--uid-owner", "0", "-m", "comment", "--comment", comment(bridge),
            "-j", "REJECT"]


def close(bridge: str, cidr: str, required: bool = True) -> bool:
    """Add the cluster's rule (an earlier run's goes first); whether it was added. Without iptables,
    an error when `required`, else nothing (the caller says the addresses stay open)."""
    iptables = _iptables()
    if iptables is None:
        if required:
            raise NetworkError("iptables is missing, and without it every user of this machine reaches the cluster's "
                               "pods; install it (Debian: `apt-get install iptables`)")
        return False
    open_(bridge)
    done = subprocess.run([iptables, "-w", "5", "-I", "OUTPUT", *rule(bridge, cidr)], capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"iptables -I OUTPUT {shlex.join(rule(bridge, cidr))}: {done.stderr.strip()}")
    return True


def rules(bridge: str) -> list[list[str]]:
    """The cluster's rules in OUTPUT as `iptables -S` writes them, less `-A OUTPUT`."""
    iptables = _iptables()
    if iptables is None:
        return []
    listed = subprocess.run([iptables, "-w", "5", "-S", "OUTPUT"], capture_output=True, text=True)
    found = []
    for line in listed.stdout.splitlines():
        words = shlex.split(line)
        if words[:2] == ["-A", "OUTPUT"] and comment(bridge) in words:
            found.append(words[2:])
    return found


def open_(bridge: str) -> list[str]:
    """Remove the cluster's rules; what was removed, for `cluster down` to say."""
    iptables = _iptables()
    removed = []
    for words in rules(bridge):
        if subprocess.run([iptables, "-w", "5", "-D", "OUTPUT", *words], capture_output=True).returncode == 0:
            removed.append(f"the firewall rule that kept other users from the pods of {bridge} (removed)")
    return removed
