"""Checks of rendered objects: Kubernetes' published OpenAPI schemas in strict mode for built-in
kinds; for PyTorchJobs, our CRD's schema, the operator's admission rules and the pod templates inside."""
from __future__ import annotations

import functools

import jsonschema
import kubernetes_validate

from generator import helm, paths
from generator.kinds.pytorchjob import admission

KUBE_VERSION = "1.33.0"


def _validate(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path)
        return [f"{obj['kind']}/{obj['metadata'].get('name')} {where}: {exc.message}"]
    return []


@functools.cache
def crd() -> dict:
    """The PyTorchJob CRD exactly as charts/pytorch-operator installs it."""
    objects = helm.render_objects(paths.OPERATOR_CHART, {}, "crd", "kubeflow")
    return next(o for o in objects if o["kind"] == "CustomResourceDefinition")


def crd_schema_for_jsonschema(schema: object) -> object:
    """The CRD's openAPIV3Schema as plain JSON Schema: int-or-string becomes anyOf, the
    x-kubernetes extensions drop out, `nullable` widens the type."""
    if isinstance(schema, list):
        return [crd_schema_for_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: crd_schema_for_jsonschema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("pattern", None)
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def crd_problems(job: dict) -> list[str]:
    version = crd()["spec"]["versions"][0]
    schema = crd_schema_for_jsonschema(version["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft7Validator(schema)
    return [f"PyTorchJob {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(job)]


def _service_monitor(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    out = []
    if not spec.get("selector"):
        out.append("ServiceMonitor spec.selector is empty: it would select nothing")
    if not spec.get("endpoints") or not all(e.get("port") for e in spec["endpoints"]):
        out.append("ServiceMonitor spec.endpoints need a named port")
    return out


TRAINER_KINDS = {"TrainJob": "trainjobs", "TrainingRuntime": "trainingruntimes"}


def trainer_crd(kind: str) -> dict | None:
    """Trainer v2.3's CRD for a kind, from ../shared/reference (None when it is not beside the clone)."""
    import yaml

    from tests.support import REFERENCE

    path = REFERENCE / "trainer-v2.3.0" / f"trainer.kubeflow.org_{TRAINER_KINDS[kind]}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else None


def trainer_problems(obj: dict) -> list[str]:
    """A TrainJob or TrainingRuntime against Trainer v2.3's CRD schema, and a runtime's pod
    template against Kubernetes' own."""
    out = []
    definition = trainer_crd(obj["kind"])
    if definition is not None:
        version = next(v for v in definition["spec"]["versions"] if v["name"] == "v1alpha1")
        validator = jsonschema.Draft7Validator(crd_schema_for_jsonschema(version["schema"]["openAPIV3Schema"]))
        out += [f"{obj['kind']} {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
    if obj["kind"] == "TrainingRuntime":
        for job in obj["spec"]["template"]["spec"]["replicatedJobs"]:
            out += _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": job["name"]},
                              "template": job["template"]["spec"]["template"]})
    return out


def problems(obj: dict) -> list[str]:
    """Everything Kubernetes or the operator would reject in one rendered object."""
    if obj.get("kind") == "ServiceMonitor":
        return _service_monitor(obj)
    if obj.get("kind") in TRAINER_KINDS:
        return trainer_problems(obj)
    if obj.get("kind") != "PyTorchJob":
        return _validate(obj)
    out = crd_problems(obj) + [f.render() for f in admission.check_pytorchjob(obj)]
    for role, spec in obj["spec"]["pytorchReplicaSpecs"].items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate",
                        "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}"},
                        "template": spec["template"]}
        out += _validate(pod_template)
    return out
