"""`values`: a job described the way people think of it, turned into chart values."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator.errors import Finding, UserError
from generator.job import admission, defaults, images

_TOLERATION = re.compile(r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?(:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute))?$")


@dataclass
class Description:
    name: str | None = None
    image: str | None = None
    workers: int | None = None
    nproc_per_node: str | None = None
    gpus: int | None = None
    cpu: str | None = None
    memory: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None
    backend: str | None = None
    output_pvc: str | None = None
    output_size: str | None = None
    shm_size: str | None = None
    tolerations: tuple[str, ...] = ()
    node_selectors: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    env_from_secrets: tuple[str, ...] = ()
    queue: str | None = None
    priority_class: str | None = None
    elastic: str | None = None
    restart_policy: str | None = None
    backoff_limit: int | None = None
    ttl: int | None = None
    deadline: int | None = None
    args: tuple[str, ...] = ()
    target: str | None = None
    sets: list[dict] = field(default_factory=list)


def _set(values: dict, path: str, value: object) -> None:
    node = values
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def build(d: Description, base: dict | None = None) -> dict:
    """Values from flags, laid over a base file; --set wins over both, like Helm's."""
    problems: list[Finding] = []
    values = defaults.merge({}, base or {})
    if d.name is not None:
        _set(values, "job.name", d.name)
    if d.image is not None:
        parsed = images.parse(d.image)
        if not parsed:
            problems.append(Finding("--image", "is not an image reference", d.image,
                                    "write REPOSITORY[:TAG][@sha256:DIGEST], e.g. ghcr.io/me/train:v1"))
        else:
            repository, tag, digest = parsed
            _set(values, "image.repository", repository)
            if tag:
                _set(values, "image.tag", tag)
            if digest:
                _set(values, "image.digest", digest)
    simple = [("topology.workers", d.workers), ("topology.nprocPerNode", d.nproc_per_node),
              ("resources.gpus", d.gpus), ("resources.requests.cpu", d.cpu), ("resources.requests.memory", d.memory),
              ("resources.limits.cpu", d.cpu_limit), ("resources.limits.memory", d.memory_limit),
              ("topology.backend", d.backend), ("shm.sizeLimit", d.shm_size), ("kueue.queueName", d.queue),
              ("priorityClassName", d.priority_class), ("restartPolicy", d.restart_policy),
              ("runPolicy.backoffLimit", d.backoff_limit), ("runPolicy.ttlSecondsAfterFinished", d.ttl),
              ("runPolicy.activeDeadlineSeconds", d.deadline)]
    for path, value in simple:
        if value is not None:
            _set(values, path, value)
    if d.output_pvc and d.output_size:
        problems.append(Finding("--output-pvc", "and --output-size both given", d.output_pvc,
                                "use --output-pvc for an existing claim or --output-size to create one, not both"))
    if d.output_pvc:
        _set(values, "output.enabled", True)
        _set(values, "output.existingClaim", d.output_pvc)
    if d.output_size:
        _set(values, "output.enabled", True)
        _set(values, "output.size", d.output_size)
    for i, text in enumerate(d.tolerations):
        match = _TOLERATION.match(text)
        if not match:
            problems.append(Finding(f"--toleration[{i}]", "is not a toleration", text,
                                    "write key=value:Effect or key:Effect (Effect: NoSchedule, PreferNoSchedule, NoExecute)"))
            continue
        toleration = {"key": match["key"], "operator": "Equal" if match["value"] is not None else "Exists"}
        if match["value"] is not None:
            toleration["value"] = match["value"]
        if match["effect"]:
            toleration["effect"] = match["effect"]
        values.setdefault("tolerations", []).append(toleration)
    for i, text in enumerate(d.node_selectors):
        key, sep, value = text.partition("=")
        if not sep or not key:
            problems.append(Finding(f"--node-selector[{i}]", "is not key=value", text, "write e.g. --node-selector pool=gpu"))
            continue
        values.setdefault("nodeSelector", {})[key] = value
    for i, text in enumerate(d.env):
        key, sep, value = text.partition("=")
        if not sep or not key:
            problems.append(Finding(f"--env[{i}]", "is not NAME=VALUE", text, "write e.g. --env NCCL_DEBUG=INFO"))
            continue
        values.setdefault("env", []).append({"name": key, "value": value})
    for secret in d.env_from_secrets:
        values.setdefault("envFrom", []).append({"secretRef": {"name": secret}})
    if d.elastic is not None:
        low, sep, high = d.elastic.partition(":")
        if not sep or not low.isdigit() or not high.isdigit():
            problems.append(Finding("--elastic", "is not MIN:MAX", d.elastic, "write e.g. --elastic 1:4 (Worker counts)"))
        else:
            _set(values, "elasticPolicy.enabled", True)
            _set(values, "elasticPolicy.minReplicas", int(low))
            _set(values, "elasticPolicy.maxReplicas", int(high))
    if d.args:
        values["args"] = list(values.get("args") or []) + list(d.args)
    if d.target:
        values["target"] = d.target
    merged = defaults.coalesce(values)
    if merged["target"] == "v2" and merged["output"]["enabled"] and merged["topology"]["workers"] \
            and "mountOn" not in (values.get("output") or {}):
        # Every v2 node mounts the same volumes: the output claim goes on all of them, so many nodes must attach it.
        _set(values, "output.mountOn", "all")
        if not merged["output"]["existingClaim"]:
            _set(values, "output.accessModes", ["ReadWriteMany"])
    for extra in d.sets:
        values = defaults.merge(values, extra)
    if problems:
        raise UserError(problems)
    return values


