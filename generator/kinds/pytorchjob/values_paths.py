"""The PyTorchJob the chart renders, judged as values: the operator's rules and advice on it,
each named by the values path that produced the manifest path it is about."""
from __future__ import annotations

import re

from generator.errors import Finding
from generator.job.validation import unique
from generator.kinds.pytorchjob import admission


def values_findings(objects: list[dict], merged: dict) -> tuple[list[Finding], list[Finding]]:
    """(refusals, warnings) of the rendered objects, by the values' paths."""
    manifest = admission.check_objects(objects, merged.get("gpuResourceName", ""))
    named = [Finding(values_path(f.path, merged), f.message, f.value, f.hint) for f in manifest]
    job = next((o for o in objects if o.get("kind") == admission.KIND), None)
    advice = admission.advice(job) if job and not named else []
    return unique(named), [Finding(values_path(f.path, merged), f.message, f.value, f.hint) for f in advice]


_REPLICA = re.compile(r"^spec\.pytorchReplicaSpecs\.(Master|Worker)\.(.*)$")
_CONTAINER = re.compile(r"^template\.spec\.containers\[(\d+)\](?:\.(.*))?$")


def values_path(path: str, values: dict) -> str:
    """The values path that produced a path of the rendered manifest; the manifest path when none did."""
    if path == "metadata.name":
        return "fullnameOverride" if values.get("fullnameOverride") and not values["job"].get("name") else "job.name"
    if path.startswith("PersistentVolumeClaim/"):
        return "output." + path.rsplit(".", 1)[-1]
    if path == "spec.pytorchReplicaSpecs.*.args":
        return "topology.backend"
    if path == "spec.nprocPerNode":
        return "topology.nprocPerNode"
    if path == "spec.elasticPolicy":
        return "elasticPolicy.enabled"
    if path.startswith(("spec.elasticPolicy.", "spec.runPolicy.")):
        return path[len("spec."):]
    match = _REPLICA.match(path)
    if not match:
        return path
    role, rest = match.group(1).lower(), match.group(2)
    if rest == "replicas":
        return "topology.master" if role == "master" else "topology.workers"
    if rest == "restartPolicy":
        return _own_or_shared(values, role, "restartPolicy")
    container = _CONTAINER.match(rest)
    if not container:
        return path
    index, inner = int(container.group(1)), container.group(2) or ""
    if index > 0:
        return _own_or_shared(values, role, "extraContainers")
    if inner == "image" or inner.startswith("image"):
        return "image.repository"
    if inner.startswith("ports"):
        return "port" if inner.startswith("ports[0]") and values.get("port") is not None else "extraPorts"
    if inner.startswith("resources"):
        parts = inner.split(".", 2)  # resources, kind, name
        if len(parts) < 3:
            return _own_or_shared(values, role, "resources")
        kind, name = parts[1], parts[2]
        if kind == "limits" and name == values.get("gpuResourceName"):
            return _own_or_shared(values, role, "resources.gpus")
        return _own_or_shared(values, role, f"resources.{kind}.{name}")
    return path


def _own_or_shared(values: dict, role: str, dotted: str) -> str:
    """`<role>.<dotted>` when the role sets it, else the shared `<dotted>`."""
    node: object = values.get(role, {})
    for part in _split(dotted):
        if not isinstance(node, dict) or node.get(part) is None:
            return dotted
        node = node[part]
    return f"{role}.{dotted}"


def _split(dotted: str) -> list[str]:
    # resource names hold dots (nvidia.com/gpu): only the first two separators are structure
    head, _, rest = dotted.partition(".")
    if head == "resources" and rest:
        kind, _, name = rest.partition(".")
        return [head, kind, name] if name else [head, kind]
    return [head] + ([rest] if rest else [])

