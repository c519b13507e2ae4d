"""Reading values and manifests, writing them deterministically and atomically."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from generator.errors import Finding, UserError

MAX_DEPTH = 100  # a pod template nests about 20 levels; anything deeper is not a job
MAX_NODES = 200_000
MAX_BYTES = 3 * 1024 * 1024  # the API server's own cap on a request body; no job or values file comes near it


class Refused(yaml.YAMLError):
    """What Helm would read differently from what the file seems to say, with where it is."""

    def __init__(self, problem: str, line: int, hint: str):
        super().__init__(problem)
        self.problem, self.line, self.hint = problem, line, hint


# Helm (sigs.k8s.io/yaml over go-yaml v2), kubectl and the API server read a plain scalar by these
# rules, not by PyYAML's YAML 1.1 ones: `1:30` stays a string (not 90), `010` and `0o10` are 8,
# `y`/`n` are booleans, `1e3` is a number, dates stay strings. Values are read their way so that
# what validate accepts is what `helm install -f` renders.
_BOOLS = {**dict.fromkeys("y Y yes Yes YES on On ON true True TRUE".split(), True),
          **dict.fromkeys("n N no No NO off Off OFF false False FALSE".split(), False)}
_NULLS = {"", "~", "null", "Null", "NULL"}
GO_PLAIN = "tag:pytorchjob-kit,2026:plain"  # a plain scalar, left for go_scalar to read
_INFINITE = {f"{sign}.{word}" for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")} | {".nan", ".NaN", ".NAN"}
_GO_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO]?[0-7]*|0[bB][01]+|[1-9][0-9]*)$")


def go_scalar(text: str, line: int):
    """A plain (unquoted) scalar as go-yaml v2 resolves it."""
    if text in _BOOLS:
        return _BOOLS[text]
    if text in _NULLS:
        return None
    if text in _INFINITE:
        raise Refused(f"{text} is not a number JSON can hold, and Helm refuses it", line,
                      "write a finite number, or quote it to mean the string")
    if text[:1] in "+-.0123456789":
        plain = text.replace("_", "")
        if _GO_INT.match(plain):
            sign, digits = (-1 if plain[0] == "-" else 1), plain.lstrip("+-")  # Go's ParseInt, base 0
            base = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}.get(digits[:2])
            if base:
                return sign * int(digits[2:], base)
            return sign * int(digits, 8 if len(digits) > 1 and digits[0] == "0" else 10)
        if _GO_FLOAT.match(plain):
            number = float(plain)
            return int(number) if number.is_integer() and "." not in plain and "e" not in plain.lower() else number
    return text


class _Resolver(yaml.resolver.BaseResolver):
    """Plain scalars get a tag of their own, resolved by go_scalar; quoted ones stay strings."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return "tag:yaml.org,2002:merge" if value == "<<" else GO_PLAIN
        return super().resolve(kind, value, implicit)


class _Constructor(yaml.constructor.SafeConstructor):
    def construct_go_plain(self, node):
        return go_scalar(node.value, node.start_mark.line + 1)

    def construct_mapping(self, node, deep=False):
        """Refuse what Helm would quietly misread: a key given twice (Helm keeps the last), and a
        key that is not a string (Helm turns `n:` into "false", `1:` into "1")."""
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                read_as = "null" if key is None else f"the {'boolean' if isinstance(key, bool) else type(key).__name__} {str(key).lower()}"
                raise Refused(f"key {key_node.value!r} is read by Helm as {read_as}, not as the text {key_node.value!r}",
                              line, f'quote it: "{key_node.value}":')
            if key in seen:
                raise Refused(f"key {key!r} is given twice, on lines {seen[key]} and {line}; Helm would keep the "
                              "second and drop the first in silence", line, "keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Constructor.add_constructor(GO_PLAIN, _Constructor.construct_go_plain)
_Constructor.add_constructor("tag:yaml.org,2002:merge", lambda _loader, node: node.value)  # `<<` as a value is text

# libyaml's C parser when present (several times faster), with the resolution above.
_Parser = getattr(yaml, "CParser", None)
if _Parser is not None:
    class _Loader(_Parser, _Constructor, _Resolver):
        def __init__(self, stream):
            _Parser.__init__(self, stream)
            _Constructor.__init__(self)
            _Resolver.__init__(self)
else:  # pragma: no cover - PyYAML built without libyaml
    class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                  _Constructor, _Resolver):
        def __init__(self, stream):
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            _Resolver.__init__(self)


def load_yaml(text):
    return yaml.load(text, Loader=_Loader)


def _guard(text: str, source: str) -> None:
    """Refuse before building anything: aliases that expand past MAX_NODES (a few hundred bytes
    of them grow to gigabytes once rendered), nesting deep enough to exhaust the parser's stack,
    and files larger than the API server would take."""
    size = len(text.encode())
    if size > MAX_BYTES:
        raise UserError([Finding("", f"is {size} bytes, more than the {MAX_BYTES} the Kubernetes API server takes in "
                                     "one request", hint="split the file, or check that it is the one you meant")],
                        source=source)
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


def dump_all(objects: list) -> str:
    """Several objects as one YAML stream, each a document of its own."""
    return "".join(f"---\n{dump(o)}" for o in objects)


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
    _guard(text, path)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise _unreadable(exc, path) from None


def _unreadable(exc: yaml.YAMLError, path: str) -> UserError:
    if isinstance(exc, Refused):
        return UserError([Finding("", f"line {exc.line}: {exc.problem}", hint=exc.hint)], source=path)
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
    return UserError([Finding("", f"is not valid YAML ({getattr(exc, 'problem', exc)} at {where})",
                              hint="fix the YAML syntax")], source=path)
