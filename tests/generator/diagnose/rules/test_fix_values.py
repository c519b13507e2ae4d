"""Every chart value a diagnose fix text names exists in that chart's values schema: the names
are the ones generator.fixtext recorded as the rules and kinds loaded, not read back from prose."""
import importlib
import json
import pkgutil

import pytest

from generator import fixtext, kinds, paths
from generator.diagnose import rules

SCHEMAS = {fixtext.JOB_CHART: paths.SCHEMA, fixtext.OPERATOR_CHART: paths.OPERATOR_CHART / "values.schema.json"}


def named() -> set[tuple[str, str]]:
    """What the fix texts name, once every module that writes them is loaded."""
    for package in (rules, kinds):
        for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    return set(fixtext.NAMED)


def exists(schema: dict, path: str) -> bool:
    """Whether the dotted values path is allowed by the schema: a property at each step, or a map's free key."""
    def resolve(node: dict) -> dict:
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    def walk(node: dict, parts: list[str]) -> bool:
        node = resolve(node)
        if not parts:
            return True
        options = node.get("anyOf") or node.get("oneOf")
        if options:
            return any(walk(option, parts) for option in options)
        if parts[0] in (node.get("properties") or {}):
            return walk(node["properties"][parts[0]], parts[1:])
        free = node.get("additionalProperties")
        return isinstance(free, dict) and walk(free, parts[1:])

    return walk(schema, path.split("."))


def missing(names: set[tuple[str, str]]) -> list[str]:
    schemas = {chart: json.loads(path.read_text()) for chart, path in SCHEMAS.items()}
    return sorted(f"{chart}: {path}" for chart, path in names if not exists(schemas[chart], path))


def test_every_value_a_fix_names_is_in_its_charts_schema():
    names = named()
    assert {("pytorchjob", "runPolicy.schedulingPolicy.queue"), ("pytorch-operator", "watchNamespace"),
            ("pytorchjob", "resources.requests.cpu")} <= names  # the rules and the kinds both recorded theirs
    assert missing(names) == []


@pytest.mark.parametrize("wrong", [("pytorchjob", "queue"), ("pytorchjob", "output.storageClass"),
                                   ("pytorch-operator", "kueue.queueName"), ("pytorchjob", "image.tag.latest")])
def test_a_value_the_schema_lacks_is_caught(wrong):
    assert missing({wrong}) == [f"{wrong[0]}: {wrong[1]}"]
