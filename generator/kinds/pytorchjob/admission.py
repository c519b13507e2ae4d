"""The rules training-operator v1.9's webhook applies to a PyTorchJob (Kubernetes' own are
generator/job/kube.py's), checked before anything is submitted. Each broken rule becomes a Finding."""
from __future__ import annotations

import re

from generator.errors import Finding
from generator.job import quantity
from generator.job.kube import check_pod

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
KIND = "PyTorchJob"
GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
CONTAINER = "pytorch"  # the container the operator injects into and the webhook requires
NPROC = re.compile(r"^(auto|cpu|gpu|[1-9][0-9]*)$")
ROLES = ("Master", "Worker")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
# What the operator's defaulting gives a replica spec or job that leaves these unset.
DEFAULT_RESTART_POLICY = "OnFailure"
DEFAULT_NPROC_PER_NODE = "auto"  # passed on as PET_NPROC_PER_NODE
CLEAN_POD_POLICIES = ("All", "Running", "None")


def pod_name_suffix(workers: int) -> str:
    """The longest suffix the operator appends to the job name for a pod."""
    return f"-worker-{workers - 1}" if workers > 0 else "-master-0"


def check_job_name(name: object, workers: int, path: str = "metadata.name") -> list[Finding]:
    if not isinstance(name, str) or not DNS1035.fullmatch(name):
        return [Finding(path, "is not a DNS-1035 label", name,
                        "use lower-case letters, digits and '-', starting with a letter and ending with a letter or digit")]
    suffix = pod_name_suffix(workers)
    if len(name) + len(suffix) > 63:
        return [Finding(path, f"is {len(name)} characters, too long for the pod name {name}{suffix} (63 at most)",
                        name, f"use at most {63 - len(suffix)} characters")]
    return []


def check_pytorchjob(job: object) -> list[Finding]:
    """Every rule at once, so a user fixes everything in one pass."""
    if not isinstance(job, dict):
        return [Finding("", "is not a Kubernetes object", type(job).__name__, "give a PyTorchJob YAML mapping")]
    out: list[Finding] = []
    if job.get("apiVersion") != API_VERSION:
        out.append(Finding("apiVersion", f"must be {API_VERSION}", job.get("apiVersion"), f"set apiVersion: {API_VERSION}"))
    if job.get("kind") != KIND:
        out.append(Finding("kind", f"must be {KIND}", job.get("kind"), f"set kind: {KIND}"))
        return out
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return out + [Finding("spec", "is missing", spec, "add spec.pytorchReplicaSpecs with a Master and/or Workers")]
    replica_specs = spec.get("pytorchReplicaSpecs")
    if not isinstance(replica_specs, dict) or not replica_specs:
        return out + [Finding("spec.pytorchReplicaSpecs", "must name at least one of Master and Worker", replica_specs,
                              "add a Master with replicas: 1 and/or a Worker")]
    workers = 0
    for role, rspec in replica_specs.items():
        base = f"spec.pytorchReplicaSpecs.{role}"
        if role not in ROLES:
            out.append(Finding(base, "is not a PyTorchJob replica type", role, "use Master or Worker (case matters)"))
            continue
        if not isinstance(rspec, dict):
            out.append(Finding(base, "must be a mapping", rspec))
            continue
        replicas = rspec.get("replicas")
        if role == "Master":
            if replicas != 1 or isinstance(replicas, bool):
                out.append(Finding(f"{base}.replicas", "must be written and be exactly 1", replicas, "set Master.replicas: 1"))
        elif replicas is not None:
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
                out.append(Finding(f"{base}.replicas", "must be an integer of at least 1", replicas,
                                   "set Worker.replicas to 1 or more, or remove the Worker"))
            else:
                workers = replicas
        else:
            workers = 1
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            out.append(Finding(f"{base}.restartPolicy", "is not a restart policy", policy, "use one of " + ", ".join(RESTART_POLICIES)))
        out += check_pod(rspec.get("template"), f"{base}.template", role.lower(), CONTAINER)
    name = (job.get("metadata") or {}).get("name")
    out += check_job_name(name, workers)
    nproc = spec.get("nprocPerNode")
    if nproc is not None and (not isinstance(nproc, str) or not NPROC.fullmatch(nproc)):
        out.append(Finding("spec.nprocPerNode", "must be a string: auto, cpu, gpu or a positive integer", nproc,
                           'quote it, e.g. nprocPerNode: "2"'))
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        out += _check_elastic(elastic, nproc, replica_specs)
    run_policy = spec.get("runPolicy") or {}
    clean = run_policy.get("cleanPodPolicy")
    if clean is not None and clean not in CLEAN_POD_POLICIES:
        out.append(Finding("spec.runPolicy.cleanPodPolicy", "is not a clean-pod policy", clean, "use All, Running or None"))
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = run_policy.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            out.append(Finding(f"spec.runPolicy.{key}", "must be a non-negative integer", value, "use 0 or more seconds/restarts"))
    return out


