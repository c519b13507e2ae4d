"""Pods the scheduler cannot place, and the claims they mount: resources no node offers, taints,
selectors, claims missing, unbound, or attached elsewhere."""
from __future__ import annotations

import re
from collections.abc import Iterator

from generator.diagnose.rules import nodeloss, pressure
from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, objects, pod_name, pods_in, tolerates
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import setting, value

GPUS, GPU_RESOURCE = value("resources.gpus"), value("gpuResourceName")
REQUESTS = {resource: value(f"resources.requests.{resource}") for resource in ("cpu", "memory")}
TOLERATIONS, NODE_SELECTOR, AFFINITY = value("tolerations"), value("nodeSelector"), value("affinity")
EXISTING_CLAIM, OUTPUT_ON = value("output.existingClaim"), setting("output.enabled", "true")
STORAGE_CLASS = value("output.storageClassName")
ON_MASTER, RWX = setting("output.mountOn", "master"), setting("output.accessModes", "[ReadWriteMany]")


def scheduling(shot: Snapshot) -> Iterator[Diagnosis]:
    """Pending pods the scheduler could not place: one finding per cause, naming every pod it holds."""
    causes: dict[tuple[str, str, str], list[str]] = {}
    for pod in pods_in(shot, "Pending"):
        message = _unschedulable(pod, shot)
        if not message:
            continue
        for reason, text, fix in _scheduling_causes(message, pod, shot):
            causes.setdefault((reason, text, fix), []).append(pod_name(pod))
    for (reason, text, fix), pods in causes.items():
        yield Diagnosis(ERROR, objects("Pod", pods), reason, text, fix)

def _unschedulable(pod: dict, shot: Snapshot) -> str:
    """The scheduler's message: the PodScheduled condition's, else the last FailedScheduling event's."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("message"):
            return cond["message"]
    failed = [e for e in shot.events_of("Pod", pod_name(pod)) if e.get("reason") == "FailedScheduling"]
    return failed[-1].get("message", "") if failed else ""

def _scheduling_causes(message: str, pod: dict, shot: Snapshot) -> list[tuple[str, str, str]]:
    out = []
    offered = _offered(shot)
    for resource in dict.fromkeys(re.findall(r"Insufficient ([\w./-]*\w)", message)):
        have = f"; the nodes offer {offered[resource]} in all" if resource in offered else ""
        if resource.endswith("/gpu"):
            fix = (f"lower {GPUS} (each pod asks for {_requests(pod, resource, shot.container)}{have}), or add nodes with "
                   f"{resource}; {GPU_RESOURCE} must be the resource your GPU nodes offer")
        elif resource in ("cpu", "memory"):
            fix = (f"lower {REQUESTS[resource]} (each pod asks for {_requests(pod, resource, shot.container)}{have}), "
                   "or use fewer or larger nodes")
        else:
            fix = f"lower the request for {resource} (each pod asks for {_requests(pod, resource, shot.container)}{have})"
        out.append((f"Insufficient {resource}", message, fix))
    taints = re.findall(r"untolerated taint\(?s?\)? ?(\{[^}]*\})", message)
    if "untolerated taint" in message and not taints:  # newer schedulers name no taint: read the nodes'
        taints = _untolerated(pod, shot)
    # A node short of disk, memory or PIDs: its taint is the kubelet's, lifted once the node has room.
    for condition in dict.fromkeys(c for c in map(pressure.pressure_taint, taints) if c):
        out.append((condition, message, f"a node is under {condition}: " + pressure.fix_for(condition)))
    # A lost node's taint is the node lifecycle controller's, lifted once the node is Ready again.
    for key in dict.fromkeys(k for k in map(nodeloss.lifecycle_taint, taints) if k):
        out.append((nodeloss.CAUSES[key], message, nodeloss.pending_fix(key)))
    others = [t for t in taints if not pressure.pressure_taint(t) and not nodeloss.lifecycle_taint(t)]
    if others or ("untolerated taint" in message and not taints):
        shown = ", ".join(sorted(set(others))) or "the nodes' taints"
        out.append(("UntoleratedTaint", message,
                    f"add to {TOLERATIONS} one entry per taint the pods may accept ({shown}), e.g. "
                    + _toleration_example(shot, others)))
    if "didn't match Pod's node affinity/selector" in message:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        out.append(("NodeSelectorMismatch", message,
                    f"{NODE_SELECTOR} {selector or '(empty)'} or {AFFINITY} matches no node with room; fix the labels to "
                    "ones your nodes carry (`kubectl get nodes --show-labels`)"))
    missing = re.findall(r'persistentvolumeclaim "([^"]+)" not found', message)
    explained = bool(missing)
    for claim in [c for c in missing if shot.claims.get(c, {}) is not None]:  # claims() tells a known-missing one
        out.append(("ClaimNotFound", message,
                    f"claim {claim} does not exist: create it, or leave {EXISTING_CLAIM} empty so the chart "
                    f"creates one with {OUTPUT_ON}"))
    if "unbound immediate PersistentVolumeClaims" in message:
        out.append(("ClaimUnbound", message, "a claim the pods mount is not bound; see the claim's finding below, or set "
                                             f"{STORAGE_CLASS} to a StorageClass that provisions"))
    if "volume node affinity conflict" in message:
        out.append(("VolumeNodeAffinity", message, "the claim's volume lives where the pods cannot go: use a "
                                                   f"ReadWriteMany {STORAGE_CLASS}, or pin the pods with "
                                                   f"{NODE_SELECTOR} to the volume's zone"))
    if not out and not explained:
        out.append(("FailedScheduling", message, "read the scheduler's message: each 'N node(s) ...' part is a reason "
                                                 "nodes were ruled out"))
    return out

def _requests(pod: dict, resource: str, main: str) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == main:
            asked = ((container.get("resources") or {}).get("requests") or {}).get(resource)
            if asked is None:
                asked = ((container.get("resources") or {}).get("limits") or {}).get(resource)
            return str(asked) if asked is not None else "unset"
    return "unset"

def _offered(shot: Snapshot) -> dict[str, str]:
    """Allocatable totals over the nodes, when the snapshot could read them."""
    from decimal import Decimal

    from generator.job import quantity

    totals: dict[str, Decimal] = {}
    for node in shot.nodes or []:
        for resource, amount in (node["status"].get("allocatable") or {}).items():
            try:
                totals[resource] = totals.get(resource, Decimal(0)) + quantity.parse(str(amount))
            except ValueError:
                continue
    return {k: f"{v / 2**30:.1f}Gi" if k == "memory" else f"{v.normalize():f}" for k, v in totals.items()}

def _untolerated(pod: dict, shot: Snapshot) -> list[str]:
    """The nodes' scheduling taints the pod tolerates none of, written as older schedulers named
    them (`{key: value}`); none where the nodes cannot be read."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    found = []
    for node in shot.nodes or []:
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations):
                found.append(f"{{{taint.get('key', '')}: {taint.get('value', '')}}}")
    return list(dict.fromkeys(found))


