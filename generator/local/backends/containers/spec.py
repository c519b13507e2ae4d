"""A pod's training container as a container of its own image (`run --container`): what the engine
runs beyond the replica's name, env and mounts (its user, groups, capabilities, limits, /dev/shm),
read from the pod's spec as the kubelet reads it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from generator.container import machine
from generator.container.command import SHM, PathError, container_path
from generator.container.env import ConfigError, ShellSources, container_env, expand
from generator.errors import Finding
from generator.job import quantity
from generator.local.backends.containers.network import Network
from generator.local.plan import Replica
from generator.local.pods import Placement, Pod, as_pod, main_container


@dataclass
class Container:
    """A replica as a container of its own image: what `podman run` needs beyond the replica's
    name, env and mounts (command.py builds the argv)."""
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


def replica(pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path], placement: Placement,
            cwhere: str, network: Network) -> Replica:
    """The pod as a container of its image on `network`: its env resolved as the kubelet does, over
    nothing of this machine's (the engine puts the image's ENV under it), its securityContext, limits
    and /dev/shm."""
    namespace, problems, notes = placement.namespace, placement.problems, placement.notes
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