def _check_elastic(elastic: object, nproc: object, replica_specs: dict) -> list[Finding]:
    path = "spec.elasticPolicy"
    if not isinstance(elastic, dict):
        return [Finding(path, "must be a mapping", elastic)]
    out = []
    if "Worker" not in replica_specs:
        out.append(Finding(path, "needs a Worker replica spec", None, "add spec.pytorchReplicaSpecs.Worker"))
    if "nProcPerNode" in elastic and nproc is not None:
        out.append(Finding(f"{path}.nProcPerNode", "must not be set together with spec.nprocPerNode", elastic["nProcPerNode"],
                           "remove elasticPolicy.nProcPerNode (deprecated)"))
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int):
        workers = (replica_specs.get("Worker") or {}).get("replicas") if isinstance(replica_specs.get("Worker"), dict) else None
        if low > high:
            out.append(Finding(f"{path}.minReplicas", f"is above maxReplicas ({high})", low, "lower minReplicas or raise maxReplicas"))
        elif isinstance(workers, int) and not low <= workers <= high:
            out.append(Finding("spec.pytorchReplicaSpecs.Worker.replicas", f"is outside the elastic range {low}..{high}",
                               workers, f"start with between {low} and {high} Workers"))
    port = elastic.get("rdzvPort")
    if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
        out.append(Finding(f"{path}.rdzvPort", "is not a TCP port", port, "use 1-65535"))
    return out


