"""A chart's values.schema.json through jsonschema, each error turned into a Finding with a fix
(the job chart's unless told; the operator chart's for operator values)."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from generator import paths
from generator.errors import Finding
from generator.job import quantity


@functools.cache
def schema(chart: Path = paths.JOB_CHART) -> dict:
    return json.loads((chart / "values.schema.json").read_text())


def go_pattern(pattern: str) -> str:
    """A schema pattern as Helm's validator (Go's RE2) reads it: `$` is the end of the text, where
    Python's `$` also matches before a final newline (`namespace: "default\n"` would pass). The
    schemas' patterns use `$` only as that anchor."""
    return re.sub(r"(?<!\\)\$", r"\\Z", pattern)


def _pattern(validator, pattern: str, instance, _schema):
    import jsonschema

    if validator.is_type(instance, "string") and not re.search(go_pattern(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator(chart: Path = paths.JOB_CHART):
    import jsonschema

    strict = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _pattern})
    return strict(schema(chart))


def _path(error) -> str:
    parts = []
    for p in error.absolute_path:
        if isinstance(p, int):
            parts[-1:] = [f"{parts[-1]}[{p}]"] if parts else [f"[{p}]"]
        else:
            parts.append(str(p))
    return ".".join(parts)


def _resolve(node: dict, root: dict) -> dict:
    while "$ref" in node:
        node = root["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _finding(error, root: dict) -> list[Finding]:
    path = _path(error)
    node = _resolve(error.schema, root) if isinstance(error.schema, dict) else {}
    value = error.instance
    kind = error.validator
    if kind == "additionalProperties":
        import difflib

        known = sorted(node.get("properties", {}))
        out = []
        for key in sorted(set(value) - set(known)):
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys here: {', '.join(known)}"
            out.append(Finding(f"{path}.{key}" if path else key, "is not a known key", None, hint))
        return out
    if kind == "anyOf" and "quantity" in node.get("description", ""):
        return [Finding(path, "is not a valid Kubernetes quantity", value, quantity.hint_for(value))]
    if kind in ("anyOf", "oneOf") and node.get("description"):
        return [Finding(path, "is not one of the accepted forms", value, node["description"])]
    if kind == "enum":
        allowed = ", ".join(repr(v) if v != "" else '"" (unset)' for v in error.validator_value)
        return [Finding(path, "is not one of the allowed values", value, f"use one of {allowed}")]
    if kind == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        article = "an" if wanted[0] in "aeiou" else "a"
        return [Finding(path, f"must be {article} {wanted}", value,
                        f"write {article} {wanted}" + (" (quote numbers that are names)" if wanted == "string" else ""))]
    if kind in ("minimum", "maximum", "exclusiveMinimum"):
        word = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "above"}[kind]
        return [Finding(path, f"must be {word} {error.validator_value}", value, f"use a value {word} {error.validator_value}")]
    if kind == "pattern":
        description = node.get("description") or f"must match {error.validator_value}"
        return [Finding(path, "is not in the expected form", value, description)]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in (value or {})]
        return [Finding(f"{path}.{k}" if path else k, "is required", None, f"add {k}") for k in missing]
    if kind == "not":
        return [Finding(path, "is set through the chart's own values and cannot be passed through", None,
                        "use the matching top-level value instead")]
    if kind == "maxLength":
        return [Finding(path, f"is longer than {error.validator_value} characters", value, "shorten it")]
    if kind in ("minLength", "minItems", "minProperties"):
        return [Finding(path, "must not be empty", value, "give a value")]
    return [Finding(path, error.message, None)]


def check(values: dict, chart: Path = paths.JOB_CHART) -> list[Finding]:
    """Every schema violation in coalesced values, in path order, deduplicated."""
    findings: list[Finding] = []
    for error in sorted(_validator(chart).iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path]):
        if error.validator == "if":
            continue
        findings += _finding(error, schema(chart))
    seen, unique = set(), []
    for f in findings:
        key = (f.path, f.message)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique
