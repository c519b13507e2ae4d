"""Each replica's `engine run` (podman here: runc and the project's containers.conf) on the job's
network, and the engine's client as the replica's process: the container's output and exit code,
signals sent to the container through the engine.

Every pod has an address on that network that the plan chose (the subnet's .2 on), and every pod
finds the others by the names a cluster's DNS gives them (the operator's per-replica Services,
Trainer's `<pod>.<job>`) in its /etc/hosts: no DNS server on the network is needed, which podman's
CNI networks lack."""
from __future__ import annotations

import json
import re
import shlex

from generator.container.process import Process
from generator.images import engine as engine_
from generator.local.backends.containers.network import LABEL, name
from generator.local.plan import Plan, Replica

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
    out = [engine, "run", "--rm", "--name", name(replica), "--hostname", c.hostname, "--network", plan.backend.network.name,
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


def describe(plan: Plan, images: dict[str, str], engine: str) -> str:
    """Each replica's engine command line, for --dry-run."""
    return "\n".join(f"  {r.name}: {shlex.join(argv(plan, r, images.get(r.container.image, r.container.image), engine))}"
                     for r in plan.replicas)
