"""A pod of a job as a process of this machine, or (on a Network) a container of its own image:
its training container's command and env (the controller's variables over the pod's own), its
volumes as folders. Each kind's plan (generator/kinds) makes the pods and the env it injects."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from generator.container import machine, programs
from generator.container.command import SHM, NoCommand, PathError, container_path, on_host
from generator.container.env import ConfigError, ShellSources, container_env, expand
from generator.errors import Finding, UserError
from generator.job import quantity
from generator.local.plan import DISKS, Container, Network, Replica


@dataclass
class Pod:
    """One pod to become a process: the job, its name in the job, and the spec it runs."""
    job: str
    name: str
    role: str
    rank: int
    restart_policy: str
    spec: dict
    main: str  # the training container: pytorch (v1) or node (Trainer v2)
    where: str  # the spec's path, for findings
    meta: dict = field(default_factory=dict)  # the template's metadata: labels and annotations for the downward API
    hostname: str = ""  # the pod's hostname, as its controller gives it
    dns: str = ""  # the name the other pods reach it by


def as_pod(pod: Pod, namespace: str, injected: dict[str, str], address: str = "127.0.0.1",
           host: str = "127.0.0.1") -> dict:
    """The pod a controller would create, as the downward API sees it here: this machine is its
    node, loopback its address (or its container's, and the network's gateway the host's). `injected`
    goes after the container's own env, as the operator appends its variables to the pod spec, so
    `$(MASTER_ADDR)` in args expands too."""
    spec = {**pod.spec, "nodeName": socket.gethostname(), "containers": [
        {**c, "env": [*(c.get("env") or []), *({"name": k, "value": v} for k, v in injected.items())]}
        if c.get("name") == pod.main else c for c in pod.spec["containers"]]}
    meta = {"labels": {}, "annotations": {}, **pod.meta, "name": f"{pod.job}-{pod.name}", "namespace": namespace}
    return {"metadata": meta, "spec": spec,
            "status": {"podIP": address, "podIPs": [{"ip": address}], "hostIP": host, "hostIPs": [{"ip": host}]}}


def main_container(pod_spec: dict, main: str) -> dict:
    return next(c for c in pod_spec["containers"] if c.get("name") == main)


@dataclass
class Placement:
    """Where a plan puts its pods on this machine, the same for each of them, and what it gathers
    while it makes them: the folder each claim became, the problems (each once) and the notes."""
    run_dir: Path
    namespace: str
    aliases: dict[str, str] | None = None  # REPO -> the known image it is a copy of (--image)
    network: Network | None = None  # containers on this network; None: processes
    shared: dict[str, Path] = field(default_factory=dict)  # claimName -> folder: one PVC is one folder for every pod
    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def replica(pod: Pod, injected: dict[str, str], placement: Placement) -> Replica:
    """A pod as a process: its container's command, its env with `injected` (the controller's
    variables) over it, and its volumes as folders under the run folder. On the placement's network,
    as a container of its own image on that network, with the same env and folders."""
    run_dir, aliases, network, shared = placement.run_dir, placement.aliases, placement.network, placement.shared
    problems, notes = placement.problems, placement.notes
    container = main_container(pod.spec, pod.main)
    cwhere = f"{pod.where}.containers[{pod.main}]"
    problems_here: list[Finding] = []
    # A container runs its own image; only a process needs the image to be a program of this machine.
    program = None if network else _check_image(container.get("image", ""), aliases, f"{cwhere}.image", problems_here)
    for other in pod.spec["containers"]:
        if other.get("name") != pod.main:
            notes.append(f"{pod.role}: sidecar container {other.get('name')} does not run locally")
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        if mount["mountPath"] == SHM:
            continue
        volume = volumes.get(mount["name"], {})
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            folder = shared.setdefault(claim, run_dir / claim)
        else:  # emptyDir, configMap, ...: a folder of this pod's own
            folder = run_dir / DISKS / pod.name / mount["name"]
        mounts[mount["mountPath"]] = folder / mount.get("subPath", "") if mount.get("subPath") else folder
        if not mounts[mount["mountPath"]].resolve().is_relative_to(run_dir.resolve()):
            problems.append(Finding(f"{cwhere}.volumeMounts",
                                    f"maps {mount['mountPath']} outside {run_dir} (through a symlink or '..')",
                                    str(mounts[mount["mountPath"]].resolve()),
                                    f"remove the symlink under {run_dir}, or use --run-dir elsewhere"))
    if container.get("envFrom"):
        notes.append(f"{pod.role}: envFrom sources live in the cluster; export what the job needs in this shell")
    if network:
        return _in_container(pod, container, injected, mounts, placement, cwhere)
    # As the kubelet resolves them: $(VAR), the downward API; Secrets from this shell.
    resolved = as_pod(pod, placement.namespace, injected)
    container = next(c for c in resolved["spec"]["containers"] if c.get("name") == pod.main)
    sources = ShellSources(cwhere)
    program = program or programs.of("trainer")  # refused already: the rest is still checked, as the trainer
    try:
        # The image's ENV under the pod's, as the node builds it; the node's own additions are the README's differences.
        env = container_env(resolved, container, program.env(), sources, machine.allocatable())
        code = program.code_at(container)
        # Started elsewhere than the shell's folder, the process must find a relative run folder all the same.
        moved = bool(code or container.get("workingDir"))
        host = on_host(program.entrypoint, container, env, {k: v.absolute() for k, v in mounts.items()} if moved else mounts,
                       (run_dir / DISKS / pod.name).absolute() if moved else run_dir / DISKS / pod.name, program.env(),
                       code)
    except ConfigError as exc:
        problems_here.append(Finding(f"{cwhere}.env", str(exc),
                                     hint="use a value, a fieldRef the downward API offers, or a Secret or ConfigMap key"))
        host = None
    except PathError as exc:
        problems_here.append(Finding(f"{cwhere}.{exc.field}", str(exc)))
        host = None
    except NoCommand as exc:
        problems_here.append(Finding(f"{cwhere}.command", f"{exc} ({program.repository} runs as {program.what})",
                                     container.get("image"),
                                     hint="write the command the image would run, e.g. [python, /workspace/train.py]"))
        host = None
    problems.extend(p for p in [*problems_here, *sources.problems] if p not in problems)  # once per spec, not per replica
    if host is None:
        return Replica(pod.name, pod.role, pod.rank, pod.restart_policy, [], {}, mounts)
    return Replica(pod.name, pod.role, pod.rank, pod.restart_policy, host.argv, host.env, mounts, host.cwd)



def _in_container(pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path], placement: Placement,
                  cwhere: str) -> Replica:
    """The pod as a container of its image on the placement's network: its env resolved as the kubelet
    does, over nothing of this machine's (the engine puts the image's ENV under it), its securityContext,
    limits and /dev/shm."""
    namespace, network, problems, notes = placement.namespace, placement.network, placement.problems, placement.notes
    address = network.address(pod.rank)
    resolved = as_pod(pod, namespace, injected, address, network.gateway)
    container = main_container(resolved["spec"], pod.main)
    sources = ShellSources(cwhere)
    here: list[Finding] = []
    env: dict[str, str] = {}
    try:
        env = container_env(resolved, container, {}, sources, machine.allocatable())
    except ConfigError as exc:
        here.append(Finding(f"{cwhere}.env", str(exc),
                            hint="use a value, a fieldRef the downward API offers, or a Secret or ConfigMap key"))
    command = [expand(str(a), env) for a in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    pod_sc, sc = pod.spec.get("securityContext") or {}, container.get("securityContext") or {}

    def pick(key: str):
        return sc[key] if sc.get(key) is not None else pod_sc.get(key)

    uid, gid = pick("runAsUser"), pick("runAsGroup")
    if pick("runAsNonRoot") and uid == 0:  # the kubelet's CreateContainerConfigError
        here.append(Finding(f"{cwhere}.securityContext.runAsUser", "is root under runAsNonRoot, which the kubelet "
                            "refuses to start", 0, hint="run as a non-root uid, such as the image's (1000 for the trainer's)"))
    if gid is not None and uid is None:
        notes.append(f"{pod.role}: runAsGroup without runAsUser is not applied to the container (podman's --user needs "
                     "the user); the image's USER runs with its own group")
    limits = (container.get("resources") or {}).get("limits") or {}
    if any(k.endswith("/gpu") for k in limits):
        notes.append(f"{pod.role}: the container gets no GPU here (its limits name {', '.join(k for k in limits if k.endswith('/gpu'))})")
    memory = int(quantity.parse(str(limits["memory"]))) if limits.get("memory") else None
    cpus = format(quantity.parse(str(limits["cpu"])).normalize(), "f") if limits.get("cpu") else None
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
    shm = None
    for mount in container.get("volumeMounts") or []:
        empty = (volumes.get(mount["name"]) or {}).get("emptyDir")
        if mount["mountPath"] == SHM and empty is not None and empty.get("medium") == "Memory":
            # A memory emptyDir is as large as its sizeLimit, else as the pod's memory may be.
            size = empty.get("sizeLimit")
            shm = int(quantity.parse(str(size))) if size else memory or machine.memory_bytes()
    claims = {m["mountPath"] for m in container.get("volumeMounts") or []
              if (volumes.get(m["name"]) or {}).get("persistentVolumeClaim") and m["mountPath"] != SHM}
    caps = sc.get("capabilities") or {}
    try:
        workdir = container_path("workingDir", container["workingDir"]) if container.get("workingDir") else None
    except PathError as exc:
        here.append(Finding(f"{cwhere}.{exc.field}", str(exc)))
        workdir = None
    problems.extend(p for p in [*here, *sources.problems] if p not in problems)
    spec = Container(
        image=container.get("image", ""), command=command, args=args, hostname=pod.hostname, dns=pod.dns,
        address=address, workdir=workdir, uid=None if uid is None else int(uid),
        gid=None if gid is None or uid is None else int(gid),
        groups=[int(g) for g in dict.fromkeys([*([pod_sc["fsGroup"]] if pod_sc.get("fsGroup") is not None else []),
                                               *(pod_sc.get("supplementalGroups") or [])])],
        fs_group=None if pod_sc.get("fsGroup") is None else int(pod_sc["fsGroup"]), non_root=bool(pick("runAsNonRoot")),
        read_only=bool(sc.get("readOnlyRootFilesystem")), privileged=bool(sc.get("privileged")),
        no_new_privileges=sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged"),
        cap_drop=[str(c) for c in caps.get("drop") or []], cap_add=[str(c) for c in caps.get("add") or []],
        memory=memory, cpus=cpus, shm=shm, claims=claims,
        read_only_mounts={m["mountPath"] for m in container.get("volumeMounts") or [] if m.get("readOnly")})
    return Replica(pod.name, pod.role, pod.rank, pod.restart_policy, [*command, *args], env, mounts, None, spec)


def launch_warnings(argv: list[str]) -> list[str]:
    """What will make the trainer fail here before it trains: flags it does not take, and nccl
    on a machine without NVIDIA GPUs."""
    out = []
    try:
        start = argv.index("trainer") + 1 if argv[1:3] == ["-m", "trainer"] or "--module" in argv else None
    except ValueError:
        start = None
    args = argv[start:] if start else []
    if start:
        problem = _trainer_rejects(args)
        if problem:
            out.append(f"the trainer will refuse its args ({problem}); see `python -m trainer --help`")
    joined = " ".join(argv)
    if ("--backend nccl" in joined or "--backend=nccl" in joined) and not _has_nvidia_gpu():
        out.append("--backend nccl needs NVIDIA GPUs and this machine has none, so every rank will fail; to try the job "
                   "here set `topology.backend: gloo` in its values (or make them with --gpus 0)")
    return out


def _trainer_rejects(args: list[str]) -> str:
    import argparse

    from trainer.config import parser

    p = parser()

    def refuse(message: str):
        raise ValueError(message)

    p.error = refuse  # argparse would print and exit
    try:
        _, unknown = p.parse_known_args(args)
    except (ValueError, argparse.ArgumentError) as exc:
        return str(exc)
    return f"unrecognized arguments: {' '.join(unknown)}" if unknown else ""


def _has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def _check_image(image: str, aliases: dict[str, str] | None, where: str,
                 problems: list[Finding]) -> programs.Program | None:
    """The image map of `--image`: the trainer image, a copy of it, or your own code
    (`--image REPO=host` or `REPO=DIR[:PATH]`); None, with a finding, for what this machine cannot run."""
    trainer = programs.of("trainer").repository
    repo = programs.repository(image)
    try:
        program = programs.resolve(image, aliases)
    except programs.ImagePullError as exc:
        if repo in (aliases or {}):  # mapped, to what is not here (a folder removed since)
            problems.append(Finding(where, str(exc), image))
            return None
        program = None
    if program is not None and program.mode == programs.HOST:
        return program
    what = "is not an image this machine has" if program is None else f"is the {program.role} image, not a training one"
    problems.append(Finding(where, what, image, hint=f"for your own code pass {programs.own_code(repo)}; "
                                                     f"`--image {repo}={trainer}` if it is a build of the trainer (its "
                                                     "python runs this checkout)"))
    return None


def checked(replicas: list[Replica], problems: list[Finding], notes: list[str], source: str) -> list[str]:
    """The plan's notes, each once, with what will make the trainer fail here; raises what cannot run."""
    if problems:
        raise UserError(problems, source=source)
    for r in replicas:
        notes += [f"{r.role}: {warning}" for warning in launch_warnings(r.argv)]
    return sorted(set(notes))
