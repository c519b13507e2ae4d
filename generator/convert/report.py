"""What a conversion found, per job, and how it is told: a table for people, JSON for scripts."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from generator.errors import Finding

SAME, CHANGES, REFUSED = "same", "changes", "refused"


@dataclass(frozen=True)
class Change:
    """One change in meaning: the v1 field, what v1 did there, what v2 will do, what to change."""

    path: str
    v1: str
    v2: str
    fix: str

    def as_dict(self) -> dict:
        return {"path": self.path, "v1": self.v1, "v2": self.v2, "fix": self.fix}


@dataclass
class Conversion:
    source: str  # the file
    name: str  # the job's name ('' when the file could not be read as a job)
    namespace: str | None = None
    objects: list[dict] = field(default_factory=list)  # what is written: runtime first, then the TrainJob
    command: list[str] = field(default_factory=list)  # what every node starts (command and args)
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)  # why it was refused

    @property
    def outcome(self) -> str:
        if self.problems or not self.objects:
            return REFUSED
        return CHANGES if self.changes else SAME

    def refuse(self, problems: list[Finding]) -> Conversion:
        self.problems, self.objects = list(problems), []
        return self

    def as_dict(self) -> dict:
        return {"file": self.source, "job": self.name, "namespace": self.namespace, "outcome": self.outcome,
                "objects": [{"kind": o["kind"], "name": o["metadata"]["name"]} for o in self.objects],
                "command": self.command, "changes": [c.as_dict() for c in self.changes], "notes": self.notes,
                "problems": [p.as_dict() for p in self.problems]}


def describe(conversion: Conversion) -> str:
    """One job's report for people."""
    c = conversion
    head = f"{c.source}: PyTorchJob {c.name}" if c.name else f"{c.source}"
    if c.outcome == REFUSED:
        lines = [f"{head}: refused, " + (f"{len(c.problems)} problems:" if len(c.problems) > 1 else "1 problem:")]
        lines += [f"  - {p.render()}" for p in c.problems]
        return "\n".join(lines) + "\n"
    job, *others = [f"{o['kind']} {o['metadata']['name']}" for o in reversed(c.objects)]
    made = job + (f" with {', '.join(others)}" if others else "")
    verdict = (f"{len(c.changes)} change(s) in meaning to accept" if c.changes else "no change in meaning")
    lines = [f"{head} -> {made}: {verdict}", f"  every node runs: {shlex.join(c.command)}"]
    for i, change in enumerate(c.changes, 1):
        lines += [f"  {i}. {change.path}", f"     v1:  {change.v1}", f"     v2:  {change.v2}", f"     fix: {change.fix}"]
    lines += [f"  note: {note}" for note in c.notes]
    return "\n".join(lines) + "\n"


def summary(conversions: list[Conversion], accepted: bool, written: bool, where: str) -> str:
    counts = {k: sum(c.outcome == k for c in conversions) for k in (SAME, CHANGES, REFUSED)}
    parts = [f"{counts[SAME]} without change", f"{counts[CHANGES]} with changes in meaning", f"{counts[REFUSED]} refused"]
    text = f"{len(conversions)} job(s): " + ", ".join(parts) + "\n"
    if written:
        return text + f"wrote the TrainJobs to {where}" + (" (changes accepted)" if counts[CHANGES] else "") + "\n"
    if counts[REFUSED]:
        return text + "nothing written: fix the refused jobs' problems above, or leave those jobs out\n"
    if counts[CHANGES] and not accepted:
        return text + "nothing written: review the changes, adapt the training code or values, then rerun with --accept\n"
    return text

