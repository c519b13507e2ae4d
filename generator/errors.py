"""Findings and the one error type the CLI turns into a message without a traceback."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One problem: where it is, what was there, and what to do about it."""

    path: str
    message: str
    value: object = None
    hint: str = ""

    def render(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.value is not None:
            text += f" (got {format_value(self.value)})"
        if self.hint:
            text += f"; {self.hint}"
        return text

    def as_dict(self) -> dict:
        return {"path": self.path, "message": self.message, "value": self.value, "hint": self.hint}


def format_value(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


class UserError(Exception):
    """Bad input. The CLI prints the findings and exits 1; no traceback unless --debug."""

    def __init__(self, findings: list[Finding] | str, source: str = ""):
        if isinstance(findings, str):
            findings = [Finding("", findings)]
        self.findings = findings
        self.source = source
        super().__init__(self.describe())

    def describe(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if len(self.findings) == 1:
            return head + self.findings[0].render()
        lines = [f"{head}{len(self.findings)} problems:"]
        lines += [f"  - {f.render()}" for f in self.findings]
        return "\n".join(lines)
