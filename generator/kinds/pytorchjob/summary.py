"""`values`' summary of a job, read off the PyTorchJob the chart renders (for a TrainJob, the
PyTorchJob the same values render, whose pods are its nodes)."""
from __future__ import annotations

from generator.job import defaults
from generator.kinds.pytorchjob import admission


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
    lines = [f"target: {v['target']}, a Trainer v2 TrainJob of {pods} identical node(s) launched through torchrun"] \
        if trainjob else []
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
