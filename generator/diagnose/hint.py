"""The top finding inside other commands: under `status`, and from `wait` and `logs --follow`
once a job has waited a minute without running."""
from __future__ import annotations

import time
from collections.abc import Callable

from generator.diagnose import report, rules, snapshot
from generator.errors import UserError

STUCK_SECONDS = 60.0


def top(c, name: str) -> rules.Diagnosis | None:
    """The most important error or warning; None when there is none or the job cannot be read."""
    return _top(c, name)[1]


def _top(c, name: str) -> tuple[str, rules.Diagnosis | None]:
    """The job's kind and its top finding; ("", None) when it cannot be read (the command that
    asks has read it, or says why not). A rule that breaks is a finding of its own."""
    try:
        shot = snapshot.collect(c, name)
    except UserError:
        return "", None
    findings = rules.diagnose(shot)
    return shot.kind, next((f for f in findings if f.severity in (rules.ERROR, rules.WARNING)), None)


class Stuck:
    """Tells the top finding once, when the job is still not running after STUCK_SECONDS."""

    def __init__(self, c, name: str, say: Callable[[str], None], after: float | None = None):
        self.c, self.name, self.say = c, name, say
        self.after = STUCK_SECONDS if after is None else after
        self.start = time.monotonic()
        self.told = False

    def check(self, state: str) -> None:
        if self.told or state not in ("", "Created") or time.monotonic() - self.start < self.after:
            return
        self.told = True
        kind, finding = _top(self.c, self.name)
        if finding:
            self.say(f"{kind.lower()} {self.name} has not started running after {self.after:g}s; "
                     f"`diagnose {self.name}` says:\n{report.one_line(finding)}")
