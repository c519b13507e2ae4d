"""Image references: REPOSITORY[:TAG][@sha256:DIGEST], split the way the chart's image values are."""
from __future__ import annotations

import re

_REFERENCE = re.compile(
    r"^(?P<repository>[^@\s]+?)(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[a-f0-9]{64}))?$")


def parse(reference: str) -> tuple[str, str, str] | None:
    """(repository, tag, digest) with "" for a missing part; None if it is not a reference."""
    match = _REFERENCE.match(reference or "")
    if not match:
        return None
    return match["repository"], match["tag"] or "", match["digest"] or ""
