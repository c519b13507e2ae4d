"""The limits on hostile input, applied before a YAML file is built into objects: its size (read
no further than the cap), its nesting and what its aliases expand to, and the tag `!`."""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from generator.errors import Finding, UserError
from generator.job.goyaml import Loader

MAX_DEPTH = 100  # a pod template nests about 20 levels; anything deeper is not a job
MAX_NODES = 200_000
MAX_BYTES = 3 * 1024 * 1024  # the API server's own cap on a request body; no job or values file comes near it


_STDIN: list = [None, ""]  # [the stream read, its text]


def _too_large(source: str, size: int | None) -> UserError:
    said = (f"is {size} bytes, more than the {MAX_BYTES}" if size else f"is larger than the {MAX_BYTES} bytes")
    return UserError([Finding("", f"{said} the Kubernetes API server takes in one request",
                              hint="split the file, or check that it is the one you meant")], source=source)


def _read_capped(stream, source: str) -> str:
    """At most MAX_BYTES bytes of a binary stream as UTF-8 text: one byte more is refused without
    reading on, so a huge file or an endless device costs no more memory than the cap."""
    data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        try:
            size = os.fstat(stream.fileno()).st_size if stream.seekable() else None
        except (OSError, ValueError):
            size = None
        raise _too_large(source, size)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError([Finding("", f"is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                                 hint="save it as UTF-8, the encoding YAML files for Kubernetes use")],
                        source=source) from None


def read_text(path: str) -> str:
    if path == "-":  # a stream reads once: every later reader of the same stdin gets the same text
        import sys

        if _STDIN[0] is not sys.stdin:
            _STDIN[:] = [sys.stdin, _read_capped(sys.stdin.buffer, "-")]
        return _STDIN[1]
    file = Path(path)
    if not file.exists():
        raise UserError([Finding("", "no such file", hint="check the path")], source=path)
    if file.is_dir():
        raise UserError([Finding("", "is a directory", hint="give a YAML file")], source=path)
    try:
        with open(file, "rb") as stream:
            return _read_capped(stream, path)
    except OSError as exc:
        raise UserError([Finding("", f"cannot be read ({exc})")], source=path) from None


def guard(text: str, source: str) -> None:
    """Refuse before building anything: aliases that expand past MAX_NODES (a few hundred bytes
    of them grow to gigabytes once rendered), nesting deep enough to exhaust the parser's stack,
    and the tag `!`. (read_text has refused what is larger than the API server takes.)"""
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
        for event in yaml.parse(text, Loader=Loader):  # libyaml's event stream is not recursive
            if isinstance(event, yaml.AliasEvent):
                grow(sizes.get(event.anchor, 1))
            elif isinstance(event, yaml.ScalarEvent):
                if event.tag == "!":  # both YAML parsers resolve `! 3` as if plain (3); go-yaml keeps the text
                    raise UserError([Finding("", f"line {event.start_mark.line + 1}: the tag `!` makes Helm read "
                                             f"{event.value!r} as text, where other readers take it as written plain",
                                             hint=f'quote the value instead: "{event.value}"')], source=source)
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
