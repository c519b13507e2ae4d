"""What a PyTorchJob becomes on this machine: one process per replica, with the env the
operator injects, the container's own env and command, and volumes mapped to folders; or, with a
Network (`run --container`), one container per replica from its own image, at an address of its
own on the job's network and reached by the names a cluster gives its pods.

Pure planning, no processes: generator.local.runner executes the plan."""
from __future__ import annotations

import ipaddress
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from generator.container import machine, programs
from generator.container.command import SHM, NoCommand, PathError, container_path, on_host
from generator.container.env import ConfigError, ShellSources, container_env, expand
from generator.container.ports import free_port
from generator.errors import Finding, UserError
from generator.job import quantity

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
# How a job ends, as its kind's controller decides: the training operator's (the Master's success;
# restart policies per role and backoffLimit) or JobSet's (every node's success; the node Job's
# backoffLimit, then restarts of the whole set).
OPERATOR, JOBSET = "operator", "jobset"


@dataclass
class Plan:
    job: str
    run_dir: Path
    replicas: list[Replica]
    backoff_limit: int | None
    active_deadline: int | None
    notes: list[str]
    # Trainer v2 runs nodes of a JobSet: a node Job that fails after node_backoff_limit failed
    # starts, and whole-set restarts (failurePolicy.maxRestarts) before the TrainJob fails.
    kind: str = "PyTorchJob"
    policy: str = OPERATOR
    node_backoff_limit: int = 0
    max_set_restarts: int = 0
    elastic: bool = False  # training-operator: with no Master, one Worker's success ends an elastic job
    network: Network | None = None  # set when the replicas run as containers on it

    @property
    def disks(self) -> Path:
        """Each pod's own folders (emptyDirs, its container disk's outputs): fresh for every run."""
        return self.run_dir / DISKS

    @property
    def has_master(self) -> bool:
        return any(r.role == "Master" for r in self.replicas)


def plan(job: dict, run_dir: Path, namespace: str = "default", aliases: dict[str, str] | None = None,
         network: Network | None = None) -> Plan:
    """Raises UserError for what cannot run here (a Secret value that is not in the shell, an image
    this machine does not have, ...). `aliases`: REPO -> the known image it is a copy of. With
    `network`, containers: the Master by its name and its pytorchjob-port, as on a cluster."""
    from generator.job import admission

    name = job["metadata"]["name"]
    spec = job["spec"]
    specs = spec["pytorchReplicaSpecs"]
    notes: list[str] = []
    problems: list[Finding] = []
    nproc = str(spec.get("nprocPerNode") or admission.DEFAULT_NPROC_PER_NODE)
    per_pod = int(nproc) if nproc.isdigit() else 1
    order = [("Master", 1)] if "Master" in specs else []
    if "Worker" in specs:
        order.append(("Worker", int(specs["Worker"].get("replicas", 1))))
    pods = sum(n for _, n in order)
    _check_pods(pods, "spec.pytorchReplicaSpecs.Worker.replicas", pods - 1)
    elastic = spec.get("elasticPolicy")
    if network:
        main = _main_container(specs[order[0][0]]["template"]["spec"], admission.CONTAINER)
        port = next((int(p["containerPort"]) for p in main.get("ports") or [] if p.get("name") == PORT_NAME), DEFAULT_PORT)
        rdzv_port = int((elastic or {}).get("rdzvPort") or port)
        # As the operator names its Services: one per replica; elastic rendezvous at Worker 0's.
        master, rdzv = f"{name}-master-0", f"{name}-worker-0:{rdzv_port}"
    else:
        port = free_port()
        rdzv_port = free_port() if elastic else None
        master, rdzv = "127.0.0.1", f"127.0.0.1:{rdzv_port}"
    shared: dict[str, Path] = {}  # claimName -> folder: one PVC is one folder for every pod
    replicas: list[Replica] = []
    rank = 0
    for role, count in order:
        rspec = specs[role]
        pod_spec = rspec["template"]["spec"]
        where = f"spec.pytorchReplicaSpecs.{role}.template.spec"
        for i in range(count):
            env = operator_env(name, rank, pods, per_pod, nproc, port, elastic, rdzv_port, "Master" in specs,
                               master=master, rdzv=rdzv)
            pod = f"{role.lower()}-{i}"
            replicas.append(_replica(Pod(name, pod, role, rank, rspec.get("restartPolicy") or admission.DEFAULT_RESTART_POLICY,
                                         pod_spec, admission.CONTAINER, where, rspec["template"].get("metadata") or {},
                                         hostname=f"{name}-{pod}", dns=f"{name}-{pod}"),
                                     env, run_dir, namespace, aliases, shared, problems, notes, network))
            rank += 1
    if problems:
        raise UserError(problems, source=name)
    for r in replicas:
        notes += [f"{r.role}: {warning}" for warning in launch_warnings(r.argv)]
    run_policy = spec.get("runPolicy") or {}
    return Plan(name, run_dir, replicas, run_policy.get("backoffLimit"), run_policy.get("activeDeadlineSeconds"),
                sorted(set(notes)), elastic=elastic is not None, network=network)


