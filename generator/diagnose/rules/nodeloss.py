"""A node lost under the job (a power cut, a network gone): its kubelet stops posting status, the
node lifecycle controller marks its Ready condition Unknown and taints it
node.kubernetes.io/unreachable:NoExecute (not-ready when the kubelet says Ready False), and once a
pod's toleration of that taint runs out the taint manager evicts it. No kubelet confirms the pod
stopped, so it stays Terminating, and the job's controller waits for it to be gone (DESIGN.md,
"When a node is lost"). Told while it happens: before the eviction and after it."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, objects, pod_name, seconds_since, tolerates
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import value

UNREACHABLE, NOT_READY = "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
LOST_TAINTS = {"Unknown": UNREACHABLE, "False": NOT_READY}  # Ready's status -> the controller's taint
CAUSES = {UNREACHABLE: "NodeUnreachable", NOT_READY: "NodeNotReady"}  # a pending pod's cause, by the taint
TAINT_EVICTION = "DeletionByTaintManager"  # the DisruptionTarget condition's reason on an evicted pod
DEFAULT_TOLERATION = 300  # seconds: the DefaultTolerationSeconds admission plugin's
# The job chart's value for how long pods stay on a lost node.
LOST_NODE_VALUE = value("nodeLossTolerationSeconds")
# The command that starts a killed node of the local cluster; named only for a node labelled as its.
NODE_START = "python -m generator cluster node start {node} --dir DIR"


@dataclass(frozen=True)
class LostNode:
    name: str
    ready: dict  # its Ready condition: status Unknown (no kubelet answers) or False
    taints: tuple[dict, ...]
    local: bool  # the local cluster's node (`cluster up`), which NODE_START brings back

    @property
    def unknown(self) -> bool:
        return self.ready.get("status") == "Unknown"

    def eviction_taint(self) -> dict:
        """The NoExecute taint its state brings, as set or, before the controller has set it, as it will be."""
        key = LOST_TAINTS[self.ready["status"]]
        return next((t for t in self.taints if t.get("key") == key and t.get("effect") == "NoExecute"),
                    {"key": key, "effect": "NoExecute", "timeAdded": self.ready.get("lastTransitionTime")})


def lifecycle_taint(taint: str) -> str | None:
    """The key of a node lifecycle taint in a taint key (or the scheduler's `{key: value}`), None for another."""
    key = taint.strip("{} ").split(":", 1)[0].strip()
    return key if key in CAUSES else None


def pending_fix(key: str) -> str:
    """For pods the scheduler keeps off a node that carries `key`."""
    return (f"a node is {'unreachable' if key == UNREACHABLE else 'NotReady'} (tainted {key} by the node lifecycle "
            "controller, which lifts the taint once the node is Ready): the pods fit once it is back or its Node is "
            "deleted (`kubectl get nodes` names it); do not add a toleration for it")


def lost_nodes(shot: Snapshot) -> dict[str, LostNode]:
    from generator.controlplane.realnode import NODE_LABEL, NODE_LABEL_VALUE

    found = {}
    for node in shot.nodes or []:
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready and ready.get("status") in LOST_TAINTS:
            name = node["metadata"]["name"]
            local = (node["metadata"].get("labels") or {}).get(NODE_LABEL) == NODE_LABEL_VALUE
            found[name] = LostNode(name, ready, tuple((node.get("spec") or {}).get("taints") or []), local)
    return found


def lost(shot: Snapshot) -> Iterator[Diagnosis]:
    """The job's pods on a lost node: still there before their toleration runs out, and stuck
    Terminating after it; one finding per node and stage, naming every pod."""
    nodes = lost_nodes(shot)
    groups: dict[tuple, list[str]] = {}
    for pod in shot.pods:
        where = (pod.get("spec") or {}).get("nodeName")
        deleted = pod["metadata"].get("deletionTimestamp")
        phase = (pod.get("status") or {}).get("phase", "")
        node = nodes.get(where)
        if node is None:
            if shot.nodes is None and deleted and _by_taint(pod) and seconds_since(shot, deleted) > 0:
                groups.setdefault(("unread", where, deleted), []).append(pod_name(pod))
        elif deleted:
            # A kubelet that still answers (Ready False) deletes the pod within its grace period.
            if node.unknown or seconds_since(shot, deleted) > 0:
                groups.setdefault(("terminating", where, deleted, _by_taint(pod)), []).append(pod_name(pod))
        elif phase not in ("Succeeded", "Failed"):
            groups.setdefault(("before", where, phase, _toleration(pod, node.eviction_taint())), []).append(pod_name(pod))
    for key, pods in groups.items():
        stage, where = key[:2]
        if stage == "unread":
            yield _unread(shot, where, key[2], pods)
        elif stage == "terminating":
            yield _terminating(shot, nodes[where], key[2], key[3], pods)
        else:
            yield _before(shot, nodes[where], key[2], key[3], pods)


def _by_taint(pod: dict) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("reason") == TAINT_EVICTION
               for c in (pod.get("status") or {}).get("conditions") or [])