def _toleration_example(shot: Snapshot, shown: list[str]) -> str:
    for node in shot.nodes or []:
        for taint in node["spec"].get("taints") or []:
            key = taint.get("key", "")
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not pressure.pressure_taint(key) \
                    and not nodeloss.lifecycle_taint(key):
                return (f"{{key: {taint['key']}, operator: Equal, value: {taint.get('value', '')}, "
                        f"effect: {taint['effect']}}}")
    return "{key: KEY, operator: Exists, effect: NoSchedule}"

def claims(shot: Snapshot) -> Iterator[Diagnosis]:
    for name, claim in shot.claims.items():
        if claim is None:
            yield Diagnosis(ERROR, f"PersistentVolumeClaim/{name}", "ClaimNotFound",
                            f"the pods mount claim {name}, which does not exist in namespace {shot.namespace}",
                            f"create the claim, or leave {EXISTING_CLAIM} empty and set {OUTPUT_ON} so "
                            "the chart creates one")
            continue
        if not claim:
            continue  # present, but not readable with these credentials
        phase = (claim.get("status") or {}).get("phase")
        if phase == "Pending":
            events = [e for e in shot.events_of("PersistentVolumeClaim", name) if e.get("type") == "Warning"]
            said = events[-1].get("message", "") if events else "no volume is bound to it yet"
            storage_class = (claim.get("spec") or {}).get("storageClassName")
            yield Diagnosis(WARNING, f"PersistentVolumeClaim/{name}", events[-1].get("reason", "Pending") if events else "Pending",
                            f"claim {name} is Pending: {said}",
                            f"set {STORAGE_CLASS} (now {storage_class or 'the default'}) to a StorageClass "
                            "that provisions volumes here (`kubectl get storageclass`)")
        modes = (claim.get("spec") or {}).get("accessModes") or []
        users = [p for p in shot.pods if any((v.get("persistentVolumeClaim") or {}).get("claimName") == name
                                             for v in (p.get("spec") or {}).get("volumes") or [])]
        nodes = {(p.get("spec") or {}).get("nodeName") for p in users} - {None}
        if "ReadWriteOnce" in modes and len(nodes) > 1:
            yield Diagnosis(ERROR, f"PersistentVolumeClaim/{name}", "ReadWriteOnceOnManyNodes",
                            f"claim {name} is ReadWriteOnce but pods on {len(nodes)} nodes mount it "
                            f"({', '.join(sorted(nodes))}); only one node can attach it (Multi-Attach error)",
                            f"mount it on the Master only ({ON_MASTER}), or use "
                            f"{RWX} with a StorageClass that supports it")
    for pod in shot.pods:
        for event in shot.events_of("Pod", pod_name(pod)):
            if event.get("reason") == "FailedAttachVolume" and "Multi-Attach" in event.get("message", ""):
                yield Diagnosis(ERROR, f"Pod/{pod_name(pod)}", "Multi-Attach", event["message"],
                                f"mount the claim on the Master only ({ON_MASTER}), or use {RWX}")
