"""Image references: REPOSITORY[:TAG][@sha256:DIGEST], split the way the chart's image values
are. The three parts' patterns are the values schema's own, so a reference the generator
accepts is one the chart accepts."""
from __future__ import annotations

import functools
import json
import re

from generator import paths


def _core(pattern: str) -> str:
    """A schema pattern without its anchors and its allowance for the empty string."""
    core = pattern.removeprefix("^").removesuffix("$")
    if core.startswith("(") and core.endswith(")?"):
        core = core[1:-2]
    return core


@functools.cache
def _reference() -> re.Pattern:
    schema = json.loads(paths.SCHEMA.read_text())
    image = schema["properties"]["image"]["properties"]
    repository = _core(schema["definitions"]["imageRepository"]["pattern"])
    return re.compile(f"^(?P<repository>{repository})(:(?P<tag>{_core(image['tag']['pattern'])}))?"
                      f"(@(?P<digest>{_core(image['digest']['pattern'])}))?$")


def parse(reference: str) -> tuple[str, str, str] | None:
    """(repository, tag, digest) with "" for a missing part; None if it is not a reference."""
    match = _reference().fullmatch(reference or "")
    if not match:
        return None
    return match["repository"], match["tag"] or "", match["digest"] or ""
