"""diagnose on recorded API objects: the job's own state: restarts run out, pods outliving it, no pods."""
from __future__ import annotations

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import job, only, pod, running, shot


def test_backoff_limit_reached():
    failed = job(conditions=("Created", "Running", "Failed"), run_policy={"backoffLimit": 3})
    failed["status"]["conditions"][-1].update(reason="BackoffLimitExceeded",
                                              message="PyTorchJob mnist has failed because it has reached the specified backoff limit")
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    statuses = [{"name": "pytorch", "image": "t", "restartCount": 3, "lastState": last, "state": last}]
    findings = rules.diagnose(shot(job=failed, pods=[pod("mnist-master-0", "Master", "Failed", statuses=statuses)]))
    assert [f.reason for f in findings][:2] == ["Error", "BackoffLimitExceeded"]  # the cause ranks before the limit
    assert "`runPolicy.backoffLimit` (now 3)" in findings[1].fix

def test_near_the_backoff_limit_warns():
    statuses = [running("pytorch", restarts=2)]
    findings = rules.diagnose(shot(job=job(conditions=("Created", "Running"), run_policy={"backoffLimit": 3}),
                                   pods=[pod("mnist-master-0", "Master", statuses=statuses)]))
    assert only(findings, "NearBackoffLimit").severity == "warning"

def test_pods_that_outlive_a_finished_job():
    done = job(conditions=("Created", "Running", "Succeeded"), run_policy={"cleanPodPolicy": "None"})
    found = only(rules.diagnose(shot(job=done)), "PodsOutliveJob")
    assert "3 of its pods still run" in found.message and "`runPolicy.cleanPodPolicy: Running`" in found.fix

def test_a_job_with_no_pods_and_no_operator():
    found = only(rules.diagnose(shot(pods=[])), "NoPods")
    assert "no operator is reconciling it" in found.message
