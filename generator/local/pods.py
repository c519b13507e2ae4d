"""A pod of a job as its backend runs it (local/backends/: a process of this machine, or a container
of its own image): its training container's command and env (the controller's variables over the
pod's own), its volumes as folders. Each kind's plan (generator/kinds) makes the pods and the env
it injects."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from generator.container.command import SHM
from generator.errors import Finding, UserError
from generator.local.plan import DISKS, Replica

if TYPE_CHECKING:
    from generator.local.backends.base import Backend


@dataclass
class Pod:
    """One pod to become a replica: the job, its name in the job, and the spec it runs."""
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
    backend: Backend  # what runs the pods: processes of this machine, or containers
    shared: dict[str, Path] = field(default_factory=dict)  # claimName -> folder: one PVC is one folder for every pod
    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def replica(pod: Pod, injected: dict[str, str], placement: Placement) -> Replica:
    """A pod as its placement's backend runs it: its training container with `injected` (the
    controller's variables) over its env, and its volumes as folders under the run folder (a claim
    one folder for every pod)."""
    run_dir, shared, problems, notes = placement.run_dir, placement.shared, placement.problems, placement.notes
    container = main_container(pod.spec, pod.main)
    cwhere = f"{pod.where}.containers[{pod.main}]"
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
    return placement.backend.replica(pod, container, injected, mounts, placement, cwhere)


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


def checked(replicas: list[Replica], problems: list[Finding], notes: list[str], source: str) -> list[str]:
    """The plan's notes, each once, with what will make the trainer fail here; raises what cannot run."""
    if problems:
        raise UserError(problems, source=source)
    for r in replicas:
        notes += [f"{r.role}: {warning}" for warning in launch_warnings(r.argv)]
    return sorted(set(notes))
