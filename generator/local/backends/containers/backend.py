"""Each pod as a container of its own image, with the engine the images are built with, on a network
of the job's own: every pod at an address of its own and by the names a cluster gives it, each
image the local one it runs as. The runner's restart and success rules are the same as for
processes; only where the pods meet, how a replica starts and stops, and what lives around the run
differ. Nothing outlives the run: the containers and the network go in a `finally`, a watcher in a
session of its own removes them after a run killed with SIGKILL, and the job's next run removes what
even that left."""
from __future__ import annotations

import os
import shlex
from contextlib import AbstractContextManager
from pathlib import Path

from generator.container.ownership import own, own_tree
from generator.container.process import Process
from generator.errors import UserError
from generator.images import engine as engine_
from generator.local.backends.base import Backend
from generator.local.backends.containers import command, images, network, spec
from generator.local.plan import Plan, Replica
from generator.local.pods import Placement, Pod


class Containers(Backend):
    """On `net`, with the engine `eng` (none needed to plan). `aliases`: the copies of the trainer
    (REPO -> the trainer's repository), `layers`: REPO -> DIR[:PATH] laid over REPO's image."""

    def __init__(self, net: network.Network, eng: engine_.Engine | None = None, aliases: dict[str, str] | None = None,
                 layers: dict[str, str] | None = None):
        self.network, self.engine, self.aliases, self.layers = net, eng, aliases, layers
        self.owner = network.token()  # the run that owns the containers and the network, on their labels
        self.images: dict[str, str] = {}  # the job's image -> the local one it runs as, once ready
        self.started: set[str] = set()

    @classmethod
    def for_job(cls, job: str, aliases: dict[str, str] | None, say) -> Containers:
        """The engine and the job's network on a subnet free now; `--image` refused where it would
        run a program of this machine (images.refuse_aliases)."""
        from generator.container import programs

        # The plan sees only the trainer's copies: a layer is code inside the image, not on this machine.
        copies, layers = images.refuse_aliases(aliases, programs.of("trainer").repository)
        eng = engine_.get(say=say)
        return cls(network.network_for(eng, job), eng, copies, layers)

    # --- planning ----------------------------------------------------------------------------------
    def address(self, dns: str) -> str:
        return dns  # in every container's /etc/hosts

    def port(self, cluster_port: int) -> int:
        return cluster_port  # each container has an address of its own, as each pod has

    def replica(self, pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path],
                placement: Placement, cwhere: str) -> Replica:
        # A container runs its own image: nothing of this machine needs to run it.
        return spec.replica(pod, container, injected, mounts, placement, cwhere, self.network)

    def where(self) -> str:
        return f"; as containers on network {self.network.name} ({self.network.subnet})"

    def command_line(self, replica: Replica) -> str:
        c, run = replica.container, shlex.join(replica.argv)
        # The image's own program where the container names none.
        return f"{c.image} at {c.address}: " + (run if c.command else " ".join(["(its ENTRYPOINT)", *([run] if run else [])]))

    # --- the run -----------------------------------------------------------------------------------
    def ready(self, plan: Plan, say, dry_run: bool = False) -> str:
        """The local image each of the job's images runs as; a dry run prints each replica's engine
        command line, with the images as named where one is missing."""
        try:
            self.images = images.local_images(self.engine, plan, self.aliases, say=say, layers=self.layers)
        except UserError as exc:
            if not dry_run:
                raise
            say(f"note: {exc}")  # a dry run shows the commands all the same
            self.images = {}
        return command.describe(plan, self.images, self.engine.name) if dry_run else ""

    def prepare(self, replica: Replica) -> None:
        """Volume folders as a node makes them: an emptyDir, and a claim of the local-path
        provisioner, any user of the pod may write; with fsGroup (when this process may change a
        group), they and what a claim holds belong to it."""
        super().prepare(replica)
        c = replica.container
        for path, folder in replica.mounts.items():
            folder.chmod(0o777)
            if c.fs_group is not None and os.geteuid() == 0:
                if path in c.claims:
                    own_tree(folder, c.fs_group)
                else:
                    own(folder, c.fs_group, 0o2777)

    def launch(self, plan: Plan, replica: Replica, line) -> Process:
        container = network.name(replica)
        if container in self.started:  # a restart: the last container may still be being removed
            self.engine.run("rm", "--force", container, check=False, timeout=120)
        self.started.add(container)
        argv = command.argv(plan, replica, self.images[replica.container.image], self.engine.name, self.owner)
        return command.ContainerProcess(self.engine, container, argv, command.client_env(replica, self.engine.environ()),
                                        line)

    def around(self, plan: Plan, say) -> AbstractContextManager:
        """The job's network; after the run, its containers and the network removed in any case."""
        return network.up(self.engine, plan, self.network, self.owner, say=say)
