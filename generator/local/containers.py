"""`run --container`: each replica as a container of its own image, with the engine the images are
built with (podman here: runc and the project's containers.conf), on a network of the job's own.

Every pod has an address on that network that the plan chose (the subnet's .2 on), and every pod
finds the others by the names a cluster's DNS gives them (the operator's per-replica Services,
Trainer's `<pod>.<job>`) in its /etc/hosts: no DNS server on the network is needed, which podman's
CNI networks lack. The runner's restart and success rules are the process runner's; only how a
replica starts and stops differs. Nothing outlives the run: the containers and the network go in
a `finally`, a watcher in a session of its own removes them after a run killed with SIGKILL, and
the job's next run removes what even that left."""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from generator.container.ownership import own, own_tree
from generator.container.process import Process
from generator.errors import UserError
from generator.images import engine as engine_
from generator.local.plan import Network, Plan, Replica
from generator.local.runner import Runner

LABEL = "io.pytorchjob-kit.run"  # on the job's network and containers: the run that owns them (pid-starttime)
POOL = ipaddress.ip_network("10.89.0.0/16")  # podman's own pool for the networks it makes
# Variables the engine's client reads itself: a container's value for one of them goes on the
# command line, every other by name from the client's environment, so that values (Secrets from
# the shell among them) are not on a command line other users of the machine can read.
CLIENT_NAMES = re.compile(r"PATH|HOME|TMPDIR|LANG|LC_ALL|(CONTAINERS|DOCKER|XDG|PODMAN|BUILDAH|STORAGE)_.*")


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


def refuse_aliases(aliases: dict[str, str] | None, trainer: str) -> tuple[dict[str, str], dict[str, str]]:
    """--image under --container, as (the copies of the trainer, the layers). REPO=<the trainer's
    repository> (a copy of the trainer) runs the trainer's local image; REPO=DIR[:PATH] runs REPO's
    image with DIR laid over it at PATH (a thin layer built here: layer()). `host` runs code with
    this machine's Python, and the charts' other images train nothing, so they are refused, saying
    what to do instead."""
    copies, layers, wrong = {}, {}, {}
    for repo, target in (aliases or {}).items():
        if target == trainer:
            copies[repo] = target
        elif target.startswith("/"):  # programs.mapping made DIR[:PATH] absolute
            layers[repo] = target
        else:
            wrong[repo] = target
    if wrong:
        listing = ", ".join(f"{repo}={target}" for repo, target in wrong.items())
        raise UserError(f"--image {listing}: with --container each replica runs its own image, so there is no "
                        "program of this machine to map; build your image into the local store (`python -m generator "
                        "image build DIR -t REPO:TAG`) and run without --image, lay your code over the job's image with "
                        f"REPO=DIR[:PATH], or run without --container (only REPO={trainer}, a copy of the trainer's "
                        "image, and REPO=DIR[:PATH] are taken with --container)")
    return copies, layers


def layer(eng: engine_.Engine, base: str, target: str, workdir: str | None, repo: str, say=print) -> str:
    """`--image REPO=DIR[:PATH]` under --container: a thin image, the job's image `base` with the
    folder DIR copied to PATH (default: the container's workingDir, else the code path) and work
    starting there, as the process runner starts in DIR. Built in seconds, once per change of DIR
    or of the base; the local name it runs as."""
    import hashlib

    from generator.container import programs
    from generator.images import recipe

    folder, at = programs.split_code(target)
    at = at or workdir or programs.CODE_PATH
    base_id = eng.image_id(base) or ""
    name = re.sub(r"[^a-z0-9._-]+", "-", repo.lower()).strip("-._") or "image"
    tag = f"localhost/pytorchjob-kit-layer/{name}:{hashlib.sha256(target.encode()).hexdigest()[:12]}"
    home = engine_.folder() / "layers"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    dockerfile = home / f"{tag.rsplit(':', 1)[1]}.Containerfile"
    text = f"FROM {base_id}\nCOPY . {at}\nWORKDIR {at}\n"
    if not dockerfile.is_file() or dockerfile.read_text() != text:
        dockerfile.write_text(text)
    job = recipe.Recipe(tag, dockerfile, Path(folder), fix=f"the lines above say why; fix {folder} and run again")
    if recipe.ensure(eng, job, base_id):
        say(f"note: {base} runs as {tag}: {folder} laid over it at {at}")
    return tag