def plan_trainjob(objects: list[dict], run_dir: Path, namespace: str = "default",
                  aliases: dict[str, str] | None = None, network: Network | None = None) -> Plan:
    """A Trainer v2 TrainJob (its runtime beside it, or upstream's torch-distributed): every node
    alike, running torchrun with only the PET_* variables the torch plugin sets. With `network`,
    containers: node 0 by its name under JobSet's headless Service, port 29500, as on a cluster."""
    from generator.job import runtime

    resolved = runtime.resolve(objects)
    _check_pods(resolved.nodes, "spec.trainer.numNodes", resolved.nodes, resolved.name)
    notes: list[str] = []
    problems: list[Finding] = []
    # JobSet's pods: hostname <job>-node-0-<i> under the headless Service <job> (their subdomain).
    def dns(i: int) -> str:
        return f"{resolved.name}-node-0-{i}.{resolved.name}"

    # 29500 on a cluster, where each pod has its own address; a free one on this machine's loopback.
    port, master = (runtime.MASTER_PORT, dns(0)) if network else (free_port(), "127.0.0.1")
    shared: dict[str, Path] = {}
    spec = resolved.pod["spec"]
    replicas = []
    for i in range(resolved.nodes):
        # As the torch plugin and the Indexed Job set them; the Master's address is node 0's.
        env = {**runtime.plugin_env(resolved.nodes, resolved.nproc, i, master, port), "JOB_COMPLETION_INDEX": str(i),
               "PYTHONUNBUFFERED": "1"}
        replicas.append(_replica(Pod(resolved.name, f"node-0-{i}", "Node", i, spec["restartPolicy"], spec, runtime.CONTAINER,
                                     f"{resolved.runtime} node pod.spec", hostname=f"{resolved.name}-node-0-{i}",
                                     dns=dns(i)), env, run_dir, namespace, aliases, shared, problems, notes, network))
    if problems:
        raise UserError(problems, source=resolved.name)
    for r in replicas:
        notes += [f"{r.role}: {warning}" for warning in launch_warnings(r.argv)]
    return Plan(resolved.name, run_dir, replicas, None, resolved.active_deadline, sorted(set(notes)), runtime.KIND,
                JOBSET, resolved.node_backoff_limit, resolved.max_set_restarts, network=network)


def _check_pods(pods: int, path: str, value: int, source: str = "") -> None:
    if pods > MAX_LOCAL_PODS:
        raise UserError([Finding(path, f"makes {pods} pods, more than this machine runs as processes "
                                 f"({MAX_LOCAL_PODS} at most)", value,
                                 "run a smaller copy of the job here, or submit it to a cluster")], source=source)


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


def _main_container(pod_spec: dict, main: str) -> dict:
    return next(c for c in pod_spec["containers"] if c.get("name") == main)


