"""diagnose on recorded API objects: the job's own state: restarts run out, pods outliving it, no pods."""
from __future__ import annotations

import pytest

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import event, job, only, pod, running, shot


def test_backoff_limit_reached():
    failed = job(conditions=("Created", "Running", "Failed"), run_policy={"backoffLimit": 3})
    failed["status"]["conditions"][-1].update(reason="BackoffLimitExceeded",
                                              message="PyTorchJob mnist has failed because it has reached the specified backoff limit")
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    statuses = [{"name": "pytorch", "image": "t", "restartCount": 3, "lastState": last, "state": last}]
    findings = rules.diagnose(shot(job=failed, pods=[pod("mnist-master-0", "Master", "Failed", statuses=statuses)]))
    assert [f.reason for f in findings][:2] == ["Error", "BackoffLimitExceeded"]  # the cause ranks before the limit
    assert "`runPolicy.backoffLimit` (now 3)" in findings[1].fix

def test_the_operators_echo_of_a_crash_looping_pod_is_told_once_by_the_pods_finding():
    """The training-operator repeats each failed or backed-off container of its pods as the job's
    Warning event; the pod's finding has the exit code and the log, so the echoes add nothing."""
    last = {"terminated": {"exitCode": 64, "reason": "Error"}}
    waiting = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}}
    statuses = [{"name": "pytorch", "image": "t", "restartCount": 2, "lastState": last, "state": waiting}]
    echoes = [event("PyTorchJob", "mnist", "CrashLoopBackOff", f"Error pod mnist-master-0 container pytorch waiting "
                                                               f"message: back-off {s}s restarting failed container")
              for s in (10, 20)]
    echoes.append(event("PyTorchJob", "mnist", "Error", "Error pod mnist-master-0 container pytorch exitCode: 64 "
                                                        "terminated message: "))
    refusal = event("PyTorchJob", "mnist", "FailedCreatePod", "Error creating: pods \"mnist-worker-1\" is forbidden")
    findings = rules.diagnose(shot(job=job(conditions=("Created", "Running")), events=[*echoes, refusal],
                                   pods=[pod("mnist-master-0", "Master", statuses=statuses)]))
    assert [(f.object, f.reason) for f in findings] == [("Pod/mnist-master-0", "CrashLoopBackOff"),
                                                        ("PyTorchJob/mnist", "FailedCreatePod")]


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


QUEUED = {"kueue.x-k8s.io/queue-name": "team-a"}
PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor default"}
ADMITTED = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]


@pytest.mark.parametrize(("conditions", "told"), [
    (None, [("error", "PyTorchJob/mnist", "NoWorkload")]),
    ([PENDING], [("warning", "Workload/pytorchjob-mnist-3c6f1", "Pending")]),
    (ADMITTED, [("warning", "Workload/pytorchjob-mnist-3c6f1", "AdmittedButSuspended")]),
], ids=["no-workload", "pending", "admitted"])
def test_a_suspended_job_in_a_kueue_queue_is_never_told_to_resume_itself(conditions, told):
    """Kueue suspends a queued job and resumes it on admission: `suspend: false` is Kueue's to set,
    so only what Kueue says is told, whatever state its Workload is in."""
    workload = None if conditions is None else {"metadata": {"name": "pytorchjob-mnist-3c6f1"},
                                                "status": {"conditions": conditions}}
    queued = job(labels=QUEUED, run_policy={"suspend": True})
    findings = rules.diagnose(shot(job=queued, pods=[], workload=workload))
    assert [(f.severity, f.object, f.reason) for f in findings] == told
    # Without the queue label the same job is suspended by hand, and told how to resume it.
    alone = rules.diagnose(shot(job=job(run_policy={"suspend": True}), pods=[]))
    assert [(f.severity, f.object, f.reason) for f in alone] == [("warning", "PyTorchJob/mnist", "Suspended")]
    assert alone[0].fix.startswith("set `runPolicy.suspend: false`")
