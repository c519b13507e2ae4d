"""Queues and gangs: Kueue's admission of the job, and gang schedulers' PodGroups, which hold
every pod until all fit at once."""
from __future__ import annotations

from collections.abc import Iterator

from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, suspended
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import setting, value
from generator.job.importer import KUEUE_LABEL as QUEUE_LABEL

QUEUE_NAME, PRIORITY_CLASS = value("kueue.queueName"), value("priorityClassName")
REQUESTS, WORKERS = value("resources.requests"), value("topology.workers")
SUSPEND = setting("runPolicy.suspend", "true")
MIN_AVAILABLE, GANG_QUEUE = value("runPolicy.schedulingPolicy.minAvailable"), value("runPolicy.schedulingPolicy.queue")


def kueue(shot: Snapshot) -> Iterator[Diagnosis]:
    labels = shot.job["metadata"].get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    workload = shot.workload
    if workload is None:
        if queue and suspended(shot):
            integration = shot.job_kind.kueue_integration
            yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", "NoWorkload",
                            f"the job asks for Kueue queue {queue} and is suspended, but Kueue made no Workload for it",
                            f"check that Kueue runs with the {integration} integration enabled, or clear "
                            f"{QUEUE_NAME} to run without it")
        return
    name = f"Workload/{workload['metadata']['name']}"
    conditions = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
    admitted = conditions.get("Admitted", {}).get("status") == "True"
    reserved = conditions.get("QuotaReserved", {})
    if not admitted:
        message = reserved.get("message") or conditions.get("Admitted", {}).get("message") or "waiting for quota"
        if "LocalQueue" in message and ("doesn't exist" in message or "not found" in message):
            fix = f"set {QUEUE_NAME} (now {queue}) to a LocalQueue of namespace {shot.namespace} (`kubectl get localqueues -n {shot.namespace}`)"
        elif "inactive" in message:
            fix = f"the ClusterQueue behind the LocalQueue is inactive: ask its admin, or choose another {QUEUE_NAME}"
        else:
            fix = (f"the queue {queue} lacks quota for the whole job: lower {REQUESTS} or {WORKERS}, "
                   "or wait for quota; `kubectl get clusterqueues` shows usage")
        yield Diagnosis(WARNING, name, reserved.get("reason") or "NotAdmitted", f"not admitted by Kueue: {message}", fix)
    elif suspended(shot):
        yield Diagnosis(WARNING, name, "AdmittedButSuspended",
                        "admitted by Kueue, but the job is still suspended: Kueue has not resumed it",
                        f"check Kueue's controller log for the job; {QUEUE_NAME} must not be combined with "
                        f"{SUSPEND}")
    if conditions.get("Evicted", {}).get("status") == "True":
        evicted = conditions["Evicted"]
        yield Diagnosis(WARNING, name, evicted.get("reason", "Evicted"), f"evicted by Kueue: {evicted.get('message', '')}",
                        f"Kueue re-queues it; a higher {PRIORITY_CLASS} keeps it from being preempted")

def gang(shot: Snapshot) -> Iterator[Diagnosis]:
    """PodGroups: a gang scheduler holds every pod until all fit at once."""
    for scheduler, marker in (("volcano", "scheduling.k8s.io/group-name"), ("scheduler-plugins", "scheduling.x-k8s.io/pod-group")):
        wanted = [p for p in shot.pods if marker in (p["metadata"].get("annotations") or {})
                  or marker in (p["metadata"].get("labels") or {})
                  or (p.get("spec") or {}).get("schedulerName") == scheduler]
        if not wanted:
            continue
        if scheduler not in shot.pod_groups:
            instead = shot.job_kind.gang_opt_out
            yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", "PodGroupCRDMissing",
                            f"the pods wait for {scheduler}'s gang scheduling (PodGroup {shot.name}), but this cluster "
                            "serves no podgroups of that kind, so nothing will schedule them",
                            f"install {scheduler}, or {instead}")
            continue
        group = shot.pod_groups[scheduler]
        if group is None:
            maker = shot.job_kind.pod_group_maker
            yield Diagnosis(WARNING, f"{shot.kind}/{shot.name}", "PodGroupMissing",
                            f"the pods name PodGroup {shot.name}, which does not exist yet",
                            f"{maker} creates it; check its log and the job's events")
            continue
        phase = (group.get("status") or {}).get("phase", "")
        if phase in ("Pending", "Inqueue", "PreScheduling", "Scheduling", "Unknown", ""):
            said = [c.get("message", "") for c in (group.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Unschedulable" and c.get("status") == "True"]
            minimum = (group.get("spec") or {}).get("minMember")
            yield Diagnosis(WARNING, f"PodGroup/{shot.name}", f"PodGroup{phase or 'Pending'}",
                            f"the gang of {minimum} pods is {phase or 'Pending'}" + (f": {said[-1]}" if said else ""),
                            f"all its pods must fit at once: lower {REQUESTS} or {WORKERS}, or "
                            f"{MIN_AVAILABLE} for fewer at a time; the {GANG_QUEUE} must have room")
