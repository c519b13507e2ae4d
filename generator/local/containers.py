"""`run --container`: each replica as a container of its own image, with the engine the images are
built with (podman here: runc and the project's containers.conf), on a network of the job's own
(container_network.py), each image the local one it runs as (container_images.py).

Every pod has an address on that network that the plan chose (the subnet's .2 on), and every pod
finds the others by the names a cluster's DNS gives them (the operator's per-replica Services,
Trainer's `<pod>.<job>`) in its /etc/hosts: no DNS server on the network is needed, which podman's
CNI networks lack. The runner's restart and success rules are the process runner's; only how a
replica starts and stops differs. Nothing outlives the run: the containers and the network go in
a `finally`, a watcher in a session of its own removes them after a run killed with SIGKILL, and
the job's next run removes what even that left."""
from __future__ import annotations

import json
import os
import re
import shlex

from generator.container.ownership import own, own_tree
from generator.container.process import Process
from generator.images import engine as engine_
from generator.local.container_network import LABEL, name, token
from generator.local.plan import Plan, Replica
from generator.local.runner import Runner

# Variables the engine's client reads itself: a container's value for one of them goes on the
# command line, every other by name from the client's environment, so that values (Secrets from
# the shell among them) are not on a command line other users of the machine can read.
CLIENT_NAMES = re.compile(r"PATH|HOME|TMPDIR|LANG|LC_ALL|(CONTAINERS|DOCKER|XDG|PODMAN|BUILDAH|STORAGE)_.*")


def argv(plan: Plan, replica: Replica, image: str, engine: str = engine_.PODMAN, owner: str = "") -> list[str]:
    """`engine run` for one replica of a container plan: the pod's name, address and hosts, its env
    (by name: client_env gives the values), volumes as bind mounts of their folders, its user,
    groups and capabilities, read-only root, limits and /dev/shm, and the command or the image's
    ENTRYPOINT with its args. `image` is the local name the job's image runs as."""
    c = replica.container
    out = [engine, "run", "--rm", "--name", name(replica), "--hostname", c.hostname, "--network", plan.network.name,
           "--ip", c.address]
    for other in plan.replicas:
        out += ["--add-host", f"{other.container.dns}:{other.container.address}"]
    if owner:
        out += ["--label", f"{LABEL}={owner}"]
    if engine == engine_.PODMAN:
        # As a cluster runs it: no proxy variables of this shell, no tmpfs a read-only root lacks on a node.
        out += ["--http-proxy=false"]
    for key, value in replica.env.items():
        out += ["--env", f"{key}={value}" if CLIENT_NAMES.fullmatch(key) else key]
    for path, folder in replica.mounts.items():
        out += ["--volume", f"{folder.absolute()}:{path}" + (":ro" if path in c.read_only_mounts else "")]
    if c.workdir:
        out += ["--workdir", c.workdir]
    if c.user:
        out += ["--user", c.user]
    for group in c.groups:
        out += ["--group-add", str(group)]
    if c.read_only:
        out += ["--read-only"] + (["--read-only-tmpfs=false"] if engine == engine_.PODMAN else [])
    if c.privileged:
        out += ["--privileged"]
    if c.no_new_privileges:
        out += ["--security-opt", "no-new-privileges"]
    for cap in c.cap_drop:
        out += ["--cap-drop", cap]
    for cap in c.cap_add:
        out += ["--cap-add", cap]
    if c.memory is not None:
        out += ["--memory", str(c.memory)]
    if c.cpus is not None:
        out += ["--cpus", c.cpus]
    if c.shm is not None:
        out += ["--shm-size", str(c.shm)]
    if c.command:  # a pod's command replaces the image's ENTRYPOINT and CMD; args alone replace CMD
        out += ["--entrypoint", json.dumps(c.command)]
    return [*out, image, *c.args]


def client_env(replica: Replica, base: dict[str, str]) -> dict[str, str]:
    """The engine client's environment: its own (`base`), and the values `--env NAME` passes on."""
    return {**base, **{k: v for k, v in replica.env.items() if not CLIENT_NAMES.fullmatch(k)}}


class ContainerProcess(Process):
    """The engine's client in the foreground, attached to the container: its output is the
    container's, its exit code the container's. Signals go to the container through the engine,
    as a kubelet sends them, never only to the client."""

    def __init__(self, eng: engine_.Engine, container: str, argv_: list[str], env: dict[str, str], on_line):
        self.engine, self.container = eng, container
        super().__init__(argv_, env, on_line)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.engine.run("kill", "--signal", str(int(sig)), self.container, check=False, timeout=60)

    def kill_group(self) -> None:
        self.engine.run("kill", "--signal", "9", self.container, check=False, timeout=60)
        super().kill_group()


class ContainerRunner(Runner):
    """The process runner's rules, each replica a container of its image (`images`: the job's image
    -> the local one it runs as)."""

    def __init__(self, plan: Plan, eng: engine_.Engine, images: dict[str, str], out=None, colour: bool | None = None):
        super().__init__(plan, out, colour)
        self.engine, self.images, self.owner = eng, images, token()
        self.started: set[str] = set()

    def _prepare(self, replica: Replica) -> None:
        """Volume folders as a node makes them: an emptyDir, and a claim of the local-path
        provisioner, any user of the pod may write; with fsGroup (when this process may change a
        group), they and what a claim holds belong to it."""
        super()._prepare(replica)
        c = replica.container
        for path, folder in replica.mounts.items():
            folder.chmod(0o777)
            if c.fs_group is not None and os.geteuid() == 0:
                if path in c.claims:
                    own_tree(folder, c.fs_group)
                else:
                    own(folder, c.fs_group, 0o2777)

    def _launch(self, replica: Replica, line) -> Process:
        container = name(replica)
        if container in self.started:  # a restart: the last container may still be being removed
            self.engine.run("rm", "--force", container, check=False, timeout=120)
        self.started.add(container)
        command = argv(self.plan, replica, self.images[replica.container.image], self.engine.name, self.owner)
        return ContainerProcess(self.engine, container, command, client_env(replica, self.engine.environ()), line)


def describe(plan: Plan, images: dict[str, str], engine: str) -> str:
    """Each replica's engine command line, for --dry-run."""
    return "\n".join(f"  {r.name}: {shlex.join(argv(plan, r, images.get(r.container.image, r.container.image), engine))}"
                     for r in plan.replicas)