def local_images(eng: engine_.Engine, plan: Plan, aliases: dict[str, str] | None = None,
                 say=print, layers: dict[str, str] | None = None) -> dict[str, str]:
    """The job's image -> the local image it runs as: itself when the store holds it; the trainer's
    CUDA build for the chart's default trainer image where only that is built here (as the registry
    holds it); for a copy of the trainer (`--image REPO=<trainer>`), the trainer's image of the same
    tag. A missing image is named, with how to get it; an image whose USER is root under
    runAsNonRoot is refused as a kubelet refuses it."""
    from generator.container import programs
    from generator.images import trainer

    wanted: dict[str, list[str]] = {}
    for r in plan.replicas:
        wanted.setdefault(r.container.image, []).append(r.name)
    out: dict[str, str] = {}
    missing = []
    builds = [trainer.reference("cpu"), trainer.reference("gpu")]  # the trainer's builds, as `image build` names them
    for image, users in wanted.items():
        repo = programs.repository(image)
        last = image.split("@", 1)[0].rsplit("/", 1)[-1]
        tag = last.rpartition(":")[2] if ":" in last else "latest"
        if repo in (aliases or {}):  # a copy of the trainer: whichever build of it this machine has
            candidates = builds
        elif repo == trainer.repository() and tag == trainer.version():  # the chart's default: either build
            candidates = [image, builds[1]]
        else:
            candidates = [image]
        found = next((c for c in candidates if eng.image_id(c)), None)
        if found and found != image:
            say(f"note: {image} runs as {found}, the trainer's build this machine has"
                + (" (the CUDA one, which runs on the CPU too)" if found == builds[1] else ""))
        if found and repo in (layers or {}):
            workdir = next(r.container.workdir for r in plan.replicas if r.container.image == image)
            out[image] = layer(eng, found, layers[repo], workdir, repo, say)
            continue
        if found:
            out[image] = found
            continue
        if candidates[-1] in builds:
            how = "build the trainer's image with `python -m generator image build` (or `make image`)"
        else:
            how = (f"build yours with `python -m generator image build DIR -t {image}`, or get it with "
                   f"`{eng.name} pull {image}` or `{eng.name} load -i FILE`")
        missing.append(f"image {' or '.join(dict.fromkeys([image, *candidates]))} ({', '.join(users)}) is not in "
                       f"{eng.name}'s local store: {how}")
    if missing:
        raise UserError("\n".join(missing))
    for r in plan.replicas:
        c = r.container
        if c.non_root and c.uid is None:
            user = eng.run("image", "inspect", "--format", "{{.Config.User}}", out[c.image]).stdout.strip()
            if user.split(":")[0] in ("", "0", "root"):
                raise UserError(f"{r.name}: container has runAsNonRoot and image {c.image} will run as root (its USER is "
                                f"{user or 'unset'}), which a kubelet refuses to start; set runAsUser to a non-root uid")
    return out


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


def _labels(answer: dict) -> dict:
    return (answer.get("Config") or {}).get("Labels") or answer.get("labels") or answer.get("Labels") or {}


def _clear(eng: engine_.Engine, plan: Plan, say) -> None:
    """The job's names free for this run: what a killed earlier run of it left is removed; a run of
    it still going, or something else of the same name, is refused."""
    for kind, names in (("container", [name(r) for r in plan.replicas]), ("network", [plan.network.name])):
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


def _watcher(eng: engine_.Engine, owner: str) -> subprocess.Popen:
    """reap() in a session of its own, which outlives this process whatever ends it."""
    import generator

    where = str(Path(generator.__file__).resolve().parent.parent)
    env = {**eng.environ(), "PYTHONPATH": os.pathsep.join(filter(None, [where, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", "import sys; from generator.local.containers import reap; "
                             "reap(sys.argv[1], sys.argv[2])", owner, eng.name], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def up(eng: engine_.Engine, plan: Plan, owner: str, say=print) -> Iterator[None]:
    """The job's network for the run; in any case after it, its containers and the network removed
    (by a watcher of its own when this process is killed with SIGKILL)."""
    _clear(eng, plan, say)
    net = plan.network
    watcher = _watcher(eng, owner)
    made = False  # until the network is ours, the names may be another run's that took them meanwhile
    try:
        eng.run("network", "create", "--subnet", net.subnet, "--label", f"{LABEL}={owner}", net.name)
        made = True
        yield
    finally:
        if made:
            eng.run("rm", "--force", *[name(r) for r in plan.replicas], check=False, timeout=300)
            eng.run("network", "rm", net.name, check=False, timeout=120)
        watcher.kill()
        watcher.wait()


def describe(plan: Plan, images: dict[str, str], engine: str) -> str:
    """Each replica's engine command line, for --dry-run."""
    return "\n".join(f"  {r.name}: {shlex.join(argv(plan, r, images.get(r.container.image, r.container.image), engine))}"
                     for r in plan.replicas)
