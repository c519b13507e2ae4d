"""diagnose of a node lost under the job, on objects written as Kubernetes v1.36 writes them: the
node lifecycle controller's Ready Unknown (NodeStatusUnknown) and its
node.kubernetes.io/unreachable taints, the DefaultTolerationSeconds plugin's tolerations on the
pods, and the taint manager's eviction (a deletionTimestamp and a DisruptionTarget condition).
Both kinds, before the eviction and after it; a healthy node, an ordinary deletion and a pending
pod are not told as a lost node."""
from __future__ import annotations

import copy
import json

import pytest

from generator.diagnose import report, rules, snapshot
from generator.diagnose.rules import nodeloss
from tests.generator.diagnose.rules import test_trainjob as v2
from tests.generator.diagnose.rules.shots import job, only, pod, shot, unschedulable

# What the DefaultTolerationSeconds admission plugin adds to every pod.
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastTransitionTime": "2026-11-23T09:00:00Z"}
UNKNOWN = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
           "message": "Kubelet stopped posting node status.", "lastTransitionTime": "2026-11-23T10:21:40Z"}
# timeAdded is written for NoExecute taints only.
UNREACHABLE = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
               {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-23T10:21:41Z"}]
EVICTED = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
           "message": "Taint manager: deleting due to NoExecute taint"}


def node(name="node-b", ready=UNKNOWN, taints=UNREACHABLE, local=False) -> dict:
    return {"metadata": {"name": name, "labels": {"pytorchjob-kit/node": "real"} if local else {}},
            "spec": {"taints": copy.deepcopy(list(taints))},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}, "conditions": [dict(ready)] if ready else []}}


def on(p: dict, where: str = "node-b", tolerations=DEFAULT_TOLERATIONS, deleted: str | None = None) -> dict:
    """The pod bound to `where`, with its tolerations, and evicted at `deleted` (its deletionTimestamp) when given."""
    p["spec"].update(nodeName=where, tolerations=copy.deepcopy(tolerations))
    if deleted:
        p["metadata"]["deletionTimestamp"] = deleted
        p["status"]["conditions"] = [EVICTED]
    return p


def lost_master(**kwargs) -> list[dict]:
    """A PyTorchJob whose Master runs on node-b, its Workers on node-a."""
    return [on(pod("mnist-master-0", "Master"), **kwargs), on(pod("mnist-worker-0", "Worker"), "node-a"),
            on(pod("mnist-worker-1", "Worker"), "node-a")]


def pytorchjob(pods: list[dict], nodes=None) -> snapshot.Snapshot:
    return shot(job=job(conditions=("Created", "Running")), pods=pods,
                nodes=nodes if nodes is not None else [node("node-a", READY, ()), node()])


def trainjob(pods: list[dict], nodes=None) -> snapshot.Snapshot:
    return v2.shot(pods=pods, nodes=nodes if nodes is not None else [node("node-a", READY, ()), node()])


def test_a_pytorchjob_pod_stuck_terminating_names_the_node_since_when_its_taints_and_the_operators_rule():
    found = rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z")))
    (lost,) = found  # the node's pressure and the scheduling rules say nothing of it
    assert (lost.severity, lost.object, lost.reason) == ("error", "Pod/mnist-master-0", "NodeLost")
    assert lost.message.splitlines() == [
        "stuck Terminating (deletionTimestamp 2026-11-23T10:27:11Z) on node node-b, which stopped answering: Ready "
        "Unknown since 2026-11-23T10:21:40Z, 8m20s before this snapshot",
        "node node-b: NodeStatusUnknown: Kubelet stopped posting node status; taints "
        "node.kubernetes.io/unreachable:NoSchedule, "
        "node.kubernetes.io/unreachable:NoExecute (since 2026-11-23T10:21:41Z)",
        "the taint manager evicted it (DisruptionTarget: DeletionByTaintManager), and no kubelet answers to confirm it "
        "stopped, so it stays Terminating",
        "the training operator makes a replica's new pod only when no pod holds its index: the PyTorchJob cannot "
        "restart until this pod is gone"]
    assert lost.fix.startswith("bring node node-b back (power, network): its kubelet registers again and confirms the "
                               "pods stopped; or, if the machine is gone, `kubectl delete node node-b` (as a cloud's node "
                               "controller does), and PodGC deletes the pods bound to it about 40 s later; or, while it "
                               "stays shut down, `kubectl taint node node-b "
                               "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (a non-graceful shutdown)")
    assert "the operator then makes the replicas' new pods" in lost.fix
    assert lost.fix.endswith("set `nodeLossTolerationSeconds` (their tolerations for node.kubernetes.io/unreachable "
                             "and node.kubernetes.io/not-ready) under the default 300 seconds")
    assert "cluster node start" not in lost.fix  # not the local cluster's node
    assert report.exit_code(found) == report.FOUND


