"""`run --container`'s network and what a run owns: the job's network on a subnet free now, the
containers and network labelled with the run that made them (its pid and start time), removed
after the run in any case, by a watcher in a session of its own after a SIGKILL, and by the job's
next run when even that was killed; what podman changed on the machine for them put back
(hostnet.py) the same ways."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from generator import paths
from generator.errors import UserError
from generator.images import engine as engine_
from generator.local.backends.containers import hostnet
from generator.local.plan import Plan, Replica

LABEL = "io.pytorchjob-kit.run"  # on the job's network and containers: the run that owns them (pid-starttime)
POOL = ipaddress.ip_network("10.89.0.0/16")  # podman's own pool for the networks it makes


@dataclass(frozen=True)
class Network:
    """The job's own container network: pod i at the subnet's address i+2 (.1 is the gateway, this
    machine), so that the plan knows every address before a container starts."""
    name: str
    subnet: str  # an IPv4 CIDR

    def address(self, index: int) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + 2 + index)

    @property
    def gateway(self) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + 1)


def token(pid: int | None = None) -> str:
    """A process as `pid-starttime`: never the same for a later process that reuses the pid."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return f"{pid}-{stat.rsplit(')', 1)[1].split()[19]}"


def alive(owner: str) -> bool:
    pid, _, _ = owner.partition("-")
    return pid.isdigit() and token(int(pid)) == owner


def free_subnet(taken: list[str]) -> str:
    """The first /24 of podman's pool that overlaps none of `taken` (networks and routes)."""
    used = [ipaddress.ip_network(t, strict=False) for t in taken]
    for subnet in POOL.subnets(new_prefix=24):
        if not any(subnet.overlaps(u) for u in used if u.version == 4):
            return str(subnet)
    raise UserError(f"every /24 of {POOL} is taken by the engine's networks or this machine's routes; remove "
                    "networks you no longer need (`podman network prune`)")


def routes() -> list[str]:
    """This machine's IPv4 routes but the default one, as CIDRs."""
    out = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        words = line.split()
        if len(words) > 7 and words[1] != "00000000":
            dest, mask = (ipaddress.IPv4Address(int(w, 16).to_bytes(4, "little")) for w in (words[1], words[7]))
            out.append(str(ipaddress.ip_network(f"{dest}/{mask}", strict=False)))
    return out


def subnets_of(networks: list[dict]) -> list[str]:
    """The subnets of `network inspect`'s answers, podman's (`subnets`) or Docker's (`IPAM.Config`)."""
    found = [s.get("subnet") for n in networks for s in n.get("subnets") or []]
    found += [c.get("Subnet") for n in networks for c in (n.get("IPAM") or {}).get("Config") or []]
    return [s for s in found if s and ":" not in s]


def network_for(eng: engine_.Engine, job: str) -> Network:
    """The job's network as it will be made: named after the job, on a subnet free now."""
    names = eng.run("network", "ls", "--format", "{{.Name}}").stdout.split()
    networks = json.loads(eng.run("network", "inspect", *names).stdout or "[]") if names else []
    return Network(job, free_subnet([*subnets_of(networks), *routes()]))


def name(replica: Replica) -> str:
    """The container's name: the pod's hostname (its name, but for the suffix Trainer's pods carry)."""
    return replica.container.hostname


def _labels(answer: dict) -> dict:
    return (answer.get("Config") or {}).get("Labels") or answer.get("labels") or answer.get("Labels") or {}


def _clear(eng: engine_.Engine, plan: Plan, net: Network, say) -> None:
    """The job's names free for this run: what a killed earlier run of it left is removed; a run of
    it still going, or something else of the same name, is refused."""
    for kind, names in (("container", [name(r) for r in plan.replicas]), ("network", [net.name])):
        for found in names:
            proc = eng.run(kind, "inspect", found, check=False)
            if proc.returncode:
                continue
            owner = _labels((json.loads(proc.stdout) or [{}])[0]).get(LABEL)
            if not owner:
                raise UserError(f"a {kind} named {found} exists and is not a run's of this tool; the job's {kind} needs "
                                f"that name: remove it (`{eng.name} {kind} rm {found}`) or rename the job")
            if alive(owner):
                raise UserError(f"job {plan.job} already runs in containers here (process {owner.split('-')[0]}); "
                                "stop it first, or rename this one")
            say(f"note: removing {kind} {found}, left by an earlier run of the job that was killed")
            eng.run(kind, "rm", "--force", found, check=False, timeout=120)


def reap(owner: str, engine: str) -> None:
    """Wait for the run `owner` to end, then remove the containers and network labelled as its own:
    what a run killed with SIGKILL leaves, which no `finally` of its own removes."""
    while alive(owner):
        time.sleep(1)
    label = f"label={LABEL}={owner}"
    found = subprocess.run([engine, "ps", "--all", "--filter", label, "--format", "{{.Names}}"], capture_output=True,
                           text=True).stdout.split()
    if found:
        subprocess.run([engine, "rm", "--force", *found], capture_output=True)
    networks = subprocess.run([engine, "network", "ls", "--filter", label, "--format", "{{.Name}}"], capture_output=True,
                              text=True).stdout.split()
    if networks:
        subprocess.run([engine, "network", "rm", *networks], capture_output=True)
    if hostnet.applies(engine):
        hostnet.release(owner, alive)


def _watcher(eng: engine_.Engine, owner: str) -> subprocess.Popen:
    """reap() in a session of its own, which outlives this process whatever ends it."""
    where = str(paths.PACKAGE.parent)
    env = {**eng.environ(), "PYTHONPATH": os.pathsep.join(filter(None, [where, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", "import sys; from generator.local.backends.containers.network import reap; "
                             "reap(sys.argv[1], sys.argv[2])", owner, eng.name], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def up(eng: engine_.Engine, plan: Plan, net: Network, owner: str, say=print) -> Iterator[None]:
    """The job's network for the run; in any case after it, its containers and the network removed
    (by a watcher of its own when this process is killed with SIGKILL)."""
    _clear(eng, plan, net, say)
    watcher = _watcher(eng, owner)
    made = False  # until the network is ours, the names may be another run's that took them meanwhile
    host = hostnet.applies(eng.name)
    try:
        if host:
            hostnet.hold(owner, alive)
        eng.run("network", "create", "--subnet", net.subnet, "--label", f"{LABEL}={owner}", net.name)
        made = True
        yield
    finally:
        if made:
            eng.run("rm", "--force", *[name(r) for r in plan.replicas], check=False, timeout=300)
            eng.run("network", "rm", net.name, check=False, timeout=120)
        if host:  # once its containers are gone, whose rules the plugin removes with them
            hostnet.release(owner, alive, say=say)
        watcher.kill()
        watcher.wait()
