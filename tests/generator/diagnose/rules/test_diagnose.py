"""A rule that breaks on a snapshot: the other rules still report, and the failure is a finding
that `diagnose`, `status` and the stuck hint show instead of dropping it in silence."""
from __future__ import annotations

from generator.diagnose import hint, report, rules
from tests.generator.diagnose.rules.shots import NOW, job, only, pod, shot


def crashing(shot):
    """A rule with a bug: it fails as its findings are read, as a generator rule does."""
    yield from shot.job["status"]["no such field"]


def test_a_broken_rule_is_a_finding_and_the_others_still_report(monkeypatch):
    monkeypatch.setattr(rules, "RULES", [crashing, *rules.RULES])
    failed = job(conditions=("Created", "Failed"))
    findings = rules.diagnose(shot(job=failed))
    broken = only(findings, "RuleFailed")
    assert broken.object == "rule/test_diagnose.crashing" and "KeyError: 'no such field'" in broken.message
    assert "report it as a bug" in broken.fix
    assert only(findings, "PyTorchJob" + "Failed").object == "PyTorchJob/mnist"  # the job rule still spoke
    assert report.exit_code(findings) == report.FOUND


def test_the_top_finding_of_a_healthy_job_with_a_broken_rule_is_that_rule(monkeypatch):
    monkeypatch.setattr(rules, "RULES", [*rules.RULES, crashing])
    running = shot(job=job(conditions=("Created", "Running")), pods=[pod("mnist-master-0", "Master")], now=NOW)
    monkeypatch.setattr(hint.snapshot, "collect", lambda c, name: running)
    top = hint.top(None, "mnist")
    assert top is not None and top.reason == "RuleFailed"
