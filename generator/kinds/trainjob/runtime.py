"""What Kubeflow Trainer v2.3 makes of a TrainJob: its runtime found and merged with the job's
`trainer`, into the one pod every node runs, the node count, the PET_* env and the restart rules
(the node Job's backoffLimit, the JobSet's failurePolicy). `generator run` executes the result;
the admission rules here refuse what Trainer's webhook would, by path."""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass

from generator.errors import Finding, UserError
from generator.job.kube import check_pod

KIND = "TrainJob"
GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
DEFAULT_RUNTIME = "torch-distributed"
REPLICATED_JOB = "node"  # the runtime's replicated job that trains
CONTAINER = "node"  # the trainer container in it
# Trainer lays the TrainJob's trainer (image, command, args, env, nodes, PET_*) only over the
# replicated job that carries this label; one without it runs as the runtime wrote it.
ANCESTOR_LABEL, ANCESTOR_TRAINER = "trainer.kubeflow.org/trainjob-ancestor-step", "trainer"
MASTER_PORT = 29500
# A batch Job's pods (JobSet's node Job) take only these; JobSet's default is the first.
RESTART_POLICIES = ("OnFailure", "Never")
DEFAULT_RESTART_POLICY = RESTART_POLICIES[0]
JOB_BACKOFF_LIMIT = 6  # a batch/v1 Job's default, which the node Job keeps unless its template sets one


def plugin_env(nodes: int, nproc: str, node_rank: int, master_addr: str, master_port: int) -> dict[str, str]:
    """What the torch plugin sets on a node's trainer container: all torchrun needs to find its peers."""
    return {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": str(node_rank),
            "PET_MASTER_ADDR": master_addr, "PET_MASTER_PORT": str(master_port)}


# The torch plugin owns these; Trainer refuses a TrainJob that sets them itself.
RESERVED_ENV = tuple(plugin_env(1, "1", 0, "", MASTER_PORT))
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# The Kubeflow SDK (kubeflow 0.5's TrainerClient) reads a node's device from its container's limits and
# knows only these names there (kubeflow/sdk#516): limits naming none of them make its get_job,
# list_jobs, wait_for_job_status and get_job_logs raise "Unknown device type".
SDK_DEVICES = ("nvidia.com/gpu", "google.com/tpu", "huawei.com/Ascend910", "cpu")
SDK_DEVICE_PREFIX = "nvidia.com/mig-"
SDK = "the Kubeflow SDK (kubeflow 0.5)"


@dataclass
class Resolved:
    name: str
    nodes: int
    nproc: str  # PET_NPROC_PER_NODE: a count, or auto
    pod: dict  # the node pod template (metadata, spec) with the trainer merged into container "node"
    node_backoff_limit: int  # failed node starts the node Job takes before it fails
    max_set_restarts: int  # JobSet failurePolicy.maxRestarts: whole-set restarts before the TrainJob fails
    active_deadline: int | None
    runtime: str  # Kind/name, for messages


