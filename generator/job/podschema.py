"""Kubernetes' strict pod schema, as kubernetes-validate ships it, decided without jsonschema
when a pod template passes.

Loading kubernetes-validate (jsonschema, its format checkers, referencing, the 1.4 MB of
definitions) costs more than the rest of `import`. The schema a pod template is checked against
uses a handful of keywords (type, enum, properties, additionalProperties, required, items,
oneOf, $ref), which `passes` decides here with jsonschema's meaning of each. It answers only
"passes" or "not known to pass": a template it does not pass, or a schema with anything else in
it, goes to kubernetes-validate, whose error is the one reported. So every report reads as
before, and only templates that pass take the short way.

What the template is checked against, the definitions it reaches, is read once from
kubernetes-validate's files and kept in the user's cache (paths.cache_dir), keyed by those
files; without a writable cache it is read every time."""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import zlib
from pathlib import Path

from generator import files, paths

KUBE_VERSION = "1.33.0"  # the release kubernetes-validate checks against (generator.kinds.pytorchjob.importer)
_FORMAT = 1  # of the cached file; bump when what is kept changes

# Keywords that only annotate in Draft 2020-12 as kubernetes-validate runs it (no format checker).
_ANNOTATIONS = {"description", "format", "$schema", "$id"}
_ROOT_REF = re.compile(r"^/api/_definitions\.json#/\$defs/([^/~%]+)$")
_DEFS_REF = re.compile(r"^#/\$defs/([^/~%]+)$")
_UNRESOLVED = "\x00unresolved"  # a $ref this module does not follow: the template goes the long way


class _Unknown(Exception):
    """The schema says something this module does not decide."""


def passes(obj: dict, kind: str = "PodTemplate", api_version: str = "v1") -> bool:
    """True only if kubernetes-validate would accept `obj` (strict, KUBE_VERSION); False when it
    would not or when that is not known here."""
    schema = _schema(kind.lower(), api_version)
    if schema is None:
        return False
    try:
        return _valid(obj, schema["root"], schema["defs"])
    except (_Unknown, RecursionError):
        return False


@functools.cache
def _schema(kind: str, api_version: str) -> dict | None:
    folder = _folder()
    if folder is None or "/" in api_version:
        return None
    files = [folder / f"{kind}-{api_version}.json", folder / "_definitions.json"]
    try:
        stats = [f.stat() for f in files]
    except OSError:
        return None
    key = "-".join(f"{s.st_size}.{s.st_mtime_ns}" for s in stats)
    # one file per installed kubernetes-validate, so two venvs do not take turns rewriting it
    where = zlib.crc32(str(folder).encode())
    cached = paths.cache_dir() / "podschema" / f"{folder.name}-{kind}-{api_version}-{_FORMAT}-{where:08x}.json"
    try:
        data = json.loads(cached.read_text())
        if data.get("key") == key and str(folder) == data.get("folder"):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    try:
        data = {"key": key, "folder": str(folder), **_subset(*(json.loads(f.read_text()) for f in files))}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _store(cached, data)
    return data


def _folder() -> Path | None:
    """kubernetes-validate's schema folder for KUBE_VERSION, strict, chosen as it chooses it:
    the newest release whose major.minor is not above ours."""
    spec = importlib.util.find_spec("kubernetes_validate")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    try:
        names = [p.name for p in root.iterdir()]
    except OSError:
        return None
    versions = {re.sub(r"^v([^-]*).*", r"\1", n) for n in names if re.match(r"^v([^-]*).*", n)}
    if not versions or not all(re.fullmatch(r"\d+(\.\d+)*", v) for v in versions):
        return None  # an order only packaging's Version knows; leave it to kubernetes-validate

    def major_minor(v: str) -> str:
        return re.sub(r"^(\d+\.\d+).*", r"\1", v)

    ordered = sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    if major_minor(KUBE_VERSION) > ordered[-1]:
        return None
    chosen = [v for v in ordered if major_minor(v) <= major_minor(KUBE_VERSION)]
    folder = root / f"v{chosen[-1]}-local-strict" if chosen else None
    return folder if folder and folder.is_dir() else None


def _subset(root: dict, definitions: dict) -> dict:
    """The root schema and the definitions it reaches, without annotations, each $ref reduced
    to a definition's name."""
    defs_in = definitions["$defs"]
    defs: dict = {}
    pending: list[str] = []

    def strip(node, refs: re.Pattern):
        if isinstance(node, list):
            return [strip(n, refs) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key in _ANNOTATIONS or key.startswith("x-kubernetes-"):
                continue
            if key == "$ref":
                match = refs.match(value) if isinstance(value, str) else None
                name = match.group(1) if match and match.group(1) in defs_in else _UNRESOLVED
                if name != _UNRESOLVED and name not in defs and name not in pending:
                    pending.append(name)
                out[key] = name
            elif key == "properties" and isinstance(value, dict):
                out[key] = {k: strip(v, refs) for k, v in value.items()}
            elif key == "enum":
                out[key] = value
            else:
                out[key] = strip(value, refs)
        return out

    top = strip(root, _ROOT_REF)
    while pending:
        name = pending.pop()
        defs[name] = None  # taken, so a cycle does not queue it again
        defs[name] = strip(defs_in[name], _DEFS_REF)
    return {"root": top, "defs": defs}


def _store(target: Path, data: dict) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        files.write_whole(target, json.dumps(data, separators=(",", ":")))
    except OSError:
        pass  # a read-only checkout: read the definitions each time


# jsonschema's Draft 2020-12 type checker, for the values YAML and JSON give; anything else
# (a date, bytes) is not decided here.
_PLAIN = (dict, list, str, type(None), bool, int, float)


def _is_type(value, name: str) -> bool:
    if type(value) not in _PLAIN:
        raise _Unknown(type(value))
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and value.is_integer())
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    raise _Unknown(name)


_KNOWN = {"type", "enum", "properties", "additionalProperties", "required", "items", "oneOf", "$ref"}


def _valid(value, schema, defs: dict) -> bool:
    if schema is True or schema == {}:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict) or not _KNOWN.issuperset(schema):
        raise _Unknown(schema)
    if "$ref" in schema:
        target = defs.get(schema["$ref"])
        if target is None:
            raise _Unknown(schema["$ref"])
        if not _valid(value, target, defs):
            return False
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            return False
    if "enum" in schema:
        # jsonschema's equality tells True from 1 and 1.0 from "1"; strings and null compare plainly.
        if not (value is None or type(value) is str):
            raise _Unknown(value)
        if value not in schema["enum"]:
            return False
    if "oneOf" in schema:
        if sum(_valid(value, s, defs) for s in schema["oneOf"]) != 1:
            return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if any(key not in value for key in schema.get("required", ())):
            return False
        for key, item in value.items():
            if key in properties:
                if not _valid(item, properties[key], defs):
                    return False
            elif "additionalProperties" in schema and not _valid(item, schema["additionalProperties"], defs):
                return False
    if isinstance(value, list) and "items" in schema:
        if not all(_valid(item, schema["items"], defs) for item in value):
            return False
    return True
