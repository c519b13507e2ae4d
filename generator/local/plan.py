"""What a job becomes on this machine: one replica per pod, with the env its controller injects,
the container's own env and command, and volumes mapped to folders, each run by the plan's backend
(local/backends/: a process of this machine, or a container of its own image). Each kind of job
plans its own pods (generator/kinds) and brings the policy its controller follows (local/policy.py).

Pure planning, no processes: generator.local.runner executes the plan."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from generator.errors import Finding, UserError
from generator.local import backends
from generator.local.policy import Policy

if TYPE_CHECKING:
    from generator.local.backends.base import Backend

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
    container: Any = None  # what its backend runs beyond argv, env and mounts (the containers backend's Container)


DISKS = "pods"  # under the run folder: what dies with a pod on a cluster


@dataclass
class Plan:
    job: str
    run_dir: Path
    replicas: list[Replica]
    policy: Policy  # its kind's controller: restarts, success, the env shown
    active_deadline: int | None
    notes: list[str]
    backend: Backend = field(default_factory=lambda: backends.default())  # what runs its replicas

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
    lines = [plan.policy.headline(plan) + plan.backend.where()]
    for r in plan.replicas:
        lines.append(f"  {r.name} (rank {r.rank}, restartPolicy {r.restart_policy}): {plan.backend.command_line(r)}")
        if env:
            shown = [f"{k}={r.env[k]}" for k in (*plan.policy.shown_env, *SHOWN_ENV) if k in r.env]
            lines.append("    env: " + " ".join(shown))
    return "\n".join(lines)
