"""Checks of rendered objects against Kubernetes' published OpenAPI schemas (strict) and,
for PyTorchJobs, against the operator's admission rules and the pod templates inside them."""
from __future__ import annotations

import kubernetes_validate

from generator import admission

KUBE_VERSION = "1.33.0"


def _validate(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path)
        return [f"{obj['kind']}/{obj['metadata'].get('name')} {where}: {exc.message}"]
    return []


def problems(obj: dict) -> list[str]:
    """Everything Kubernetes or the operator would reject in one rendered object."""
    if obj.get("kind") != "PyTorchJob":
        return _validate(obj)
    out = [f.render() for f in admission.check_pytorchjob(obj)]
    for role, spec in obj["spec"]["pytorchReplicaSpecs"].items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate",
                        "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}"},
                        "template": spec["template"]}
        out += _validate(pod_template)
    return out