def torch_distributed() -> dict:
    """The facts of upstream's default ClusterTrainingRuntime that decide how a job runs: one node,
    the torch policy, container `node`, nothing else (its image is the TrainJob's to set)."""
    return {"apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime", "metadata": {"name": DEFAULT_RUNTIME},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [{"name": REPLICATED_JOB, "template": {
                         "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                         "spec": {"template": {"spec": {"containers": [{"name": CONTAINER}]}}}}}]}}}}


def check(objects: list[dict]) -> list[Finding]:
    """Trainer's admission rules for a TrainJob and its runtime, every finding at once."""
    try:
        resolve(objects)
    except UserError as exc:
        return exc.findings
    return []


def resolve(objects: list[dict]) -> Resolved:
    jobs = [o for o in objects if isinstance(o, dict) and o.get("kind") == KIND]
    if len(jobs) != 1:
        raise UserError([Finding("kind", f"holds {len(jobs)} TrainJobs", len(jobs), "give one TrainJob per file")])
    job = jobs[0]
    out: list[Finding] = []
    if job.get("apiVersion") != API_VERSION:
        out.append(Finding("apiVersion", f"must be {API_VERSION} (Trainer v2.3)", job.get("apiVersion"),
                           f"set apiVersion: {API_VERSION}"))
    name = (job.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not DNS_LABEL.fullmatch(name):
        out.append(Finding("metadata.name", "is not a DNS label (the pods are <name>-node-0-<i>)", name,
                           "use lower-case letters, digits and '-', starting with a letter"))
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    trainer = spec.get("trainer") if isinstance(spec.get("trainer"), dict) else {}
    runtime = _runtime(spec.get("runtimeRef"), objects, out)
    if runtime is None:
        raise UserError(out)
    rspec = runtime.get("spec") or {}
    ml = rspec.get("mlPolicy") or {}
    nodes = trainer.get("numNodes", ml.get("numNodes", 1))
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        out.append(Finding("spec.trainer.numNodes", "must be a whole number of at least 1", nodes,
                           "set numNodes: the Master and Workers together"))
    nproc = trainer.get("numProcPerNode", (ml.get("torch") or {}).get("numProcPerNode"))
    if nproc is not None and (not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1):
        out.append(Finding("spec.trainer.numProcPerNode", "must be a whole number of at least 1", nproc,
                           "leave it unset for auto (GPUs per node, else CPUs)"))
    for i, item in enumerate(trainer.get("env") or []):
        if isinstance(item, dict) and item.get("name") in RESERVED_ENV:
            out.append(Finding(f"spec.trainer.env[{i}].name", "is set by Trainer's torch plugin", item["name"],
                               "remove it: every node gets it from the runtime"))
    pod, backoff, restarts = _node_pod(runtime, trainer, out)
    if pod is not None:
        command = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("command") or []
        if command[:1] != ["torchrun"]:
            out.append(Finding("spec.trainer.command", "does not start through torchrun, and Trainer v2 sets only the "
                               "PET_* variables torchrun reads", command,
                               "start it with torchrun, e.g. [torchrun, --module, trainer]"))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 1):
        out.append(Finding("spec.activeDeadlineSeconds", "must be a whole number of seconds, at least 1", deadline))
    if out:
        raise UserError(out)
    resources = ((pod["spec"]["containers"][0]).get("resources") or {})
    return Resolved(name, nodes, str(nproc) if nproc else auto_nproc(resources), pod, backoff, restarts, deadline,
                    f"{runtime['kind']}/{runtime['metadata']['name']}")


def sdk_unreadable(objects: list[dict]) -> list[Finding]:
    """A valid TrainJob whose node the Kubeflow SDK's TrainerClient cannot read: the limits of the
    pod Trainer makes of it (the job's resourcesPerNode, else its runtime's)."""
    try:
        pod = resolve(objects).pod
    except UserError:
        return []  # refused for its own reasons, which check() names
    limits = (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
    if not limits or any(k in SDK_DEVICES or str(k).startswith(SDK_DEVICE_PREFIX) for k in limits):
        return []
    return [Finding("spec.trainer.resourcesPerNode.limits", f"name no device {SDK} reads there (cpu, nvidia.com/gpu, "
                    "nvidia.com/mig-*, google.com/tpu, huawei.com/Ascend910), so its get_job, list_jobs, "
                    "wait_for_job_status and get_job_logs raise 'Unknown device type in the container resources' "
                    "(kubeflow/sdk#516); Trainer runs the job all the same", dict(limits),
                    "add a cpu limit, or drop the limits")]


def auto_nproc(resources: dict) -> str:
    """An unset numProcPerNode as Trainer's torch plugin fills it: auto (torchrun counts the GPUs)
    where the node asks for GPUs (any resource named with "gpu", requests before limits), else the
    node's CPU request, or its limit where no request is set, rounded up as a Kubernetes quantity's
    whole value is (1500m is 2), at least 1."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if _whole(_named_gpu(requests)) or _whole(_named_gpu(limits)):
        return "auto"
    cpu = requests.get("cpu") if _whole(requests.get("cpu")) else limits.get("cpu")
    return str(max(1, _whole(cpu)))


def _named_gpu(resources: dict) -> object:
    return next((v for k, v in resources.items() if "gpu" in str(k).lower()), None)


def _whole(value: object) -> int:
    """A quantity's value rounded up to a whole number; 0 for none or one that does not parse."""
    from generator.job import quantity

    try:
        return math.ceil(quantity.parse(value)) if value is not None else 0
    except ValueError:
        return 0


def _runtime(ref: object, objects: list[dict], out: list[Finding]) -> dict | None:
    if not isinstance(ref, dict) or not ref.get("name"):
        out.append(Finding("spec.runtimeRef", "is missing", ref, f"set runtimeRef: {{name: {DEFAULT_RUNTIME}}}"))
        return None
    kind = ref.get("kind", "ClusterTrainingRuntime")
    if kind not in RUNTIME_KINDS or ref.get("apiGroup", GROUP) != GROUP:
        out.append(Finding("spec.runtimeRef", "is not a Trainer runtime", ref,
                           f"use kind TrainingRuntime or ClusterTrainingRuntime of apiGroup {GROUP}"))
        return None
    for o in objects:
        if isinstance(o, dict) and o.get("kind") == kind and (o.get("metadata") or {}).get("name") == ref["name"]:
            return o
    if kind == "ClusterTrainingRuntime" and ref["name"] == DEFAULT_RUNTIME:
        return torch_distributed()
    out.append(Finding("spec.runtimeRef.name", f"names a {kind} that is not in the file", ref["name"],
                       f"put the {kind} in the same file as the TrainJob, or use {DEFAULT_RUNTIME}"))
    return None


def _node_pod(runtime: dict, trainer: dict, out: list[Finding]) -> tuple[dict | None, int, int]:
    """The pod template of replicated job `node`, with the TrainJob's trainer laid over its container."""
    where = f"{runtime.get('kind')}/{(runtime.get('metadata') or {}).get('name')}"
    jobset = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    replicated = [r for r in jobset.get("replicatedJobs") or [] if isinstance(r, dict)]
    node = next((r for r in replicated if r.get("name") == REPLICATED_JOB), None)
    if node is None:
        out.append(Finding(f"{where} spec.template.spec.replicatedJobs", "has no replicated job named node",
                           [r.get("name") for r in replicated], "name the trainer's replicated job node"))
        return None, 0, 0
    others = [r.get("name") for r in replicated if r is not node]
    if others:
        out.append(Finding(f"{where} spec.template.spec.replicatedJobs", "holds steps besides node, which this machine "
                           "does not run (initializers need a cluster)", others, "run it on a cluster, or drop them"))
    labels = ((node.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(ANCESTOR_LABEL) != ANCESTOR_TRAINER:
        # Trainer would admit it and then ignore the TrainJob's trainer: no command, one node, no PET_*
        out.append(Finding(f"{where} replicatedJobs[node].template.metadata.labels", "does not mark node as the "
                           "trainer's job, so Trainer v2.3 ignores the TrainJob's trainer (image, command, args, env, "
                           "numNodes) and sets no PET_* variables", labels.get(ANCESTOR_LABEL),
                           f"add the label {ANCESTOR_LABEL}: {ANCESTOR_TRAINER} to replicated job node's template"))
    job_spec = (node.get("template") or {}).get("spec") or {}
    pod = copy.deepcopy(job_spec.get("template") or {})
    spec = pod.setdefault("spec", {})
    containers = spec.get("containers") or []
    main = next((c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER), None)
    if main is None:
        out.append(Finding(f"{where} replicatedJobs[node] containers", f"has no container named {CONTAINER}",
                           [c.get("name") for c in containers if isinstance(c, dict)], f"name the trainer's container {CONTAINER}"))
        return None, 0, 0
    for key in ("image", "command", "args", "resources"):
        source = "resourcesPerNode" if key == "resources" else key
        if trainer.get(source):
            main[key] = copy.deepcopy(trainer[source])
    env = {e["name"]: e for e in main.get("env") or [] if isinstance(e, dict) and "name" in e}
    env.update({e["name"]: e for e in trainer.get("env") or [] if isinstance(e, dict) and "name" in e})
    if env:
        main["env"] = list(env.values())
    # The node first, as the pod's first container, sidecars after it.
    spec["containers"] = [main] + [c for c in containers if c is not main]
    spec.setdefault("restartPolicy", DEFAULT_RESTART_POLICY)
    for finding in check_pod(pod, f"{where} node pod", REPLICATED_JOB, CONTAINER):
        out.append(finding)
    if spec["restartPolicy"] not in RESTART_POLICIES:
        out.append(Finding(f"{where} node pod restartPolicy", "is not a Job pod's policy", spec["restartPolicy"],
                           f"use {' or '.join(RESTART_POLICIES)}"))
    backoff = job_spec.get("backoffLimit", JOB_BACKOFF_LIMIT)
    restarts = (jobset.get("failurePolicy") or {}).get("maxRestarts", 0)
    return pod, backoff, restarts
