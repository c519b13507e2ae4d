"""Findings on the rendered PyTorchJob are named by values paths. That mapping is the one place
Python knows where the templates put each value, so it is held against real renders of every
scenario: each manifest path a rule can name maps to a key the values schema has."""
import json

import pytest

from generator import paths
from generator.job import defaults
from generator.kinds.pytorchjob import values_paths
from tests.support import scenarios

SCHEMA = json.loads(paths.SCHEMA.read_text())


def _schema_has(dotted: str) -> bool:
    node = SCHEMA
    parts = dotted.split(".")
    i = 0
    while i < len(parts):
        while "$ref" in node:
            node = SCHEMA["definitions"][node["$ref"].split("/")[-1]]
        props = node.get("properties") or {}
        if parts[i] in props:
            node = props[parts[i]]
            i += 1
        elif node.get("additionalProperties") not in (None, False):
            return True  # a free-form map: resource names (nvidia.com/gpu), labels, ...
        else:
            return False
    return True


def _rule_paths(job: dict) -> list[str]:
    """Every manifest path the admission rules can name on this job."""
    out = ["metadata.name", "spec.nprocPerNode", "spec.pytorchReplicaSpecs.*.args"]
    out += [f"spec.runPolicy.{k}" for k in ("cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                                            "backoffLimit", "schedulingPolicy.minAvailable")]
    if "elasticPolicy" in job["spec"]:
        out += ["spec.elasticPolicy"] + [f"spec.elasticPolicy.{k}" for k in job["spec"]["elasticPolicy"]]
    for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
        base = f"spec.pytorchReplicaSpecs.{role}"
        out += [f"{base}.replicas", f"{base}.restartPolicy"]
        for i, container in enumerate(spec["template"]["spec"]["containers"]):
            cpath = f"{base}.template.spec.containers[{i}]"
            out += [f"{cpath}.image", f"{cpath}.resources"]
            out += [f"{cpath}.ports[{j}].containerPort" for j in range(len(container.get("ports") or []))]
            for kind, names in (container.get("resources") or {}).items():
                out += [f"{cpath}.resources.{kind}.{name}" for name in names]
    return out


@pytest.mark.parametrize("name", [n for n in scenarios.names("pytorchjob")
                                  if scenarios.values("pytorchjob", n).get("target") != "v2"])  # no PyTorchJob
def test_every_rule_path_maps_to_a_values_key(name):
    user = scenarios.values("pytorchjob", name)
    job = next(o for o in scenarios.render_objects("pytorchjob", name) if o["kind"] == "PyTorchJob")
    merged = defaults.coalesce(user)
    mapped = {p: values_paths.values_path(p, merged) for p in _rule_paths(job)}
    unknown = {p: v for p, v in mapped.items() if not _schema_has(v)}
    assert unknown == {}
    assert len(mapped) > 10


def test_a_role_value_is_named_where_the_role_sets_it():
    merged = defaults.coalesce({"topology": {"workers": 1}, "worker": {"resources": {"limits": {"memory": "1Gi"}}}})
    container = "spec.pytorchReplicaSpecs.{}.template.spec.containers[0].resources.limits.memory"
    assert values_paths.values_path(container.format("Worker"), merged) == "worker.resources.limits.memory"
    assert values_paths.values_path(container.format("Master"), merged) == "resources.limits.memory"
    gpus = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu"
    assert values_paths.values_path(gpus, merged) == "resources.gpus"