def test_a_trainjob_node_stuck_terminating_names_jobsets_foreground_deletion():
    pods = [on(v2.node_pod(0), "node-a"), on(v2.node_pod(1), deleted="2026-11-23T10:27:11Z")]
    (lost,) = rules.diagnose(trainjob(pods))
    assert (lost.object, lost.reason) == ("Pod/mnist-node-0-1-x7k2p", "NodeLost")
    assert lost.message.startswith("stuck Terminating (deletionTimestamp 2026-11-23T10:27:11Z) on node node-b, which "
                                   "stopped answering: Ready Unknown since 2026-11-23T10:21:40Z, 8m20s before")
    assert lost.message.splitlines()[-1] == ("JobSet restarts the TrainJob by deleting its Jobs in the foreground, which "
                                             "ends only once every pod of theirs is gone: its restart waits until this "
                                             "pod is gone")
    assert "JobSet then restarts the job" in lost.fix and "training operator" not in lost.message + lost.fix
    pods[1]["status"]["conditions"] = []  # deleted by JobSet's restart (the garbage collector), not evicted
    (lost,) = rules.diagnose(trainjob(pods))
    assert "it was deleted, and no kubelet answers to confirm it stopped, so it stays Terminating" in lost.message


def test_pods_still_running_on_a_lost_node_are_evicted_after_their_own_toleration_seconds():
    """Before the taint manager acts: the job's own tolerationSeconds (60) from the taint's
    timeAdded, and the job stalled until then."""
    short = [{**t, "tolerationSeconds": 60} for t in DEFAULT_TOLERATIONS]
    ready = {**UNKNOWN, "lastTransitionTime": "2026-11-23T10:29:40Z"}
    taints = [{**t, "timeAdded": "2026-11-23T10:29:41Z"} for t in UNREACHABLE]
    pods = [on(pod("mnist-master-0", "Master"), tolerations=short), on(pod("mnist-worker-0", "Worker"), tolerations=short),
            on(pod("mnist-worker-1", "Worker"), "node-a", short)]
    (lost,) = rules.diagnose(pytorchjob(pods, [node("node-a", READY, ()), node(ready=ready, taints=taints)]))
    assert (lost.severity, lost.object) == ("error", "Pod/mnist-master-0 (and 1 more: mnist-worker-0)")
    assert lost.message.splitlines()[0] == ("still Running on node node-b, which stopped answering: Ready Unknown since "
                                            "2026-11-23T10:29:40Z, 20s before this snapshot")
    assert lost.message.splitlines()[2] == (
        "they tolerate node.kubernetes.io/unreachable for 60 s (tolerationSeconds): the taint manager evicts them at about "
        "2026-11-23T10:30:41Z (in 41s from this snapshot), and they then stay Terminating while node-b is away; the job "
        "is stalled meanwhile: the other pods wait for the ranks on that node")
    assert lost.message.splitlines()[3].endswith("the PyTorchJob cannot restart until these pods are gone")


def test_a_trainjob_node_before_eviction_reads_the_default_300_seconds():
    pods = [on(v2.node_pod(0), "node-a"), on(v2.node_pod(1))]
    (lost,) = rules.diagnose(trainjob(pods))
    assert lost.object == "Pod/mnist-node-0-1-x7k2p" and lost.message.startswith("still Running on node node-b")
    assert ("it tolerates node.kubernetes.io/unreachable for 300 s (tolerationSeconds): the taint manager evicts it at "
            "about 2026-11-23T10:26:41Z (due 3m19s before this snapshot)") in lost.message
    assert lost.message.splitlines()[-1].endswith("its restart waits until this pod is gone")


@pytest.mark.parametrize("tolerations, said", [
    ([{"operator": "Exists"}], "it tolerates node.kubernetes.io/unreachable with no tolerationSeconds, so it is never "
                               "evicted; the job is stalled meanwhile"),
    ([], "it does not tolerate node.kubernetes.io/unreachable: the taint manager evicts it at about "
         "2026-11-23T10:21:41Z (due 8m19s before this snapshot)"),
])
def test_a_toleration_without_a_limit_never_evicts_and_none_evicts_at_once(tolerations, said):
    (lost,) = rules.diagnose(pytorchjob(lost_master(tolerations=tolerations)))
    assert said in lost.message


