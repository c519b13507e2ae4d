"""Chart values named in fix texts. A fix names a value through `value()` or `setting()`, at
module level, so the names are recorded as the modules load and a test checks each against its
chart's schema: a misspelt or removed value cannot hide in prose."""
from __future__ import annotations

JOB_CHART, OPERATOR_CHART = "pytorchjob", "pytorch-operator"
NAMED: set[tuple[str, str]] = set()  # (chart, dotted path) of every value a fix text names


def value(path: str, chart: str = JOB_CHART) -> str:
    """`path` as a fix text shows it; `image.*` names every value under image."""
    NAMED.add((chart, path.removesuffix(".*")))
    return f"`{path}`"


def setting(path: str, to: str, chart: str = JOB_CHART) -> str:
    """`path: to`, a value with what to set it to."""
    NAMED.add((chart, path))
    return f"`{path}: {to}`"


def operator_value(path: str) -> str:
    return value(path, OPERATOR_CHART)
