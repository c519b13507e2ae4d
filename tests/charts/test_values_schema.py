"""values.schema.json: one file, valid, strict, in step with values.yaml and the templates."""
import json

import click
import jsonschema
import pytest
import yaml

from generator import helm, paths
from generator.errors import UserError
from tests.support import chartdoc

CHART_SCHEMA = paths.JOB_CHART / "values.schema.json"
SCHEMA = json.loads(paths.SCHEMA.read_text())
DEFAULTS = yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())


def test_top_level_schema_is_the_charts_own_file():
    top = paths.ROOT / "values.schema.json"
    assert top.is_symlink() and top.resolve() == CHART_SCHEMA.resolve(), \
        "values.schema.json must be a link to charts/pytorchjob/values.schema.json: ln -sf charts/pytorchjob/values.schema.json ."


def test_schema_is_valid_draft_07():
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_defaults_validate():
    jsonschema.Draft7Validator(SCHEMA).validate(DEFAULTS)


def test_the_clis_choices_are_the_schemas():
    """`values --restart-policy` and every command's `--target` offer exactly what the schema accepts
    (the generator reads both from its own lists: admission's restart policies, the kinds' targets)."""
    from generator.cli.values import command

    offered = {param.name: list(param.type.choices) for param in command.params if isinstance(param.type, click.Choice)}
    assert offered["restart_policy"] == [p for p in SCHEMA["definitions"]["restartPolicyOrEmpty"]["enum"] if p]
    assert offered["target"] == SCHEMA["properties"]["target"]["enum"]


def _schema_paths(schema, prefix=""):
    """Dotted paths of every property of the chart-owned (closed) objects, parents included."""
    out = set()
    node = schema
    if "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    if node.get("additionalProperties") is not False:
        return out
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        out |= _schema_paths(sub, path + ".")
    return out


def _value_paths(values, prefix=""):
    out = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        if isinstance(value, dict) and value and path in SCHEMA_PARENTS:
            out |= _value_paths(value, path + ".")
    return out


SCHEMA_PATHS = _schema_paths(SCHEMA)
SCHEMA_PARENTS = {p.rsplit(".", 1)[0] for p in SCHEMA_PATHS if "." in p}


def test_every_values_key_is_in_the_schema_and_back():
    in_values = _value_paths(DEFAULTS)
    assert in_values - SCHEMA_PATHS == set(), "keys in values.yaml the schema does not declare"
    assert SCHEMA_PATHS - in_values == set(), "schema properties values.yaml does not set (document a default)"


# A leaf only shows in the output once the feature around it is on.
CONTEXT = {
    "output.": {"output": {"enabled": True}},
    "elasticPolicy.": {"elasticPolicy": {"enabled": True}},
    "gpuResourceName": {"resources": {"gpus": 1}},
    "gpuToleration": {"resources": {"gpus": 1}},
    "launcher": {"topology": {"nprocPerNode": "2"}},
}
# Valid values that differ from the defaults, where the schema alone does not suggest one.
MUTATIONS = {
    "job.name": "mutated", "image.repository": "example.com/other", "image.tag": "v9",
    "image.digest": "sha256:" + "c" * 64, "gpuResourceName": "amd.com/gpu", "output.mountPath": "/mnt/x",
    "output.existingClaim": "claim-x", "kueue.queueName": "q-x", "topology.nprocPerNode": "3",
    "topology.master": False, "fullnameOverride": "other-name", "nameOverride": "other",
    "elasticPolicy.metrics": [{"type": "Resource", "resource": {"name": "cpu"}}],
    "extraPorts": [{"name": "metrics", "containerPort": 9100}],
    "extraContainers": [{"name": "side", "image": "busybox:1"}],
    "master.extraContainers": [{"name": "side", "image": "busybox:1"}],
    "worker.extraContainers": [{"name": "side", "image": "busybox:1"}],
    "extraVolumes": [{"name": "v", "emptyDir": {}}], "master.extraVolumes": [{"name": "v", "emptyDir": {}}],
    "worker.extraVolumes": [{"name": "v", "emptyDir": {}}],
    "extraVolumeMounts": [{"name": "v", "mountPath": "/v"}], "master.extraVolumeMounts": [{"name": "v", "mountPath": "/v"}],
    "worker.extraVolumeMounts": [{"name": "v", "mountPath": "/v"}],
    "env": [{"name": "M", "value": "1"}], "master.env": [{"name": "M", "value": "1"}], "worker.env": [{"name": "M", "value": "1"}],
    "envFrom": [{"secretRef": {"name": "s"}}], "image.pullSecrets": ["regcred"],
    "tolerations": [{"key": "k", "operator": "Exists"}], "master.tolerations": [{"key": "k", "operator": "Exists"}],
    "worker.tolerations": [{"key": "k", "operator": "Exists"}],
    "affinity": {"nodeAffinity": {}}, "master.affinity": {"nodeAffinity": {}}, "worker.affinity": {"nodeAffinity": {}},
    "podSpecExtra": {"hostIPC": True}, "master.podSpecExtra": {"hostIPC": True}, "worker.podSpecExtra": {"hostIPC": True},
    "containerExtra": {"workingDir": "/w"}, "command": ["python"], "args": ["--x"],
    "podSecurityContext": {"runAsUser": 7}, "securityContext": {"privileged": False},
    "output.accessModes": ["ReadWriteMany"], "topology.backend": "none",
}