def world_size(job: dict) -> int:
    """WORLD_SIZE as the operator computes it: pods x nprocPerNode (non-integers count 1)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    pods = sum(int(s.get("replicas", 1)) for s in specs.values())
    nproc = str(job["spec"].get("nprocPerNode") or "1")
    return pods * (int(nproc) if nproc.isdigit() else 1)


# Rules beyond the webhook's: what makes a job that is admitted but cannot work as meant.

def pytorch_container(rspec: dict) -> dict:
    containers = (((rspec.get("template") or {}).get("spec") or {}).get("containers") or [])
    return next((c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER), {})


def pod_gpus(rspec: dict, gpu_resource: str = "") -> int:
    """GPUs of one replica's pods: the limit of a */gpu extended resource (for extended
    resources the limit is what counts; a request without one is refused on its own)."""
    limits = (pytorch_container(rspec).get("resources") or {}).get("limits") or {}
    for name, value in limits.items():
        if name == gpu_resource or name.endswith("/gpu"):
            try:
                return int(quantity.parse(value))
            except ValueError:
                return 0
    return 0


def backend(rspec: dict) -> str:
    """The backend the trainer is told to use (`--backend X` in the container's args), or ""."""
    args = [str(a) for a in (pytorch_container(rspec).get("args") or [])]
    for i, arg in enumerate(args):
        if arg == "--backend" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--backend="):
            return arg.split("=", 1)[1]
    return ""


def _rspecs(job: dict) -> dict[str, dict]:
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return {r: s for r, s in specs.items() if r in ROLES and isinstance(s, dict)}


def check_semantics(job: dict, gpu_resource: str = "") -> list[Finding]:
    """GPUs against the backend and processes per pod, and gang sizes against the pods."""
    out: list[Finding] = []
    specs = _rspecs(job)
    spec = job.get("spec") or {}
    no_gpus = [r.lower() for r, s in specs.items() if pod_gpus(s, gpu_resource) == 0]
    if any(backend(s) == "nccl" for s in specs.values()) and no_gpus:
        out.append(Finding("spec.pytorchReplicaSpecs.*.args", f"nccl needs GPUs, and the {' and '.join(no_gpus)} pods have none",
                           "nccl", "give every pod GPUs, or use the gloo backend (auto picks gloo without GPUs)"))
    nproc = str(spec.get("nprocPerNode") or "")
    if nproc.isdigit():
        for role, s in specs.items():
            gpus = pod_gpus(s, gpu_resource)
            if 0 < gpus < int(nproc):
                out.append(Finding("spec.nprocPerNode", f"starts {nproc} processes per pod but the {role.lower()} has {gpus} GPU(s)",
                                   nproc, f"set nprocPerNode to {gpus} (one process per GPU) or request {nproc} GPUs"))
                break
    if nproc == "gpu" and no_gpus:
        out.append(Finding("spec.nprocPerNode", "is gpu but some pods request no GPUs", nproc,
                           "request GPUs on every pod or use auto"))
    pods = sum(int(s.get("replicas", 1) or 0) for s in specs.values() if isinstance(s.get("replicas", 1), int))
    min_available = ((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("minAvailable")
    if isinstance(min_available, int) and not isinstance(min_available, bool) and min_available > pods:
        out.append(Finding("spec.runPolicy.schedulingPolicy.minAvailable", f"is above the job's {pods} pods", min_available,
                           f"use at most {pods}"))
    return out


def check_claims(job: dict, objects: list[dict]) -> list[Finding]:
    """A ReadWriteOnce claim created with the job cannot attach to pods spread over several nodes."""
    out = []
    for pvc in (o for o in objects if o.get("kind") == "PersistentVolumeClaim"):
        claim = (pvc.get("metadata") or {}).get("name")
        modes = (pvc.get("spec") or {}).get("accessModes") or []
        if modes != ["ReadWriteOnce"]:
            continue
        users = 0
        for s in _rspecs(job).values():
            volumes = ((s.get("template") or {}).get("spec") or {}).get("volumes") or []
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes if isinstance(v, dict)):
                users += int(s.get("replicas", 1) or 0)
        if users > 1:
            out.append(Finding(f"PersistentVolumeClaim/{claim}.spec.accessModes", f"is ReadWriteOnce but {users} pods mount "
                               "the claim, and pods spread over several nodes cannot all attach it", modes,
                               "use ReadWriteMany, or mount the claim on the Master alone (rank 0 alone writes)"))
    return out


def check_objects(objects: list[dict], gpu_resource: str = "") -> list[Finding]:
    """Every rule on a job as it would reach the API server, with the objects rendered beside it."""
    job = next((o for o in objects if isinstance(o, dict) and o.get("kind") == KIND), None)
    if job is None:
        return [Finding("kind", "no PyTorchJob among the objects", [o.get("kind") for o in objects if isinstance(o, dict)],
                        f"give a {API_VERSION} PyTorchJob")]
    out = check_pytorchjob(job)
    if not any(f.path in ("kind", "spec", "spec.pytorchReplicaSpecs") for f in out):
        out += check_semantics(job, gpu_resource) + check_claims(job, objects)
    return out


# Advice: jobs the operator admits and runs, whose outcome may still not be what was meant.

def advice(job: dict) -> list[Finding]:
    """What `validate` warns of without refusing the job."""
    from generator.job import defaults, images

    spec = job.get("spec") or {}
    if spec.get("elasticPolicy") is None:
        return []
    trainer = defaults.chart_defaults()["image"]["repository"]

    def runs_trainer(container: dict) -> bool:
        """The trainer image running its trainer: its ENTRYPOINT, or a command that starts the module."""
        command = [str(c) for c in container.get("command") or []]
        module = any(a in ("-m", "--module") and b == "trainer" for a, b in zip(command, command[1:], strict=False))
        return (images.parse(str(container.get("image") or "")) or ("",))[0] == trainer and (not command or module)

    own = sorted(role for role, rspec in _rspecs(job).items() if not runs_trainer(pytorch_container(rspec)))
    if not own:  # the project's trainer: every rank waits for rank 0's outputs before it exits
        return []
    decided = "the Master's pod succeeds" if "Master" in _rspecs(job) else "any one Worker's pod succeeds"
    return [Finding("spec.elasticPolicy", f"training-operator v1.9.4 declares an elastic job Succeeded as soon as {decided}, "
                    "wherever torch elastic put rank 0, and torchrun keeps a finished pod waiting for the others 300 s at "
                    f"most: the job can succeed before rank 0 has written its outputs ({', '.join(own)} "
                    f"run{'s' if len(own) == 1 else ''} code other than this project's trainer)",
                    hint="make every rank wait for rank 0's outputs before it exits (e.g. torch.distributed.barrier() "
                    "after rank 0 saves), as the project's trainer does")]
