"""From a snapshot to findings: each rule reads one kind of trouble the way an experienced user
reads events and statuses, and names the chart value that fixes it. The rules live by concern
(a node lost, a node under pressure, scheduling and claims, images, pods, queues and gangs, the
job's own state); what differs between job kinds they ask the snapshot's kind (generator/kinds).
Rules are listed in the order their findings rank within a severity: a cause before its symptoms."""
from __future__ import annotations

from generator.diagnose.rules import images, job, nodeloss, pods, pressure, queues, scheduling
from generator.diagnose.rules.common import ERROR, INFO, SEVERITY_ORDER, WARNING, Diagnosis, Rule
from generator.diagnose.snapshot import Snapshot

__all__ = ["ERROR", "INFO", "WARNING", "Diagnosis", "RULES", "diagnose"]

RULES: list[Rule] = [nodeloss.lost, pressure.nodes, pressure.evictions, scheduling.scheduling, images.images, pods.references,
                     scheduling.claims, queues.kueue, queues.gang, pods.replicas, job.backoff, pods.master, pods.istio,
                     job.leftovers, job.job, queues.kueue_v1]


def diagnose(shot: Snapshot) -> list[Diagnosis]:
    """Every rule's findings, most severe first, a rule's rank breaking ties; no repeats."""
    found: list[tuple[int, int, Diagnosis]] = []
    for rank, rule in enumerate(RULES):
        try:
            findings = list(rule(shot))
        except Exception as exc:  # a bug in one rule: the others still speak, and the bug is a finding
            findings = [broken(rule, exc)]
        found += [(SEVERITY_ORDER[d.severity], rank, d) for d in findings]
    seen, out = set(), []
    for _, _, d in sorted(found, key=lambda item: item[:2]):
        if (d.object, d.reason, d.message) not in seen:
            seen.add((d.object, d.reason, d.message))
            out.append(d)
    return out


def broken(rule: Rule, exc: Exception) -> Diagnosis:
    """A rule that failed on this snapshot, said so that it reaches a bug report."""
    name = f"{rule.__module__.rsplit('.', 1)[-1]}.{rule.__name__}"
    return Diagnosis(WARNING, f"rule/{name}", "RuleFailed",
                     f"the diagnose rule {name} failed on this job ({type(exc).__name__}: {exc}), so what it checks "
                     "went unchecked",
                     "report it as a bug of pytorchjob-kit with the snapshot (`diagnose NAME --save FILE`)")