def _mutation(path, schema, default):
    if path in MUTATIONS:
        return MUTATIONS[path]
    if "$ref" in schema:
        schema = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    if "enum" in schema:
        return next(v for v in schema["enum"] if v != default)
    kinds = schema.get("type", [])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "boolean" in kinds:
        return not default
    if "integer" in kinds:
        return (default or schema.get("minimum", 1)) + 1
    if "anyOf" in schema:  # quantities
        return "3"
    if "object" in kinds:
        if schema.get("additionalProperties", {}).get("$ref", "").endswith("quantity"):
            return {"cpu": "3"}
        return {"mutated": "yes"}
    if "string" in kinds:
        return "mutated"
    raise AssertionError(f"no mutation for {path}: add one to MUTATIONS")


def _leaf_schemas(schema=SCHEMA, prefix=""):
    node = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
    out = {}
    for key, sub in node.get("properties", {}).items():
        path = prefix + key
        if path in SCHEMA_PARENTS:
            out.update(_leaf_schemas(sub, path + "."))
        else:
            out[path] = sub
    return out


def _nested(path, value):
    out = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.mark.parametrize("path", sorted(_leaf_schemas()))
def test_every_schema_property_changes_the_rendered_output(path):
    """No dead keys: setting any value to something else changes what Helm renders."""
    context = next((v for k, v in CONTEXT.items() if path.startswith(k) and not path.endswith(".enabled")), {})
    default = DEFAULTS
    for part in path.split("."):
        default = default[part]
    mutated = _merge(context, _nested(path, _mutation(path, _leaf_schemas()[path], default)))
    if path == "topology.master":
        mutated = _merge(mutated, {"topology": {"workers": 1}})
    base = helm.render_stream(paths.JOB_CHART, context)
    assert helm.render_stream(paths.JOB_CHART, mutated) != base, f"{path} is read by no template"


QUANTITIES_OK = ["1.5Gi", "500m", "2", 2, 0.5, "1e3", "1E-3", "0", ".5", "100Ki", "+1"]
QUANTITIES_BAD = ["lots", "-1", -1, "1.5GB", "1,5Gi", "Gi", "", "1 Gi", "1.5gi"]


@pytest.mark.parametrize("q", QUANTITIES_OK)
def test_quantity_pattern_accepts_kubernetes_quantities(q):
    jsonschema.Draft7Validator(SCHEMA).validate({"resources": {"requests": {"cpu": q}}})


@pytest.mark.parametrize("q", QUANTITIES_BAD)
def test_quantity_pattern_rejects_invalid_quantities(q):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate({"resources": {"requests": {"cpu": q}}})


