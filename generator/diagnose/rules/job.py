"""What the job itself says: restarts run out, pods that outlive it, its controller's refusals,
a deadline passed, a suspended job, a job that made no pods."""
from __future__ import annotations

from collections.abc import Iterator

from generator.cluster import client as api
from generator.diagnose.rules import common
from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, job_state, out_of_restarts, suspended
from generator.diagnose.rules.queues import QUEUE_LABEL
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import setting, value

BACKOFF_LIMIT, DEADLINE = value("runPolicy.backoffLimit"), value("runPolicy.activeDeadlineSeconds")
CLEAN_RUNNING, RESUME = setting("runPolicy.cleanPodPolicy", "Running"), setting("runPolicy.suspend", "false")
NO_PODS_AFTER = 60  # seconds a job may take to make its first pods


def backoff(shot: Snapshot) -> Iterator[Diagnosis]:
    kind = shot.job_kind
    limit = kind.restart_budget(shot.job)
    restarts = sum(s.get("restartCount", 0) for p in shot.pods for s in common.statuses(p, init=False))
    state, cond = job_state(shot)
    if state == "Failed" and out_of_restarts(shot, cond):
        reason, message, fix = kind.restarts_exhausted_finding(restarts, limit)
        yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", cond.get("reason") or reason, cond.get("message", "") or message,
                        fix)
    elif limit is not None and restarts and state not in api.TERMINAL and restarts >= max(1, int(limit) - 1):
        yield Diagnosis(WARNING, f"{shot.kind}/{shot.name}", "NearBackoffLimit",
                        f"{restarts} container restarts so far count against backoffLimit {limit}",
                        f"fix the failing replica before the job fails; {BACKOFF_LIMIT} (now {limit}) sets how many")


def leftovers(shot: Snapshot) -> Iterator[Diagnosis]:
    """Pods still running after the job ended, where the kind's cleanPodPolicy decides that."""
    state, _ = job_state(shot)
    if state not in api.TERMINAL or not shot.job_kind.clean_pod_policy:
        return
    running = [common.pod_name(p) for p in shot.pods if (p.get("status") or {}).get("phase") in ("Running", "Pending")
               and not p["metadata"].get("deletionTimestamp")]
    if running:
        policy = (shot.job.get("spec", {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        yield Diagnosis(WARNING, common.objects("Pod", running), "PodsOutliveJob",
                        f"the job {state.lower()} but {len(running)} of its pods still run and hold their resources "
                        f"(cleanPodPolicy {policy})",
                        f"set {CLEAN_RUNNING} so the operator deletes them when the job ends, or "
                        f"`kubectl delete pod -n {shot.namespace} {' '.join(sorted(running))}`")


def _restates_a_pod(event: dict, pods: set[str]) -> bool:
    words = (event.get("message") or "").split()
    return words[:2] == ["Error", "pod"] and len(words) > 3 and words[2] in pods and words[3] == "container"


def job(shot: Snapshot) -> Iterator[Diagnosis]:
    """What the job itself says: the controller's refusals, a suspended job, a job that made no pods."""
    kind = shot.job_kind
    state, cond = job_state(shot)
    this = f"{shot.kind}/{shot.name}"
    warnings = [(this, e) for e in shot.events_of(shot.kind, shot.name)]
    if kind.child_jobs:  # the child batch Jobs say why they made no pods (quota, admission)
        jobs = sorted({(e.get("involvedObject") or {}).get("name", "") for e in shot.events
                       if (e.get("involvedObject") or {}).get("kind") == "Job"})
        warnings += [(f"Job/{name}", e) for name in jobs for e in shot.events_of("Job", name)]
    pods = {p["metadata"]["name"] for p in shot.pods}
    for obj, event in warnings:
        # The operator echoes each unschedulable pod's condition as the job's event: scheduling() has it;
        # a Job's BackoffLimitExceeded is the failure the TrainJob's own condition reports; and it echoes
        # each of its pods' failed or backed-off containers ("Error pod P container C ..."), which the
        # pod's own finding tells with its exit code and log lines.
        if _restates_a_pod(event, pods):
            continue
        if event.get("type") == "Warning" and event.get("reason") not in ("Unschedulable", "BackoffLimitExceeded"):
            text = event.get("message", "")
            fix = ("lower the pods' requests or raise the namespace's ResourceQuota (`kubectl describe quota -n "
                   f"{shot.namespace}`)" if "exceeded quota" in text else "read the controller's message: it names the field")
            yield Diagnosis(ERROR, obj, event.get("reason", "Warning"), text, fix)
    said = (cond.get("reason", "") + " " + cond.get("message", "")).lower()
    if state == "Failed" and not out_of_restarts(shot, cond):
        fix = ("raise {} (now {}) or train less".format(
            DEADLINE, (shot.job.get("spec", {}).get("runPolicy") or {}).get("activeDeadlineSeconds"))
               if "deadline" in said else "the failed replica's finding has its exit code and log lines")
        yield Diagnosis(ERROR, this, cond.get("reason") or "Failed", cond.get("message") or "the job failed", fix)
    queued = (shot.job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    if suspended(shot) and not queued:
        field = ".".join(("spec", *kind.suspend_path))
        yield Diagnosis(WARNING, this, "Suspended", f"the job is suspended ({field}), so it has no pods",
                        f"set {RESUME} (or `kubectl patch {shot.kind.lower()} {shot.name} -n "
                        f"{shot.namespace} --type merge -p '{kind.suspend_patch()}'`)")
    elif not shot.pods and state not in api.TERMINAL and not suspended(shot) \
            and common.seconds_since(shot, shot.job["metadata"].get("creationTimestamp")) > NO_PODS_AFTER:
        reason, message, fix = kind.no_pods(shot.job, shot.runtime, shot.namespace)
        yield Diagnosis(ERROR, this, reason, message, fix)
