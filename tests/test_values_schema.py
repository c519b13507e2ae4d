"""values.schema.json: one file, valid, strict, in step with values.yaml and the templates."""
import json
import re

import jsonschema
import pytest
import yaml

from generator import chartdoc, helm, paths
from generator.errors import UserError

CHART_SCHEMA = paths.JOB_CHART / "values.schema.json"
SCHEMA = json.loads(paths.SCHEMA.read_text())
DEFAULTS = yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())


def test_top_level_and_chart_schema_are_the_same_bytes():
    assert paths.SCHEMA.read_bytes() == CHART_SCHEMA.read_bytes(), \
        "values.schema.json and charts/pytorchjob/values.schema.json differ: copy one over the other"


def test_schema_is_valid_draft_07():
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_defaults_validate():
    jsonschema.Draft7Validator(SCHEMA).validate(DEFAULTS)


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


def _template_references():
    """.Values.a.b paths the templates read; role fields are read through $role for master and worker."""
    refs = set()
    for tpl in (paths.JOB_CHART / "templates").iterdir():
        text = tpl.read_text()
        refs |= {m for m in re.findall(r"\.Values((?:\.[A-Za-z][A-Za-z0-9_]*)+)", text)}
        refs |= {m for m in re.findall(r"\$v((?:\.[A-Za-z][A-Za-z0-9_]*)+)", text)}
        for m in re.findall(r"\$role((?:\.[A-Za-z][A-Za-z0-9_]*)+)", text):
            refs |= {".master" + m, ".worker" + m}
        for var, base in re.findall(r"\{\{-? \$(\w+) := (\.Values(?:\.\w+)+) -?\}\}", text):
            refs |= {base[len(".Values"):] + m for m in re.findall(rf"\${var}((?:\.[A-Za-z][A-Za-z0-9_]*)+)", text)}
    return {r.lstrip(".") for r in refs}


def test_every_schema_property_is_read_by_a_template():
    refs = _template_references()
    leaves = {p for p in SCHEMA_PATHS if p not in SCHEMA_PARENTS}
    unread = {p for p in leaves if not any(r == p or r.startswith(p + ".") for r in refs)}
    assert unread == set(), "schema properties no template reads (dead keys)"


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
