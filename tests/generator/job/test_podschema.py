"""generator.job.podschema passes a pod template only where kubernetes-validate (jsonschema on
Kubernetes' strict schema) accepts it, and passes the templates real jobs have, so that `import`
and `validate` of a manifest skip loading jsonschema without a report changing."""
import copy
import datetime
import functools
import json

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.job import podschema
from generator.kinds.pytorchjob import importer
from tests.support import MANIFESTS, REFERENCE, TESTS


def _jobs() -> list[dict]:
    files = [*MANIFESTS.glob("*.yaml"), *(REFERENCE / "training-operator-v1.9.4" / "examples").glob("*.yaml"),
             *(TESTS / "golden" / "pytorchjob").glob("*.yaml")]
    out = []
    for path in sorted(files):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "PyTorchJob"]
    return out


def _wrap(template) -> dict:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "import"}, "template": template}


TEMPLATES = [_wrap(spec["template"]) for job in _jobs() for spec in job["spec"]["pytorchReplicaSpecs"].values()]


@pytest.fixture(scope="module", autouse=True)
def schemas_read_once():
    """kubernetes-validate reads its 1.4 MB of definitions on every call; the same answers, faster."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kubernetes_validate.utils, "schema_contents",
                      functools.cache(kubernetes_validate.utils.schema_contents))
        yield


def _accepted(obj) -> bool:
    try:
        kubernetes_validate.validate(obj, podschema.KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError:
        return False
    return True


_SCHEMA = podschema._schema  # the cached function, also while a test replaces it


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    _SCHEMA.cache_clear()
    yield
    _SCHEMA.cache_clear()


def test_the_templates_of_real_jobs_pass():
    assert len(TEMPLATES) >= 10
    for template in TEMPLATES:
        assert _accepted(template)
        assert podschema.passes(template), json.dumps(template)[:300]


def _paths(node, at=()):
    yield at
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*at, i))


REPLACEMENTS = [None, True, 0, 7, -1, 1.5, 2.0, "", "x", "1Gi", [], ["x"], [{}], {}, {"bogus": 1}, {"name": "x"},
                datetime.date(2024, 1, 1), b"bytes"]


def _mutations(template):
    """Every path of the template: its value replaced by each odd value, an unknown key added
    to each mapping, each key removed (the wrapper's own fields stay: importer writes them)."""
    for path in list(_paths(template["template"], ("template",))):
        for replacement in REPLACEMENTS:
            out = copy.deepcopy(template)
            holder = out
            for part in path[:-1]:
                holder = holder[part]
            holder[path[-1]] = copy.deepcopy(replacement)
            yield out
        out = copy.deepcopy(template)
        holder = out
        for part in path[:-1]:
            holder = holder[part]
        if isinstance(holder, dict):
            del holder[path[-1]]
            yield out
        node = holder[path[-1]] if isinstance(holder, list) else None
        if isinstance(node, dict):
            node["notAField"] = 1
            yield out


def test_no_mutation_passes_that_kubernetes_validate_refuses():
    passed = refused = 0
    richest = sorted(TEMPLATES, key=lambda t: len(list(_paths(t))), reverse=True)
    for template in richest[:4]:
        for mutated in _mutations(template):
            if podschema.passes(mutated):
                passed += 1
                assert _accepted(mutated), json.dumps(mutated, default=str)[:400]
            elif not _accepted(mutated):
                refused += 1
    assert passed > 100 and refused > 100  # both answers were exercised


json_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 70000) | st.floats(allow_nan=False)
                           | st.sampled_from(["", "a", "TCP", "Always", "100m", "1Gi", "IfNotPresent"]),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["name", "image", "ports", "containerPort", "protocol",
                                                              "resources", "limits", "requests", "env", "value",
                                                              "containers", "spec", "metadata", "labels", "cpu",
                                                              "port", "livenessProbe", "httpGet", "other"]),
                                             inner, max_size=4), max_leaves=12)


@settings(max_examples=300)
@given(json_values, st.sampled_from(range(6)))
def test_random_values_anywhere_in_a_template_never_pass_wrongly(value, which):
    template = copy.deepcopy(TEMPLATES[which % len(TEMPLATES)])
    paths = list(_paths(template["template"], ("template",)))
    path = paths[hash(json.dumps(value, sort_keys=True, default=str)) % len(paths)]
    holder = template
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    if podschema.passes(template):
        assert _accepted(template)


SCHEMAS = [{"type": "integer"}, {"type": ["number", "null"]}, {"type": "boolean"}, {"type": ["string", "null"]},
           {"type": "object"}, {"type": "array", "items": {"type": "integer"}}, {"enum": ["a", None]},
           {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]},
           {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
           {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}}]
VALUES = [None, True, False, 0, 1, -2, 1.0, 1.5, "", "a", "1", [], [1], [1.0], [True], {}, {"a": "x"}, {"a": 1},
          {"b": 1}, {"a": "x", "b": 2}, {"a": "x", "b": "y"}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=json.dumps)
def test_each_keyword_decides_as_jsonschema_does(schema):
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    for value in VALUES:
        try:
            mine = podschema._valid(value, schema, {})
        except podschema._Unknown:
            continue
        assert mine == validator.is_valid(value), (schema, value)


def test_the_definitions_are_read_once_into_the_cache(tmp_path):
    template = TEMPLATES[0]
    assert podschema.passes(template)
    (cached,) = (tmp_path / "cache" / "podschema").glob("*.json")
    data = json.loads(cached.read_text())
    assert "io.k8s.api.core.v1.Container" in data["defs"] and "description" not in json.dumps(data["root"])
    _SCHEMA.cache_clear()
    cached.write_text("{not json")  # a broken cache is read again from kubernetes-validate
    assert podschema.passes(template)
    assert json.loads(cached.read_text())["key"] == data["key"]


def test_an_unwritable_cache_still_checks(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(blocker))
    _SCHEMA.cache_clear()
    assert podschema.passes(TEMPLATES[0])
    bad = copy.deepcopy(TEMPLATES[0])
    bad["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    assert not podschema.passes(bad)


def test_a_schema_keyword_it_does_not_know_sends_the_template_the_long_way(monkeypatch):
    schema = podschema._schema("podtemplate", "v1")
    changed = copy.deepcopy(schema)
    changed["defs"]["io.k8s.api.core.v1.Container"]["minProperties"] = 1
    monkeypatch.setattr(podschema, "_schema", lambda kind, api_version: changed)
    assert not podschema.passes(TEMPLATES[0])


def test_import_reports_kubernetes_validate_s_own_message(tmp_path):
    job = copy.deepcopy(_jobs()[0])
    spec = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))
    spec["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "http"}]
    findings = importer.kubernetes_findings(job)
    assert findings and findings[0].path.endswith("containers.0.ports.0.containerPort")
    assert "'http' is not of type 'integer'" in findings[0].message
