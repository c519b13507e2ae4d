"""What a job becomes on this machine: one process per pod, with the env its controller injects,
the container's own env and command, and volumes mapped to folders; or, with a Network (`run
--container`), one container per pod from its own image, at an address of its own on the job's
network and reached by the names a cluster gives its pods. Each kind of job plans its own pods
(generator/kinds) and brings the policy its controller follows (local/policy.py).

Pure planning, no processes: generator.local.runner executes the plan."""
from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import Finding, UserError
from generator.local.policy import Policy

MAX_LOCAL_PODS = 64  # one process each (more under torchrun): beyond this a laptop only thrashes


@dataclass
class Replica:
    name: str  # master-0, worker-0, ... as the operator names pods (without the job prefix)
    role: str  # Master | Worker
    rank: int  # node rank, as RANK / PET_NODE_RANK
    restart_policy: str
    argv: list[str]
    env: dict[str, str]
    mounts: dict[str, Path] = field(default_factory=dict)  # container path -> local folder
    cwd: Path | None = None  # the container's workingDir as a folder; None: the shell's
    container: Container | None = None  # set when the replica runs as a container of its image


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


@dataclass
class Container:
    """A replica as a container of its own image: what `podman run` needs beyond the replica's
    name, env and mounts (generator.local.containers builds the argv)."""
    image: str
    command: list[str]  # the container's command, expanded; [] runs the image's ENTRYPOINT
    args: list[str]  # its args, expanded; with no command they replace the image's CMD
    hostname: str  # as the pod's: <job>-master-0, or Trainer's <job>-node-0-<i>
    dns: str  # the name the other pods reach it by (the operator's Service, or hostname.subdomain)
    address: str
    workdir: str | None = None
    uid: int | None = None  # runAsUser (the container's over the pod's); None: the image's USER
    gid: int | None = None  # runAsGroup
    groups: list[int] = field(default_factory=list)  # fsGroup, then supplementalGroups
    fs_group: int | None = None
    non_root: bool = False  # runAsNonRoot: an image that would run as root is refused at start
    read_only: bool = False
    privileged: bool = False
    no_new_privileges: bool = False
    cap_drop: list[str] = field(default_factory=list)
    cap_add: list[str] = field(default_factory=list)
    memory: int | None = None  # limits.memory in bytes
    cpus: str | None = None  # limits.cpu in CPUs
    shm: int | None = None  # /dev/shm's size in bytes: a memory emptyDir mounted there; None: the engine's 64 MiB
    claims: set[str] = field(default_factory=set)  # the mount paths of claims (fsGroup applies to all they hold)
    read_only_mounts: set[str] = field(default_factory=set)  # mounted readOnly

    @property
    def user(self) -> str | None:
        """--user: uid, or uid:gid; None leaves the image's USER."""
        if self.uid is None:
            return None
        return f"{self.uid}:{self.gid}" if self.gid is not None else str(self.uid)


DISKS = "pods"  # under the run folder: what dies with a pod on a cluster


@dataclass
class Plan:
    job: str
    run_dir: Path
    replicas: list[Replica]
    policy: Policy  # its kind's controller: restarts, success, the env shown
    active_deadline: int | None
    notes: list[str]
    network: Network | None = None  # set when the replicas run as containers on it

    @property
    def disks(self) -> Path:
        """Each pod's own folders (emptyDirs, its container disk's outputs): fresh for every run."""
        return self.run_dir / DISKS


def check_pods(pods: int, path: str, value: int, source: str = "") -> None:
    if pods > MAX_LOCAL_PODS:
        raise UserError([Finding(path, f"makes {pods} pods, more than this machine runs as processes "
                                 f"({MAX_LOCAL_PODS} at most)", value,
                                 "run a smaller copy of the job here, or submit it to a cluster")], source=source)


# What every kind's pods get from the chart beside their controller's contract, shown by --dry-run.
SHOWN_ENV = ("OUTPUT_DIR",)


def describe(plan: Plan, env: bool = False) -> str:
    lines = [plan.policy.headline(plan)]
    if plan.network:
        lines[0] += f"; as containers on network {plan.network.name} ({plan.network.subnet})"
    for r in plan.replicas:
        run = shlex.join(r.argv)
        if r.container:  # the image's own program where the container names none
            c = r.container
            run = f"{c.image} at {c.address}: " + (run if c.command else " ".join(["(its ENTRYPOINT)", *([run] if run else [])]))
        lines.append(f"  {r.name} (rank {r.rank}, restartPolicy {r.restart_policy}): {run}")
        if env:
            shown = [f"{k}={r.env[k]}" for k in (*plan.policy.shown_env, *SHOWN_ENV) if k in r.env]
            lines.append("    env: " + " ".join(shown))
    return "\n".join(lines)