def _replica(pod: Pod, injected: dict[str, str], run_dir: Path, namespace: str, aliases: dict[str, str] | None,
             shared: dict[str, Path], problems: list[Finding], notes: list[str], network: Network | None = None) -> Replica:
    """A pod as a process: its container's command, its env with `injected` (the controller's
    variables) over it, and its volumes as folders under run_dir. With `network`, as a container
    of its own image on that network, with the same env and folders."""
    container = _main_container(pod.spec, pod.main)
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
        return _in_container(pod, container, injected, mounts, namespace, network, cwhere, problems, notes)
    # The same resolution as the process node's: $(VAR), the downward API, Secrets from this shell.
    resolved = as_pod(pod, namespace, injected)
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


DEFAULT_PORT, PORT_NAME = 23456, "pytorchjob-port"  # the operator's Master port, unless the container names one


def _in_container(pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path], namespace: str,
                  network: Network, cwhere: str, problems: list[Finding], notes: list[str]) -> Replica:
    """The pod as a container of its image: its env resolved as the kubelet does, over nothing of this
    machine's (the engine puts the image's ENV under it), its securityContext, limits and /dev/shm."""
    address = network.address(pod.rank)
    resolved = as_pod(pod, namespace, injected, address, network.gateway)
    container = _main_container(resolved["spec"], pod.main)
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
    """The same image map as the process node's: the trainer image, a copy of it, or your own code
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


def operator_env(job: str, rank: int, pods: int, per_pod: int, nproc: str, port: int, elastic: dict | None,
                  rdzv_port: int | None, has_master: bool, master: str = "127.0.0.1", rdzv: str | None = None) -> dict[str, str]:
    """The variables training-operator v1.9 injects: the Master's address is `master` (loopback for
    processes, its Service's name for containers), the rendezvous `rdzv` (loopback at rdzv_port by default)."""
    env = {"PYTHONUNBUFFERED": "1"}
    if has_master:
        env.update(MASTER_ADDR=master, MASTER_PORT=str(port), WORLD_SIZE=str(pods * per_pod), RANK=str(rank),
                   PET_MASTER_ADDR=master, PET_MASTER_PORT=str(port), PET_NODE_RANK=str(rank))
    env["PET_NPROC_PER_NODE"] = nproc
    if elastic:
        low, high = elastic.get("minReplicas", pods), elastic.get("maxReplicas", pods)
        env.update(PET_NNODES=f"{low}:{high}", PET_RDZV_ENDPOINT=rdzv or f"127.0.0.1:{rdzv_port}",
                   PET_RDZV_BACKEND=elastic.get("rdzvBackend", "c10d"))
        if elastic.get("maxRestarts") is not None:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if elastic.get("rdzvId"):
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
    elif has_master:
        env["PET_NNODES"] = str(pods)
    return env


# The launch contract, shown by --dry-run for each replica.
CONTRACT_ENV = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
                "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "JOB_COMPLETION_INDEX",
                "OUTPUT_DIR")


def describe(plan: Plan, env: bool = False) -> str:
    if plan.policy == JOBSET:
        then = (f"then JobSet restarts every node, up to {plan.max_set_restarts} time(s)" if plan.max_set_restarts
                else "then the TrainJob fails (failurePolicy.maxRestarts 0)")
        lines = [f"{plan.kind.lower()} {plan.job}: {len(plan.replicas)} node(s) as Trainer v2 runs them: it succeeds when every node "
                 f"succeeds; the node Job restarts failed nodes {plan.node_backoff_limit} time(s) (its backoffLimit), "
                 f"{then}; outputs under {plan.run_dir}"]
    else:
        lines = [f"job {plan.job}: {len(plan.replicas)} replica(s), outputs under {plan.run_dir}"]
    if plan.network:
        lines[0] += f"; as containers on network {plan.network.name} ({plan.network.subnet})"
    for r in plan.replicas:
        run = shlex.join(r.argv)
        if r.container:  # the image's own program where the container names none
            c = r.container
            run = f"{c.image} at {c.address}: " + (run if c.command else " ".join(["(its ENTRYPOINT)", *([run] if run else [])]))
        lines.append(f"  {r.name} (rank {r.rank}, restartPolicy {r.restart_policy}): {run}")
        if env:
            shown = [f"{k}={r.env[k]}" for k in CONTRACT_ENV if k in r.env]
            lines.append("    env: " + " ".join(shown))
    return "\n".join(lines)