def summary(user: dict, job: dict, trainjob: dict | None = None) -> str:
    """What the job will be, read off the rendered PyTorchJob (for target v2, the v1 render of the
    same values, whose pods are the nodes, and the TrainJob): pods, processes, WORLD_SIZE, GPUs,
    backend, and what the defaults chose."""
    v = defaults.coalesce(user)
    specs = job["spec"]["pytorchReplicaSpecs"]
    workers = int(specs.get("Worker", {}).get("replicas", 0))
    pods = (1 if "Master" in specs else 0) + workers
    nproc = str(job["spec"].get("nprocPerNode") or "")
    gpu_name = v.get("gpuResourceName", "")
    gpus = sum(admission.pod_gpus(s, gpu_name) * int(s.get("replicas", 1)) for s in specs.values())
    backend = next((b for b in map(admission.backend, specs.values()) if b), "none")
    lines = [f"target: v2, a Trainer v2 TrainJob of {pods} identical node(s) launched through torchrun"] \
        if v.get("target") == "v2" else []
    lines += [
        f"pods: {pods} ({'1 Master' if 'Master' in specs else 'no Master'} + {workers} Worker{'s' if workers != 1 else ''})",
        f"processes per pod: {nproc or '1'}" + (" (via torchrun)" if nproc and nproc != "1" else ""),
        f"WORLD_SIZE: {admission.world_size(job)}" + (" (the operator counts a non-integer nprocPerNode as 1)"
                                                      if nproc and not nproc.isdigit() else ""),
        f"GPUs in total: {gpus}",
        f"backend: {backend}" + (" (auto: " + ("every pod has GPUs" if backend == "nccl" else "not every pod has GPUs") + ")"
                                 if v["topology"].get("backend") == "auto" else ""),
    ]
    chosen = []
    if not user.get("image", {}).get("repository"):
        chosen.append(f"image {admission.pytorch_container(next(iter(specs.values())))['image']}")
    if not user.get("job", {}).get("name"):
        chosen.append("job name from the release (<release>-pytorchjob)")
    if "requests" not in user.get("resources", {}):
        requests = v["resources"]["requests"]
        chosen.append("requests " + ", ".join(f"{k}={x}" for k, x in requests.items()))
    if v["shm"]["enabled"] and "shm" not in user:
        chosen.append(f"/dev/shm {v['shm']['sizeLimit']}")
    if gpus and v.get("gpuToleration"):
        chosen.append(f"toleration {v['gpuResourceName']}:NoSchedule")
    node_limits = ((((trainjob or {}).get("spec") or {}).get("trainer") or {}).get("resourcesPerNode") or {}).get("limits")
    if node_limits and "cpu" in node_limits and "cpu" not in (v["resources"].get("limits") or {}):
        chosen.append(f"CPU limit {node_limits['cpu']} per node, the CPU request in whole CPUs (the Kubeflow SDK cannot read a "
                      "TrainJob whose limits name no cpu or GPU; set resources.limits.cpu to choose another)")
    if "restartPolicy" not in user:
        chosen.append(f"restartPolicy {v['restartPolicy']}")
    if chosen:
        lines.append("defaults chose: " + "; ".join(chosen))
    return "\n".join(lines)
