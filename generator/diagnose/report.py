"""Findings as people and scripts read them: a ranked table, or a stable JSON list."""
from __future__ import annotations

import json
import textwrap

from generator.diagnose.rules import ERROR, WARNING, Diagnosis
from generator.diagnose.snapshot import Snapshot

FIELDS = ("severity", "object", "reason", "message", "fix")
HEALTHY, FOUND, UNREADABLE = 0, 1, 2  # diagnose's exit statuses


def exit_code(findings: list[Diagnosis]) -> int:
    return FOUND if any(f.severity in (ERROR, WARNING) for f in findings) else HEALTHY


def as_json(findings: list[Diagnosis]) -> str:
    return json.dumps([{k: getattr(f, k) for k in FIELDS} for f in findings], indent=2) + "\n"


def as_table(shot: Snapshot, findings: list[Diagnosis]) -> str:
    state = _state(shot)
    head = f"{shot.kind} {shot.name} (namespace {shot.namespace}): {state}, {len(shot.pods)} pod(s)"
    if not findings:
        return head + "\nnothing wrong found\n"
    lines = [head, f"{len(findings)} finding(s), most important first:"]
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. [{f.severity}] {f.object}: {f.reason}")
        lines += [f"   {line}" for line in f.message.splitlines()]
        # Never within a word or at its hyphens: a command in a fix is copied as printed.
        lines += textwrap.wrap(f"fix: {f.fix}", width=100, initial_indent="   ", subsequent_indent="        ",
                               break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def one_line(f: Diagnosis) -> str:
    """The top finding under another command's output."""
    first = f.message.splitlines()[0] if f.message else ""
    return f"{f.severity}: {f.object}: {f.reason}: {first}\n  fix: {f.fix}"


def _state(shot: Snapshot) -> str:
    from generator.cluster import client as api

    return api.condition(shot.job)[0] or "Created"
