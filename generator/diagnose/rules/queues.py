"""Queues and gangs: Kueue's admission of the job, and gang schedulers' PodGroups, which hold
every pod until all fit at once."""
from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal

from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, ended, suspended
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import value
from generator.job.imports import KUEUE_LABEL as QUEUE_LABEL

QUEUE_NAME, PRIORITY_CLASS = value("kueue.queueName"), value("priorityClassName")
REQUESTS, WORKERS, GPUS = value("resources.requests"), value("topology.workers"), value("resources.gpus")
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
                        "resumes an admitted job itself, and has not resumed this one yet",
                        f"Kueue retries until its update of the job goes through; most often a webhook of the "
                        f"{shot.kind}'s own controller is not answering (its pod is not running) and refuses that "
                        f"update; Kueue's log names it: `kubectl logs -n kueue-system deploy/kueue-controller-manager "
                        f"| grep '\"name\":\"{shot.name}\"'`")
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
                         f"admitted there: choose a {QUEUE_NAME} whose ClusterQueue covers it, or "
                         + (f"set {GPUS} to 0" if uncovered.group(1).endswith("/gpu") else f"drop it from {REQUESTS}"))
    never = CAPACITY.search(message)
    if never:
        resource, _, total = never.groups()
        return Diagnosis(ERROR, name, reason, said,
                         f"the job asks for more {resource} than ClusterQueue {cq}'s whole quota ({total}), so it is "
                         f"never admitted: lower {REQUESTS} or {WORKERS}, or ask for a larger nominalQuota")
    short = UNUSED.search(message)
    if short:
        resource, flavor = short.group(1), short.group(2)
        return Diagnosis(WARNING, name, reason, said,
                         f"ClusterQueue {cq}{_shortfall(shot, flavor, resource)}: the job starts, all its pods at once, "
                         f"when admitted jobs free that quota; to start sooner lower {REQUESTS} or {WORKERS}, or ask "
                         f"for more nominalQuota (`kubectl get clusterqueue {cq} -o yaml` shows quota and usage)")
    return Diagnosis(WARNING, name, reason, said,
                     f"`kubectl describe clusterqueue {cq}` shows the queue's quota and usage; lower {REQUESTS} or "
                     f"{WORKERS} if the job does not fit")


def _cluster_queue_name(shot: Snapshot, workload: dict | None) -> str:
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    local = ((shot.local_queue or {}).get("spec") or {}).get("clusterQueue")
    return admission.get("clusterQueue") or local or "of the job's LocalQueue"


def _shortfall(shot: Snapshot, flavor: str, resource: str) -> str:
    """` lacks N cpu: the job asks for A in all, and W admitted workloads hold H of its Q`,
    from the Workload's requests and the ClusterQueue's quota and reservations; ` lacks cpu` when
    the ClusterQueue may not be read."""
    from generator.job import quantity

    needed = sum((quantity.parse(r.get("resources", {}).get(resource, 0))
                  for r in ((shot.workload or {}).get("status") or {}).get("resourceRequests") or []), start=Decimal(0))
    cluster_queue = shot.cluster_queue or {}
    quota = next((r.get("nominalQuota") for g in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
                  for f in g.get("flavors") or [] if f.get("name") == flavor
                  for r in f.get("resources") or [] if r.get("name") == resource), None)
    if quota is None or not needed:
        return f" lacks {resource}"
    status = cluster_queue.get("status") or {}
    held = next((r.get("total") for f in status.get("flavorsReservation") or [] if f.get("name") == flavor
                 for r in f.get("resources") or [] if r.get("name") == resource), "0")
    count = status.get("reservingWorkloads", 0)
    short = needed - (quantity.parse(quota) - quantity.parse(held))
    # Sums written as Kubernetes writes quantities, as the quota and usage beside them are: 500m, not 0.5.
    binary = resource in ("memory", "storage", "ephemeral-storage") or resource.startswith("hugepages-")
    return (f" lacks {quantity.write(short, binary)} {resource}: the job asks for {quantity.write(needed, binary)} in "
            f"all, and {count} admitted workload{'s hold' if count != 1 else ' holds'} {held} of its {quota}")


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


# Kueue v0.19 deprecated its Kubeflow Trainer v1 integrations (kubeflow.org/pytorchjob and the rest);
# their removal is planned for v0.20. TrainJob (trainer.kubeflow.org/trainjob) is the supported path.
V1_DEPRECATED_IN = (0, 19)


def kueue_v1(shot: Snapshot) -> Iterator[Diagnosis]:
    """A job queued through Kueue's Trainer v1 integration on a Kueue that deprecates it."""
    queue = (shot.job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    integration = shot.job_kind.kueue_integration
    release = _release(shot.kueue_version)
    if not queue or not integration.startswith("kubeflow.org/") or release is None or release < V1_DEPRECATED_IN:
        return
    yield Diagnosis(WARNING, f"{shot.kind}/{shot.name}", "KueueV1IntegrationDeprecated",
                    f"queued through Kueue's {integration} integration (queue {queue}), which Kueue "
                    f"{shot.kueue_version} deprecates with the rest of its Kubeflow Trainer v1 support; its removal "
                    "is planned for Kueue v0.20, after which Kueue no longer admits this job",
                    f"move the job to a Kubeflow Trainer v2 TrainJob, which Kueue supports: `python -m generator "
                    f"convert FILE --to v2` turns the job's manifest or values into one and lists every change in "
                    f"meaning; {QUEUE_NAME} carries over")


def _release(version: str | None) -> tuple[int, int] | None:
    match = re.match(r"^v?(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None
