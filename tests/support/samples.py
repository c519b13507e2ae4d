"""The docs' sample outputs (cut out by tests/support/docs.py), compared with what the commands print. In a sample, a line that
is only `...` stands for any number of lines the sample leaves out, and `...` within a line for
text that differs between runs or machines (times, the last digits of an accuracy); everything
else must be printed as written, line for line."""
from __future__ import annotations

import re

ANY_LINES = r"(?:[^\n]*\n)*?"


def pattern(sample: str) -> re.Pattern:
    parts = []
    for line in sample.splitlines():
        if line.strip() == "...":
            parts.append(ANY_LINES)
            continue
        pieces = re.split(r"\s*\.\.\.", line)
        parts.append("[^\n]*".join(re.escape(p) for p in pieces) + r"\n")
    return re.compile("".join(parts))


def mismatch(sample: str, output: str) -> str:
    """'' when the output is the sample, else the first sample line the output does not bear out."""
    output = output if output.endswith("\n") else output + "\n"
    if pattern(sample).fullmatch(output):
        return ""
    lines = sample.splitlines()
    for n in range(len(lines), 0, -1):  # the longest head of the sample that still fits shows where it parts
        head = "\n".join(lines[:n])
        if pattern(head + "\n...").fullmatch(output):
            return f"after {lines[n - 1]!r} the output does not go on with {lines[n] if n < len(lines) else 'its end'!r}"
    return f"the output does not start as {lines[0]!r}"

