"""A node short of disk, memory or process IDs: the kubelet evicts pods from it ("The node was low
on resource: ephemeral-storage. Threshold quantity: ..., available: ...") and taints it
`node.kubernetes.io/disk-pressure` (memory-pressure, pid-pressure) while its condition holds, so
the scheduler places no new pod there. The fix is to give the node back what it lacks; a toleration
of a pressure taint never is (the kubelet would evict the pods again, and the taint lifts by itself
once the node has room)."""
from __future__ import annotations

import re
from collections.abc import Iterator

from generator.diagnose.rules.common import ERROR, Diagnosis, objects, pod_name
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import value

# condition -> (its taint, what the node lacks, the fix)
PRESSURES = {
    "DiskPressure": ("node.kubernetes.io/disk-pressure", "disk space (ephemeral storage: the kubelet's and the "
                     "container runtime's filesystems)",
                     "free disk space on the node's filesystem: remove clusters you no longer use with `python -m "
                     "generator cluster down --purge --dir DIR` (each holds the images it unpacked) and unused images "
                     "(`podman image prune`); the kubelet lifts the taint by itself once the space is back"),
    "MemoryPressure": ("node.kubernetes.io/memory-pressure", "memory",
                       f"free memory on the node (stop other work there), or lower {value('resources.limits.memory')} "
                       f"and {value('topology.workers')}; the kubelet evicts first the pods using more than they "
                       "request, and lifts the taint by itself once memory is back"),
    "PIDPressure": ("node.kubernetes.io/pid-pressure", "process IDs",
                    "stop processes on the node (other work, or a job starting too many workers, such as "
                    f"{value('topology.nprocPerNode')} or a data loader's); the kubelet lifts the taint by itself"),
}
TAINTS = {taint: condition for condition, (taint, _, _) in PRESSURES.items()}
# The resources the kubelet names in an eviction, by the pressure they come of.
RESOURCE_PRESSURE = {"ephemeral-storage": "DiskPressure", "nodefs": "DiskPressure", "imagefs": "DiskPressure",
                     "inodes": "DiskPressure", "memory": "MemoryPressure", "pids": "PIDPressure"}
LOW = re.compile(r"The node was low on resource: ([\w.-]+)\.(?: Threshold quantity: ([^,]+), available: ([^.\s]+))?")
NO_TOLERATION = "do not add a toleration for it: the kubelet would evict the pods again"


def pressure_taint(taint: str) -> str | None:
    """The condition a taint key (or the scheduler's `{key: value}`) stands for, None for another taint."""
    key = taint.strip("{} ").split(":", 1)[0].strip()
    return TAINTS.get(key)


def fix_for(condition: str) -> str:
    return f"{PRESSURES[condition][2]}; {NO_TOLERATION}"


def nodes(shot: Snapshot) -> Iterator[Diagnosis]:
    """Each node under pressure, by its condition or its taint, with what it lacks and the fix."""
    for node in shot.nodes or []:
        name = node["metadata"]["name"]
        held = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") in PRESSURES and c.get("status") == "True"}
        tainted = {TAINTS[t["key"]]: t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") in TAINTS}
        for condition in [c for c in PRESSURES if c in held or c in tainted]:
            taint, lacks, _ = PRESSURES[condition]
            said = []
            if condition in held:
                cond = held[condition]
                said.append(f"condition {condition} is True ({cond.get('reason') or ''}: {cond.get('message') or ''})")
            if condition in tainted:
                said.append(f"tainted {taint}:{tainted[condition].get('effect', 'NoSchedule')}, so no new pod is "
                            "placed there")
            yield Diagnosis(ERROR, f"Node/{name}", condition,
                            f"node {name} is short of {lacks}: {'; '.join(said)}; the kubelet evicts pods from it "
                            "until it has room", fix_for(condition))


def evictions(shot: Snapshot) -> Iterator[Diagnosis]:
    """The job's pods the kubelet evicted for a resource the node ran low on: one finding per
    resource and threshold, naming every pod."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for pod in shot.pods:
        status = pod.get("status") or {}
        messages = [status.get("message") or ""] if status.get("reason") == "Evicted" else []
        messages += [e.get("message") or "" for e in shot.events_of("Pod", pod_name(pod)) if e.get("reason") == "Evicted"]
        for message in messages:
            low = LOW.search(message)
            if low:
                found.setdefault(low.groups(default=""), []).append(pod_name(pod))
                break
    for (resource, threshold, available), pods in found.items():
        condition = RESOURCE_PRESSURE.get(resource, "DiskPressure")
        figures = (f" (the kubelet's eviction threshold {_readable(threshold)}, {_readable(available)} available)"
                   if threshold else "")
        yield Diagnosis(ERROR, objects("Pod", sorted(set(pods))), "Evicted",
                        f"the kubelet evicted it: the node ran low on {resource}{figures}", fix_for(condition))


def _readable(amount: str) -> str:
    """A quantity as the kubelet writes it (bytes, or Ki), also in GB or MB, which users read."""
    from generator.job import quantity

    try:
        parsed = quantity.parse(amount.strip())
    except ValueError:
        return amount
    if parsed >= 10**9:
        return f"{amount.strip()} = {parsed / 10**9:.1f} GB"
    if parsed >= 10**6:
        return f"{amount.strip()} = {parsed / 10**6:.0f} MB"
    return amount.strip()