INVALID = [
    ({"unknownKey": 1}, "unknownKey"),
    ({"image": {"registry": "x"}}, "image"),
    ({"image": {"pullPolicy": "Sometimes"}}, "image.pullPolicy"),
    ({"image": {"digest": "sha256:short"}}, "image.digest"),
    ({"topology": {"workers": -1}}, "topology.workers"),
    ({"topology": {"workers": "two"}}, "topology.workers"),
    ({"topology": {"backend": "mpi"}}, "topology.backend"),
    ({"topology": {"nprocPerNode": "0"}}, "topology.nprocPerNode"),
    ({"topology": {"master": False, "workers": 0}}, "topology.workers"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "resources.requests.cpu"),
    ({"resources": {"limits": {"memory": "1.5GB"}}}, "resources.limits.memory"),
    ({"resources": {"gpus": -1}}, "resources.gpus"),
    ({"restartPolicy": "Sometimes"}, "restartPolicy"),
    ({"master": {"restartPolicy": "Maybe"}}, "master.restartPolicy"),
    ({"worker": {"resources": {"gpus": -2}}}, "worker.resources.gpus"),
    ({"port": 70000}, "port"),
    ({"port": 0}, "port"),
    ({"env": [{"value": "x"}]}, "env.0"),
    ({"env": [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, "env.0"),
    ({"envFrom": [{"secretRef": {}}]}, "envFrom.0.secretRef"),
    ({"output": {"mountOn": "workers"}}, "output.mountOn"),
    ({"output": {"size": "ten"}}, "output.size"),
    ({"output": {"accessModes": ["ReadWriteSometimes"]}}, "output.accessModes.0"),
    ({"output": {"mountPath": "relative/path"}}, "output.mountPath"),
    ({"shm": {"sizeLimit": "-1Gi"}}, "shm.sizeLimit"),
    ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "tolerations.0.effect"),
    # Unknown keys inside list items, and a digest that is not a whole sha256.
    ({"tolerations": [{"key": "a", "efect": "NoSchedule"}]}, "tolerations.0"),
    ({"master": {"tolerations": [{"key": "a", "operater": "Exists"}]}}, "master.tolerations.0"),
    ({"env": [{"name": "A", "valu": "x"}]}, "env.0"),
    ({"image": {"digest": "sha256:abc"}}, "image.digest"),
    ({"nodeLossTolerationSeconds": -1}, "nodeLossTolerationSeconds"),
    ({"nodeLossTolerationSeconds": "300"}, "nodeLossTolerationSeconds"),
    ({"runPolicy": {"cleanPodPolicy": "Some"}}, "runPolicy.cleanPodPolicy"),
    ({"runPolicy": {"ttlSecondsAfterFinished": -5}}, "runPolicy.ttlSecondsAfterFinished"),
    ({"runPolicy": {"backoffLimit": -1}}, "runPolicy.backoffLimit"),
    ({"runPolicy": {"schedulingPolicy": {"minAvailable": 0}}}, "runPolicy.schedulingPolicy.minAvailable"),
    ({"elasticPolicy": {"rdzvBackend": "zookeeper"}}, "elasticPolicy.rdzvBackend"),
    ({"elasticPolicy": {"rdzvPort": 65536}}, "elasticPolicy.rdzvPort"),
    ({"elasticPolicy": {"nProcPerNode": 2}}, "elasticPolicy"),
    ({"job": {"name": "Has_Upper"}}, "job.name"),
    ({"podSpecExtra": {"containers": []}}, "podSpecExtra"),
    ({"containerExtra": {"image": "x"}}, "containerExtra"),
    ({"launcher": "mpirun"}, "launcher"),
    ({"kueue": {"queueName": "Team A"}}, "kueue.queueName"),
]


@pytest.mark.parametrize("values, path", INVALID, ids=[p for _, p in INVALID])
def test_helm_refuses_invalid_values_naming_the_field(values, path):
    with pytest.raises(UserError) as err:
        helm.render(paths.JOB_CHART, values)
    assert any(f.path == path or f.path.startswith(path + ".") for f in err.value.findings), str(err.value)


def test_every_values_key_is_documented_and_readme_table_is_current():
    _, undocumented = chartdoc.parameters(paths.JOB_CHART / "values.yaml")
    assert undocumented == []
    assert (paths.JOB_CHART / "README.md").read_text() == chartdoc.updated_readme(paths.JOB_CHART), \
        "charts/pytorchjob/README.md's parameter table is stale: run `make docs`"