def test_the_not_yet_tainted_node_is_evicted_from_when_its_ready_condition_changed():
    (lost,) = rules.diagnose(pytorchjob(lost_master(), [node("node-a", READY, ()), node(taints=())]))
    assert "node node-b: NodeStatusUnknown: Kubelet stopped posting node status; not tainted yet" in lost.message
    assert "evicts it at about 2026-11-23T10:26:40Z" in lost.message


def test_the_local_clusters_node_is_started_again_by_its_command():
    nodes = [node("node-a", READY, ()), node(local=True)]
    (lost,) = rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"), nodes))
    assert lost.fix.startswith("start node node-b again (`python -m generator cluster node start node-b --dir DIR`): "
                               "its kubelet registers and confirms the pods stopped; or, if the machine is gone")


def test_a_node_already_out_of_service_says_podgc_is_on_it():
    taints = [*UNREACHABLE, {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute",
                             "timeAdded": "2026-11-23T10:29:00Z"}]
    (lost,) = rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"),
                                        [node("node-a", READY, ()), node(taints=taints)]))
    assert "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (since 2026-11-23T10:29:00Z)" in lost.message
    assert ("node-b already carries node.kubernetes.io/out-of-service, so PodGC deletes its Terminating pods while it is "
            "NotReady: if they stay, check that kube-controller-manager runs") in lost.fix
    assert "kubectl taint node" not in lost.fix


NOT_READY = {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
             "message": "container runtime network not ready: NetworkReady=false", "lastTransitionTime": "2026-11-23T10:28:00Z"}
NOT_READY_TAINTS = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-11-23T10:28:01Z"}]


def test_a_not_ready_node_warns_before_eviction_and_errs_once_the_grace_period_passed_unconfirmed():
    """Ready False: the kubelet still answers, so a deletion within its grace period is ordinary."""
    nodes = [node("node-a", READY, ()), node(ready=NOT_READY, taints=NOT_READY_TAINTS)]
    (warned,) = rules.diagnose(pytorchjob(lost_master(), nodes))
    assert (warned.severity, warned.reason) == ("warning", "NodeLost")
    assert warned.message.startswith("still Running on node node-b, which is NotReady: Ready False since "
                                     "2026-11-23T10:28:00Z, 2m00s before this snapshot")
    assert "it tolerates node.kubernetes.io/not-ready for 300 s" in warned.message
    assert warned.fix.startswith("make node node-b Ready again")
    assert rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:30:20Z"), nodes)) == []
    (stuck,) = rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:29:00Z"), nodes))
    assert stuck.severity == "error" and "node-b's kubelet has not confirmed it stopped within the grace period" in stuck.message


def test_a_healthy_node_and_an_ordinary_deletion_on_a_ready_node_are_not_a_lost_node():
    healthy = [node("node-a", READY, ()), node(ready=READY, taints=())]
    assert rules.diagnose(pytorchjob(lost_master(), healthy)) == []
    assert rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"), healthy)) == []
    assert rules.diagnose(pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"), [node(ready=None, taints=())])) == []
    assert rules.diagnose(trainjob([on(v2.node_pod(0), "node-a"), on(v2.node_pod(1), deleted="2026-11-23T10:27:11Z")],
                                   healthy)) == []


def test_a_finished_pod_on_a_lost_node_holds_nothing():
    done = lost_master()
    done[0]["status"]["phase"] = "Succeeded"
    assert rules.diagnose(pytorchjob(done)) == []


def test_nodes_not_readable_fall_back_on_the_pods_eviction_condition():
    unread = pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"))
    unread.nodes = None  # these credentials may not list nodes
    (lost,) = rules.diagnose(unread)
    assert (lost.severity, lost.reason) == ("warning", "NodeLost")
    assert lost.message.splitlines()[:2] == [
        "stuck Terminating on node node-b, 2m49s past its deletionTimestamp 2026-11-23T10:27:11Z: the taint manager "
        "evicted it for a NoExecute taint of the node (DisruptionTarget: DeletionByTaintManager) and no kubelet has "
        "confirmed it stopped, as when a node is lost",
        "these credentials cannot read nodes: `kubectl get node node-b` tells whether it is NotReady or Unknown"]
    unevicted = pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"))
    unevicted.nodes = None
    unevicted.pods[0]["status"]["conditions"] = []
    assert rules.diagnose(unevicted) == []  # a deletion of its own: nothing says the node is lost


def test_a_pending_pod_kept_off_a_lost_node_is_never_told_to_tolerate_its_taint():
    message = ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
               "{node.kubernetes.io/unreachable: }. preemption: 0/2 nodes are available: 2 Preemption is not helpful.")
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message))]
    found = rules.diagnose(pytorchjob(pending))
    assert sorted(f.reason for f in found) == ["Insufficient cpu", "NodeUnreachable"]
    cause = only(found, "NodeUnreachable")
    assert cause.fix.startswith("a node is unreachable (tainted node.kubernetes.io/unreachable by the node lifecycle "
                                "controller, which lifts the taint once the node is Ready)")
    assert cause.fix.endswith("do not add a toleration for it") and "`tolerations`" not in cause.fix


