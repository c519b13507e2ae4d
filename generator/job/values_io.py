"""Reading values and manifests, writing them deterministically and atomically."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from generator.errors import Finding, UserError

# libyaml's C loader when present: same results, several times faster.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text):
    return yaml.load(text, Loader=_Loader)


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, no aliases: output a reviewer can diff."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data):
        return True


def _str(dumper, data):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)


def read_text(path: str) -> str:
    if path == "-":
        import sys
        return sys.stdin.read()
    file = Path(path)
    if not file.exists():
        raise UserError(f"{path}: no such file", source="")
    if file.is_dir():
        raise UserError(f"{path}: is a directory; give a YAML file", source="")
    try:
        return file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot be read ({exc})", source="") from None


def load_mapping(path: str, what: str = "values") -> dict:
    """One YAML mapping from a file; an empty file is an empty mapping."""
    text = read_text(path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                                 hint="fix the YAML syntax")], source=path) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError([Finding("", f"must be a YAML mapping of {what}", type(data).__name__,
                                 hint="start the file with top-level keys such as topology: or job:")], source=path)
    return data


def load_documents(path: str) -> list:
    text = read_text(path)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                                 hint="fix the YAML syntax")], source=path) from None


def write_atomic(path: str, text: str) -> None:
    """All or nothing: a temp file beside the target, fsync, rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
