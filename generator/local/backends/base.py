"""What differs between running a job's pods as processes of this machine and as containers: where
the pods reach each other, what a pod's container becomes (a process's argv and env, or an engine's
`run`), how a replica starts, and what is set up and torn down around the run. The kinds' plans and
the runner ask the backend; none of them tests which backend it holds."""
from __future__ import annotations

import contextlib
import shlex
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.container.process import Process
    from generator.local.plan import Plan, Replica
    from generator.local.pods import Placement, Pod


class Backend(ABC):
    # --- planning: where the pods meet, and what a pod becomes ------------------------------------
    @abstractmethod
    def address(self, dns: str) -> str:
        """Where the other pods reach the pod a cluster names `dns` (its Service, or hostname.subdomain)."""

    @abstractmethod
    def port(self, cluster_port: int) -> int:
        """The port a pod listens at where a cluster's pod listens at `cluster_port`."""

    @abstractmethod
    def replica(self, pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path],
                placement: Placement, cwhere: str) -> Replica:
        """The pod's training `container` (at `cwhere`) as a replica, with `injected` (its controller's
        variables) over its env and its volumes as the folders `mounts`; what cannot run goes to the
        placement's problems, once each."""

    # --- what the plan shows -----------------------------------------------------------------------
    def where(self) -> str:
        """What the plan's headline adds: where the replicas run when not as processes of this machine."""
        return ""

    def command_line(self, replica: Replica) -> str:
        """The replica's command, as the plan shows it."""
        return shlex.join(replica.argv)

    def folders(self, replica: Replica) -> set[str]:
        """The replica's folders on this machine, where the summary looks for its outputs: its mounts
        (a container's OUTPUT_DIR is a path inside it)."""
        return {str(f) for f in replica.mounts.values()}

    # --- the run -----------------------------------------------------------------------------------
    def ready(self, plan: Plan, say, dry_run: bool = False) -> str:
        """What the run needs beyond the plan, made ready (may raise UserError); what a dry run prints of it."""
        return ""

    def prepare(self, replica: Replica) -> None:
        """Its volume folders, before each start."""
        for folder in [*replica.mounts.values(), *([replica.cwd] if replica.cwd else [])]:
            folder.mkdir(parents=True, exist_ok=True)

    @abstractmethod
    def launch(self, plan: Plan, replica: Replica, line) -> Process:
        """The replica started, each line of its output to `line`; its signals reach what runs it."""

    def around(self, plan: Plan, say) -> AbstractContextManager:
        """What lives as long as the run: set up before the replicas start, torn down after them in any case."""
        return contextlib.nullcontext()
