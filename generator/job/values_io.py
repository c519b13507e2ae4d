"""Reading values and manifests (through input_caps.py's limits, by goyaml.py's rules), writing
them deterministically and atomically."""
from __future__ import annotations

import yaml

from generator.errors import Finding, UserError
from generator.job.goyaml import Loader, Refused, load_yaml, resolve
from generator.job.input_caps import guard, read_text


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, no aliases: output a reviewer can diff."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data):
        return True


def _str(dumper, data):
    # PyYAML quotes what YAML 1.1 would read as another type; go-yaml v2 reads more (`y`, `0o10`,
    # `1e3`, `08`) as booleans and numbers, so those are quoted too.
    style = "|" if "\n" in data else "'" if resolve(data)[0] not in ("str", "timestamp") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)


def dump_all(objects: list) -> str:
    """Several objects as one YAML stream, each a document of its own."""
    return "".join(f"---\n{dump(o)}" for o in objects)


def load_mapping(path: str, what: str = "values") -> dict:
    """One YAML mapping from a file; an empty file is an empty mapping."""
    text = read_text(path)
    guard(text, path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _unreadable(exc, path) from None
    return mapping_of([] if data is None else [data], path, what)


def mapping_of(documents: list, path: str, what: str = "values") -> dict:
    """The one mapping of a file's documents (load_documents), so the file is read only once."""
    if not documents:
        return {}
    if len(documents) > 1:
        raise UserError([Finding("", f"holds {len(documents)} YAML documents", hint=f"give one mapping of {what}")],
                        source=path)
    data = documents[0]
    if not isinstance(data, dict):
        raise UserError([Finding("", f"must be a YAML mapping of {what}", type(data).__name__,
                                 hint="start the file with top-level keys such as topology: or job:")], source=path)
    return data


def load_documents(path: str) -> list:
    text = read_text(path)
    guard(text, path)
    return documents_of(text, path)


def documents_of(text: str, source: str) -> list:
    """The documents of a YAML stream (empty ones left out), refused with the line where Helm
    would read them otherwise."""
    try:
        return [d for d in yaml.load_all(text, Loader=Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise _unreadable(exc, source) from None


def _unreadable(exc: yaml.YAMLError, path: str) -> UserError:
    if isinstance(exc, Refused):
        return UserError([Finding("", f"line {exc.line}: {exc.problem}", hint=exc.hint)], source=path)
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
    return UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                              hint="fix the YAML syntax")], source=path)