def test_the_snapshot_keeps_the_ready_condition_whatever_it_says_with_its_transition_time():
    """_node_summary of a Node as the API server sends it once the node lifecycle controller marked it."""
    unknown = {k: dict(UNKNOWN, type=k) for k in ("MemoryPressure", "DiskPressure", "PIDPressure")}
    api_node = {"metadata": {"name": "node-b", "labels": {"pytorchjob-kit/node": "real"}, "uid": "n-uid"},
                "spec": {"taints": UNREACHABLE, "podCIDR": "10.0.1.0/24"},
                "status": {"allocatable": {"cpu": "8"}, "conditions": [
                    {**UNKNOWN, "lastHeartbeatTime": "2026-11-23T10:20:50Z"}, *unknown.values()]}}
    summary = snapshot._node_summary(api_node)
    assert summary["status"]["conditions"] == [UNKNOWN]  # pressure Unknown is no pressure
    assert summary["spec"]["taints"] == UNREACHABLE and summary["metadata"]["labels"] == {"pytorchjob-kit/node": "real"}
    assert nodeloss.lost_nodes(shot(nodes=[summary]))["node-b"].local


@pytest.mark.parametrize("seconds, shown", [(5, "5s"), (500, "8m20s"), (7500, "2h05m")])
def test_durations_read_as_people_write_them(seconds, shown):
    assert nodeloss._span(seconds) == shown


def saved(tmp_path, shot_: snapshot.Snapshot) -> str:
    path = tmp_path / "snapshot.yaml"
    snapshot.save(shot_, str(path))
    return str(path)


def test_diagnose_prints_the_lost_node_for_both_kinds_as_table_and_json(tmp_path):
    """What a user reads, from a snapshot written and read back as `--save` and `--from` do (the
    deletionTimestamp, nodeName, tolerations and the node's summary survive the file)."""
    from tests.support.cli_helpers import run

    path = saved(tmp_path, pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z")))
    code, out, _ = run("diagnose", "mnist", "--from", path)
    assert code == 1
    assert out.splitlines()[:4] == ["PyTorchJob mnist (namespace ml): Running, 3 pod(s)",
                                    "1 finding(s), most important first:", "1. [error] Pod/mnist-master-0: NodeLost",
                                    "   stuck Terminating (deletionTimestamp 2026-11-23T10:27:11Z) on node node-b, which "
                                    "stopped answering: Ready Unknown since 2026-11-23T10:21:40Z, 8m20s before this snapshot"]
    # A fix is wrapped at spaces only, so its commands copy as printed.
    assert "        node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (a non-graceful shutdown), and" in out
    code, out, _ = run("diagnose", "mnist", "--from", path, "--format", "json")
    (data,) = json.loads(out)
    assert code == 1 and (data["severity"], data["object"], data["reason"]) == ("error", "Pod/mnist-master-0", "NodeLost")
    assert data["message"].splitlines()[2].startswith("the taint manager evicted it (DisruptionTarget: DeletionByTaintManager)")
    path = saved(tmp_path, trainjob([on(v2.node_pod(0), "node-a"), on(v2.node_pod(1))]))
    code, out, _ = run("diagnose", "mnist", "--from", path)
    assert code == 1 and out.splitlines()[2] == "1. [error] Pod/mnist-node-0-1-x7k2p: NodeLost"
    assert "   JobSet restarts the TrainJob by deleting its Jobs in the foreground" in out


def test_the_diagnose_pages_lost_node_sample_is_what_diagnose_prints(tmp_path):
    from tests.support import docs, samples
    from tests.support.cli_helpers import run

    command, *sample = docs.block("diagnose.md", "A node lost under the job").splitlines()
    assert command == "$ python -m generator diagnose mnist -n ml"
    code, out, _ = run("diagnose", "mnist", "--from", saved(tmp_path, pytorchjob(lost_master(deleted="2026-11-23T10:27:11Z"))))
    assert code == 1 and samples.mismatch("\n".join(sample), out) == "", out
