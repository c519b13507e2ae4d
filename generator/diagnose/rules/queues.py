"""Queues and gangs: Kueue's admission of the job, and gang schedulers' PodGroups, which hold
every pod until all fit at once."""
from __future__ import annotations

import re
from collections.abc import Iterator

from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, ended, suspended
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import setting, value
from generator.job.importer import KUEUE_LABEL as QUEUE_LABEL

QUEUE_NAME, PRIORITY_CLASS = value("kueue.queueName"), value("priorityClassName")
REQUESTS, WORKERS = value("resources.requests"), value("topology.workers")
SUSPEND = setting("runPolicy.suspend", "true")
MIN_AVAILABLE, GANG_QUEUE = value("runPolicy.schedulingPolicy.minAvailable"), value("runPolicy.schedulingPolicy.queue")


def kueue(shot: Snapshot) -> Iterator[Diagnosis]:
    """Why Kueue holds the job, from what Kueue wrote: the Workload's QuotaReserved and Admitted
    conditions, and the quota and usage of the ClusterQueue behind the job's LocalQueue."""
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
    if not admitted and not ended(shot):
        yield _not_admitted(shot, name, queue, reserved or conditions.get("Admitted", {}))
    elif admitted and suspended(shot) and not ended(shot):
        where = _cluster_queue_name(shot, workload)
        yield Diagnosis(WARNING, name, "AdmittedButSuspended",
                        f"admitted by Kueue (ClusterQueue {where}), but the {shot.kind} is still suspended: Kueue "
                        "resumes an admitted job itself, and has not resumed this one",
                        f"Kueue's controller log says why (`kubectl logs -n kueue-system "
                        f"deploy/kueue-controller-manager | grep {shot.name}`); {QUEUE_NAME} must not be combined "
                        f"with {SUSPEND}")
    if conditions.get("Evicted", {}).get("status") == "True":
        evicted = conditions["Evicted"]
        yield Diagnosis(WARNING, name, evicted.get("reason", "Evicted"), f"evicted by Kueue: {evicted.get('message', '')}",
                        f"Kueue re-queues it; a higher {PRIORITY_CLASS} keeps it from being preempted")


# What Kueue's flavor assigner writes when a pod set does not fit (pkg/scheduler/flavorassigner).
UNUSED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")
CAPACITY = re.compile(r"insufficient quota for (\S+) in flavor (\S+), .*> maximum capacity \((\S+)\)")
UNCOVERED = re.compile(r"resource (\S+) unavailable in ClusterQueue")


def _not_admitted(shot: Snapshot, name: str, queue: str | None, cond: dict) -> Diagnosis:
    message = cond.get("message") or "Kueue has not considered it yet"
    reason = cond.get("reason") or "NotAdmitted"
    said = f"not admitted by Kueue: {message}"
    cq = _cluster_queue_name(shot, shot.workload)
    if re.search(r"^LocalQueue \S+ doesn't exist", message):
        return Diagnosis(ERROR, name, reason, said,
                         f"no LocalQueue {queue} in namespace {shot.namespace}: set {QUEUE_NAME} (now {queue}) to one "
                         f"that exists (`kubectl get localqueues -n {shot.namespace}`), or ask your admin for one; the "
                         "job waits, suspended, until it exists")
    missing = re.search(r"^ClusterQueue (\S+) doesn't exist", message)
    if missing:
        return Diagnosis(ERROR, name, reason, said,
                         f"LocalQueue {queue} points at ClusterQueue {missing.group(1)}, which does not exist: ask "
                         f"your admin to create it, or choose another {QUEUE_NAME}")
    if "inactive" in message or "is stopped" in message:
        return Diagnosis(ERROR, name, reason, said,
                         f"the queue is not accepting jobs (`kubectl describe clusterqueue {cq}` says why, such as a "
                         f"missing ResourceFlavor): ask its admin, or choose another {QUEUE_NAME}")
    uncovered = UNCOVERED.search(message)
    if uncovered:
        return Diagnosis(ERROR, name, reason, said,
                         f"ClusterQueue {cq} has no quota for {uncovered.group(1)} at all, so the job is never "
                         f"admitted there: choose a {QUEUE_NAME} whose ClusterQueue covers it, or drop it from "
                         f"{REQUESTS}")
    never = CAPACITY.search(message)
    if never:
        resource, _, total = never.groups()
        return Diagnosis(ERROR, name, reason, said,
                         f"the job asks for more {resource} than ClusterQueue {cq}'s whole quota ({total}), so it is "
                         f"never admitted: lower {REQUESTS} or {WORKERS}, or ask for a larger nominalQuota")
    short = UNUSED.search(message)
    if short:
        resource, flavor, more = short.groups()
        held = _held(shot.cluster_queue, flavor, resource)
        return Diagnosis(WARNING, name, reason, said,
                         f"ClusterQueue {cq} lacks {more} {resource} of quota{held}: the job starts, all its pods at "
                         f"once, when admitted jobs finish; to start sooner lower {REQUESTS} or {WORKERS}, or ask for "
                         f"more nominalQuota (`kubectl get clusterqueue {cq} -o yaml` shows quota and usage)")
    return Diagnosis(WARNING, name, reason, said,
                     f"`kubectl describe clusterqueue {cq}` shows the queue's quota and usage; lower {REQUESTS} or "
                     f"{WORKERS} if the job does not fit")


def _cluster_queue_name(shot: Snapshot, workload: dict | None) -> str:
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    local = ((shot.local_queue or {}).get("spec") or {}).get("clusterQueue")
    return admission.get("clusterQueue") or local or "of the job's LocalQueue"


def _held(cluster_queue: dict | None, flavor: str, resource: str) -> str:
    """`, whose quota is Q with U reserved by N admitted workloads`, from the ClusterQueue; '' unread."""
    if not cluster_queue:
        return ""
    quota = next((r.get("nominalQuota") for g in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
                  for f in g.get("flavors") or [] if f.get("name") == flavor
                  for r in f.get("resources") or [] if r.get("name") == resource), None)
    status = cluster_queue.get("status") or {}
    used = next((r.get("total") for f in status.get("flavorsReservation") or [] if f.get("name") == flavor
                 for r in f.get("resources") or [] if r.get("name") == resource), None)
    if quota is None:
        return ""
    count = status.get("reservingWorkloads", status.get("admittedWorkloads", 0))
    return (f" (its quota is {quota} {resource}, {used or 0} of it held by {count} admitted "
            f"workload{'s' if count != 1 else ''})")


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
