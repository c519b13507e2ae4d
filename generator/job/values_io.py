"""Reading values and manifests, writing them deterministically and atomically."""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from generator.errors import Finding, UserError

# libyaml's C loader when present: same results, several times faster.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_DEPTH = 100  # a pod template nests about 20 levels; anything deeper is not a job
MAX_NODES = 200_000


def load_yaml(text):
    return yaml.load(text, Loader=_Loader)


def _guard(text: str, source: str) -> None:
    """Refuse before building anything: aliases that expand past MAX_NODES (a few hundred bytes
    of them grow to gigabytes once rendered), nesting deep enough to exhaust the parser's stack."""
    depth = expanded = 0
    sizes: dict[str, int] = {}  # anchor -> nodes its value expands to
    open_nodes: list[list] = []  # [anchor, nodes so far] of each open mapping or sequence

    def grow(count: int) -> None:
        nonlocal expanded
        expanded += count
        if open_nodes:
            open_nodes[-1][1] += count
        if expanded > MAX_NODES:
            raise UserError([Finding("", f"expands to more than {MAX_NODES} YAML nodes"
                                     + (" through its aliases" if sizes else ""),
                                     hint="write the values out without anchors and aliases, or check how it was made")],
                            source=source)

    try:
        for event in yaml.parse(text, Loader=_Loader):  # libyaml's event stream is not recursive
            if isinstance(event, yaml.AliasEvent):
                grow(sizes.get(event.anchor, 1))
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor:
                    sizes[event.anchor] = 1
                grow(1)
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    _too_deep(event.start_mark.line + 1, source)
                expanded += 1
                open_nodes.append([event.anchor, 1])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                anchor, size = open_nodes.pop()
                if anchor:
                    sizes[anchor] = size
                if open_nodes:
                    open_nodes[-1][1] += size
    except yaml.YAMLError as exc:
        # libyaml caps nesting itself (deeper than ours), and its scanner may reach that cap while
        # looking ahead, before the parser hands us the level past ours: the same refusal.
        if "nesting depth" in str(getattr(exc, "problem", "")):
            _too_deep(exc.problem_mark.line + 1, source)
        return  # the loader reports syntax errors with their position


def _too_deep(line: int, source: str):
    raise UserError([Finding("", f"nests more than {MAX_DEPTH} levels deep (line {line})",
                             hint="a values file or manifest is never this deep; check how it was made")], source=source)


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


_STDIN: list = [None, ""]  # [the stream read, its text]


def read_text(path: str) -> str:
    if path == "-":  # a stream reads once: every later reader of the same stdin gets the same text
        import sys

        if _STDIN[0] is not sys.stdin:
            _STDIN[:] = [sys.stdin, sys.stdin.read()]
        return _STDIN[1]
    file = Path(path)
    if not file.exists():
        raise UserError([Finding("", "no such file", hint="check the path")], source=path)
    if file.is_dir():
        raise UserError([Finding("", "is a directory", hint="give a YAML file")], source=path)
    try:
        return file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError([Finding("", f"cannot be read ({exc})")], source=path) from None


def load_mapping(path: str, what: str = "values") -> dict:
    """One YAML mapping from a file; an empty file is an empty mapping."""
    text = read_text(path)
    _guard(text, path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                                 hint="fix the YAML syntax")], source=path) from None
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
    _guard(text, path)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                                 hint="fix the YAML syntax")], source=path) from None


def write_atomic(path: str, text: str) -> None:
    """All or nothing: a temp file beside the target, fsync, rename. A symlink is written
    through (the link stays), an existing file keeps its mode, a new one gets the umask's, and
    anything that is not a regular file is refused rather than replaced."""
    import stat
    import tempfile

    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        kind = "a directory" if target.is_dir() else "not a regular file (a device, pipe or socket)"
        raise UserError([Finding("", f"is {kind}, so it is not replaced",
                                 hint="name a file to write, or leave out -o to print to stdout")], source=path)
    if target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