def _toleration(pod: dict, taint: dict) -> int | None:
    """Seconds the pod stays on a node with the taint, as the taint manager reads its tolerations
    (the first that matches counts): 0 without one, None with one that sets no limit."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    chosen = next((t for t in tolerations if tolerates(t, taint)), None)
    if chosen is None:
        return 0
    seconds = chosen.get("tolerationSeconds")
    return None if seconds is None else max(0, int(seconds))


def _terminating(shot: Snapshot, node: LostNode, deleted: str, by_taint: bool, pods: list[str]) -> Diagnosis:
    one = len(pods) == 1
    if by_taint:
        who = f"the taint manager evicted {'it' if one else 'them'} (DisruptionTarget: {TAINT_EVICTION})"
    else:
        who = f"{'it was' if one else 'they were'} deleted"
    if node.unknown:
        still = f"{who}, and no kubelet answers to confirm {'it' if one else 'they'} stopped, so " \
                f"{'it stays' if one else 'they stay'} Terminating"
    else:
        still = f"{who}, and {node.name}'s kubelet has not confirmed {'it' if one else 'them'} stopped within the grace period"
    lines = [f"stuck Terminating (deletionTimestamp {deleted}) on node {node.name}, which {_state(shot, node)}",
             _node_line(node), still, _hold(shot, one)]
    return Diagnosis(ERROR, objects("Pod", pods), "NodeLost", "\n".join(lines), _fix(shot, node))


def _before(shot: Snapshot, node: LostNode, phase: str, seconds: int | None, pods: list[str]) -> Diagnosis:
    one = len(pods) == 1
    they, them = ("it", "it") if one else ("they", "them")
    taint = node.eviction_taint()
    if seconds is None:
        when = (f"{'it tolerates' if one else 'they tolerate'} {taint['key']} with no tolerationSeconds, so "
                f"{they} {'is' if one else 'are'} never evicted")
    else:
        due = _after(taint.get("timeAdded"), seconds)
        at = f" at about {due} ({_relative(shot, due)})" if due else f" after {seconds} s"
        said = (f"{'it tolerates' if one else 'they tolerate'} {taint['key']} for {seconds} s (tolerationSeconds)"
                if seconds else f"{'it does' if one else 'they do'} not tolerate {taint['key']}")
        when = f"{said}: the taint manager evicts {them}{at}"
        if node.unknown:
            when += f", and {they} then stay{'s' if one else ''} Terminating while {node.name} is away"
    stalled = ("the job is stalled meanwhile: the other pods wait for the ranks on that node" if node.unknown
               else "its kubelet then stops them and the job restarts them")
    lines = [f"still {phase or 'there'} on node {node.name}, which {_state(shot, node)}", _node_line(node),
             f"{when}; {stalled}", _hold(shot, one)]
    return Diagnosis(ERROR if node.unknown else WARNING, objects("Pod", pods), "NodeLost", "\n".join(lines),
                     _fix(shot, node))


def _unread(shot: Snapshot, where: str, deleted: str, pods: list[str]) -> Diagnosis:
    """Nodes not readable with these credentials: the pod's own condition says the taint manager evicted it."""
    one = len(pods) == 1
    lines = [f"stuck Terminating on node {where}, {_span(seconds_since(shot, deleted))} past {'its' if one else 'their'} "
             f"deletionTimestamp "
             f"{deleted}: the taint manager evicted {'it' if one else 'them'} for a NoExecute taint of the node "
             f"(DisruptionTarget: {TAINT_EVICTION}) and no kubelet has confirmed {'it' if one else 'them'} stopped, as "
             "when a node is lost",
             f"these credentials cannot read nodes: `kubectl get node {where}` tells whether it is NotReady or Unknown",
             _hold(shot, one)]
    node = LostNode(where, {"status": "Unknown"}, (), False)
    return Diagnosis(WARNING, objects("Pod", pods), "NodeLost", "\n".join(lines), _fix(shot, node))


