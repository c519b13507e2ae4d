"""Rules a JSON schema cannot express, checked on coalesced values: the ones the operator's
webhook and Kubernetes apply to what the chart would render, named by the values path to fix."""
from __future__ import annotations

from . import admission, quantity
from .errors import Finding


def roles(values: dict) -> list[str]:
    """The roles the chart renders, in order."""
    out = ["master"] if values.get("topology", {}).get("master", True) else []
    if int(values.get("topology", {}).get("workers") or 0) > 0:
        out.append("worker")
    return out


def role_gpus(values: dict, role: str) -> int:
    own = values.get(role, {}).get("resources", {}).get("gpus")
    return int(own if own is not None else values.get("resources", {}).get("gpus") or 0)


def resolved_backend(values: dict) -> str:
    backend = values.get("topology", {}).get("backend", "auto")
    if backend != "auto":
        return backend
    rendered = roles(values)
    return "nccl" if rendered and all(role_gpus(values, r) > 0 for r in rendered) else "gloo"


def _effective(values: dict, role: str, kind: str) -> dict[str, tuple[object, str]]:
    """resource -> (quantity, values path it came from), as the chart overlays them."""
    out = {k: (v, f"resources.{kind}.{k}") for k, v in (values.get("resources", {}).get(kind) or {}).items()}
    for k, v in (values.get(role, {}).get("resources", {}).get(kind) or {}).items():
        out[k] = (v, f"{role}.resources.{kind}.{k}")
    return out


def _resource_findings(values: dict, role: str) -> list[Finding]:
    gpu_name = values.get("gpuResourceName", "nvidia.com/gpu")
    requests, limits = _effective(values, role, "requests"), _effective(values, role, "limits")
    gpus = role_gpus(values, role)
    if gpus > 0:
        limits[gpu_name] = (gpus, f"{role}.resources.gpus" if values.get(role, {}).get("resources", {}).get("gpus")
                            is not None else "resources.gpus")
    out = []
    for name, (request, rpath) in requests.items():
        try:
            r = quantity.parse(request)
        except ValueError:
            continue  # the schema reports it
        if name in limits:
            limit, lpath = limits[name]
            try:
                lim = quantity.parse(limit)
            except ValueError:
                continue
            if lim < r:
                out.append(Finding(lpath, f"is below the {role} request {request} ({rpath})", limit,
                                   f"raise {lpath} to at least {request} or lower {rpath}"))
            elif admission.is_extended(name) and lim != r:
                out.append(Finding(rpath, f"must equal the limit {limit} for the extended resource {name}", request,
                                   f"remove {rpath}; a limit alone sets the request"))
        elif admission.is_extended(name):
            hint = "use resources.gpus, which sets the limit" if name == gpu_name else f"set limits.{name} to {request}"
            out.append(Finding(rpath, f"is an extended resource without a limit on the {role}", request, hint))
    return out


def check(values: dict, release: str = "") -> list[Finding]:
    out: list[Finding] = []
    topology = values.get("topology", {})
    workers = int(topology.get("workers") or 0)
    rendered = roles(values)
    for role in rendered:
        out += _resource_findings(values, role)

    backend = resolved_backend(values)
    no_gpus = [r for r in rendered if role_gpus(values, r) == 0]
    if backend == "nccl" and no_gpus:
        out.append(Finding("topology.backend", f"nccl needs GPUs, and the {' and '.join(no_gpus)} pods have none", "nccl",
                           "set resources.gpus, or use backend gloo (or auto, which picks gloo without GPUs)"))
    nproc = str(topology.get("nprocPerNode") or "")
    if nproc.isdigit():
        for role in rendered:
            gpus = role_gpus(values, role)
            if 0 < gpus < int(nproc):
                out.append(Finding("topology.nprocPerNode", f"starts {nproc} processes per pod but the {role} has {gpus} GPU(s)",
                                   nproc, f"set nprocPerNode to {gpus} (one process per GPU) or request {nproc} GPUs"))
                break
    if nproc == "gpu" and any(role_gpus(values, r) == 0 for r in rendered):
        out.append(Finding("topology.nprocPerNode", "is gpu but some pods request no GPUs", nproc,
                           "request GPUs with resources.gpus or use auto"))

    elastic = values.get("elasticPolicy", {})
    if elastic.get("enabled"):
        if workers < 1:
            out.append(Finding("elasticPolicy.enabled", "needs Worker replicas", True, "set topology.workers to at least 1"))
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if isinstance(low, int) and isinstance(high, int):
            if low > high:
                out.append(Finding("elasticPolicy.minReplicas", f"is above maxReplicas ({high})", low,
                                   "lower minReplicas or raise maxReplicas"))
            elif workers and not low <= workers <= high:
                out.append(Finding("topology.workers", f"is outside the elastic range {low}..{high}", workers,
                                   f"start with between {low} and {high} Workers"))

    name = values.get("job", {}).get("name") or _fullname(values, release)
    if name:
        path = "job.name" if values.get("job", {}).get("name") else "fullnameOverride"
        out += [Finding(path if f.path == "metadata.name" else f.path, f.message, f.value, f.hint)
                for f in admission.check_job_name(name, workers)]

    pods = len(rendered) - (1 if "worker" in rendered else 0) + workers
    min_available = values.get("runPolicy", {}).get("schedulingPolicy", {}).get("minAvailable")
    if isinstance(min_available, int) and min_available > pods:
        out.append(Finding("runPolicy.schedulingPolicy.minAvailable", f"is above the job's {pods} pods", min_available,
                           f"use at most {pods}"))
    output = values.get("output", {})
    if output.get("enabled") and output.get("mountOn") == "all" and workers and not output.get("existingClaim") \
            and output.get("accessModes") == ["ReadWriteOnce"]:
        out.append(Finding("output.accessModes", "is ReadWriteOnce but the claim is mounted on every pod, which "
                           "spread over several nodes cannot attach", output["accessModes"],
                           "use ReadWriteMany, or output.mountOn: master (rank 0 alone writes)"))
    seen, unique = set(), []
    for f in out:  # a shared value broken on both roles is one problem
        key = (f.path, repr(f.value), f.hint)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _fullname(values: dict, release: str) -> str:
    """The chart's default job name, for a known release name."""
    if values.get("fullnameOverride"):
        return values["fullnameOverride"][:63].rstrip("-")
    if not release:
        return ""
    chart = values.get("nameOverride") or "pytorchjob"
    return (release if chart in release else f"{release}-{chart}")[:63].rstrip("-")