def _state(shot: Snapshot, node: LostNode) -> str:
    state = "stopped answering: Ready Unknown" if node.unknown else "is NotReady: Ready False"
    since = node.ready.get("lastTransitionTime")
    return state + (f" since {since}, {_span(seconds_since(shot, since))} before this snapshot" if since else "")


def _node_line(node: LostNode) -> str:
    said = ": ".join(p for p in (node.ready.get("reason"), (node.ready.get("message") or "").rstrip(".")) if p)
    taints = ", ".join(f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                       + (f" (since {t['timeAdded']})" if t.get("timeAdded") else "") for t in node.taints)
    return f"node {node.name}: {said or 'Ready ' + node.ready.get('status', '')}; " + (
        f"taints {taints}" if taints else "not tainted yet")


def _hold(shot: Snapshot, one: bool) -> str:
    """Why the job cannot restart while the pod exists, by who makes its pods."""
    pod = "this pod is" if one else "these pods are"
    if shot.job_kind.child_jobs:  # JobSet's: it recreates its Jobs with foreground deletion (jobset#576)
        return (f"JobSet restarts the {shot.kind} by deleting its Jobs in the foreground, which ends only once every "
                f"pod of theirs is gone: its restart waits until {pod} gone")
    # The training operator's (kubeflow/trainer#2072): a replica index some pod still holds is not refilled.
    return (f"the training operator makes a replica's new pod only when no pod holds its index: the {shot.kind} "
            f"cannot restart until {pod} gone")


def _fix(shot: Snapshot, node: LostNode) -> str:
    n = node.name
    if not node.unknown:
        back = f"make node {n} Ready again (read its kubelet's log and `kubectl describe node {n}`)"
    elif node.local:
        back = f"start node {n} again (`{NODE_START.format(node=n)}`): its kubelet registers and confirms the pods stopped"
    else:
        back = f"bring node {n} back (power, network): its kubelet registers again and confirms the pods stopped"
    steps = [back, f"if the machine is gone, `kubectl delete node {n}` (as a cloud's node controller does), and PodGC "
                   "deletes the pods bound to it about 40 s later"]
    if any(t.get("key") == OUT_OF_SERVICE for t in node.taints):
        steps.append(f"{n} already carries {OUT_OF_SERVICE}, so PodGC deletes its Terminating pods while it is NotReady: "
                     "if they stay, check that kube-controller-manager runs")
    else:
        steps.append(f"while it stays shut down, `kubectl taint node {n} {OUT_OF_SERVICE}=nodeshutdown:NoExecute` (a "
                     "non-graceful shutdown), and PodGC deletes its Terminating pods (untaint the node once it is back)")
    then = "JobSet then restarts the job" if shot.job_kind.child_jobs else "the operator then makes the replicas' new pods"
    return ("; or, ".join(steps) + f"; {then}; next time, pods leave a lost node sooner: set {LOST_NODE_VALUE} "
            f"(their tolerations for {UNREACHABLE} and {NOT_READY}) under the default {DEFAULT_TOLERATION} seconds")


def _after(stamp: str | None, seconds: int) -> str | None:
    import datetime

    if not stamp:
        return None
    start = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (start + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _relative(shot: Snapshot, stamp: str) -> str:
    ago = seconds_since(shot, stamp)
    return f"due {_span(ago)} before this snapshot" if ago >= 0 else f"in {_span(-ago)} from this snapshot"


def _span(seconds: float) -> str:
    """A duration as people read it: 45s, 8m20s, 2h05m."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
