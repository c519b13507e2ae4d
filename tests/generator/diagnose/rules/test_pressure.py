"""diagnose of a node short of disk, memory or process IDs, on objects written in the formats the
kubelet and the scheduler use (Kubernetes v1.36: pkg/kubelet/eviction's messages, the node's
pressure conditions and their `node.kubernetes.io/*-pressure` taints): the node and the evicted pods
are named with the resource, the threshold and the fix, and no fix ever says to tolerate a
pressure taint (the kubelet would evict the pods again)."""
from __future__ import annotations

import pytest

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import only, pod, shot, unschedulable

CONDITIONS = {"DiskPressure": ("KubeletHasDiskPressure", "kubelet has disk pressure", "disk-pressure"),
              "MemoryPressure": ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
                                 "memory-pressure"),
              "PIDPressure": ("KubeletHasInsufficientPID", "kubelet has insufficient PID available", "pid-pressure")}
EVICTED = ("The node was low on resource: ephemeral-storage. Threshold quantity: 2713789440, available: 2560000Ki. "
           "Container pytorch was using 1532Ki, request is 0, has larger consumption of ephemeral-storage. ")


def node_under(condition: str) -> dict:
    reason, message, taint = CONDITIONS[condition]
    return {"metadata": {"name": "node-a", "labels": {}},
            "spec": {"taints": [{"key": f"node.kubernetes.io/{taint}", "effect": "NoSchedule",
                                 "timeAdded": "2026-11-23T10:01:00Z"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}, "conditions": [
                {"type": condition, "status": "True", "reason": reason, "message": message},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}}


# The scheduler's message as Kubernetes v1.36 wrote it, and as v1.37 does (no taint named: the
# real node's scheduler said this, e2e test_node_pressure).
NAMED = "0/1 nodes are available: 1 node(s) had untolerated taint {{node.kubernetes.io/{taint}: }}. "
UNNAMED = "0/1 nodes are available: 1 node(s) had untolerated taint(s). no new claims to deallocate, "


def pending_on_taint(taint: str, said: str = NAMED, tolerations: list | None = None) -> list[dict]:
    message = said.format(taint=taint) + "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    pods = [pod(f"mnist-{n}", role, "Pending", statuses=[], conditions=unschedulable(message))
            for n, role in (("master-0", "Master"), ("worker-0", "Worker"))]
    for p in pods:
        p["spec"]["tolerations"] = tolerations or []
    return pods


def no_toleration_advised(found) -> None:
    assert all("UntoleratedTaint" != f.reason for f in found), [f.reason for f in found]
    assert all("add to `tolerations`" not in f.fix for f in found), [f.fix for f in found]


def test_a_node_under_disk_pressure_is_named_with_the_fix_free_disk_never_a_toleration():
    found = rules.diagnose(shot(pods=pending_on_taint("disk-pressure"), nodes=[node_under("DiskPressure")]))
    node = next(f for f in found if f.object == "Node/node-a")
    assert node.severity == "error" and node.reason == "DiskPressure"
    assert node.message.startswith("node node-a is short of disk space")
    assert "condition DiskPressure is True (KubeletHasDiskPressure: kubelet has disk pressure)" in node.message
    assert "tainted node.kubernetes.io/disk-pressure:NoSchedule" in node.message
    assert "free disk space" in node.fix and "`python -m generator cluster down --purge --dir DIR`" in node.fix
    assert node.fix.endswith("do not add a toleration for it: the kubelet would evict the pods again")
    held = next(f for f in found if f.object.startswith("Pod/"))
    assert (held.object, held.reason) == ("Pod/mnist-master-0 (and 1 more: mnist-worker-0)", "DiskPressure")
    assert "cluster down --purge" in held.fix
    no_toleration_advised(found)


@pytest.mark.parametrize("condition, lacks, fix", [
    ("MemoryPressure", "memory", "free memory on the node"),
    ("PIDPressure", "process IDs", "stop processes on the node"),
])
def test_memory_and_pid_pressure_name_what_the_node_lacks(condition, lacks, fix):
    taint = CONDITIONS[condition][2]
    found = rules.diagnose(shot(pods=pending_on_taint(taint), nodes=[node_under(condition)]))
    node = next(f for f in found if f.object == "Node/node-a")
    assert node.reason == condition and f"node node-a is short of {lacks}:" in node.message
    assert node.fix.startswith(fix)
    no_toleration_advised(found)


def test_a_pod_the_kubelet_evicted_names_the_resource_the_threshold_and_what_was_left():
    evicted = pod("mnist-master-0", "Master", "Failed", statuses=[])
    evicted["status"].update(reason="Evicted", message=EVICTED)
    found = rules.diagnose(shot(pods=[evicted, pod("mnist-worker-0", "Worker")]))
    hit = only(found, "Evicted")
    assert hit.object == "Pod/mnist-master-0" and hit.severity == "error"
    assert hit.message == ("the kubelet evicted it: the node ran low on ephemeral-storage (the kubelet's eviction "
                           "threshold 2713789440 = 2.7 GB, 2560000Ki = 2.6 GB available)")
    assert "cluster down --purge" in hit.fix and "do not add a toleration" in hit.fix


def test_an_eviction_told_only_by_its_event_is_found_too():
    from tests.generator.diagnose.rules.shots import event

    evicted = pod("mnist-worker-0", "Worker", "Failed", statuses=[])
    memory = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
    hit = only(rules.diagnose(shot(pods=[evicted], events=[event("Pod", "mnist-worker-0", "Evicted", memory)])),
               "Evicted")
    assert "ran low on memory (the kubelet's eviction threshold 100Mi = 105 MB, 51200Ki = 52 MB available)" in hit.message
    assert hit.fix.startswith("free memory on the node")


def test_another_taint_still_gets_its_toleration_and_never_a_pressure_taints_example():
    message = ("0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated "
               "taint {node.kubernetes.io/disk-pressure: }. preemption: 0/2 nodes are available.")
    nodes = [node_under("DiskPressure"),
             {"metadata": {"name": "gpu-1", "labels": {}}, "spec": {"taints": [
                 {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}, "status": {"allocatable": {}}}]
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message))]
    found = rules.diagnose(shot(pods=pending, nodes=nodes))
    taint = only(found, "UntoleratedTaint")
    assert "({dedicated: gpu})" in taint.fix and "disk-pressure" not in taint.fix
    assert "{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}" in taint.fix
    assert only([f for f in found if f.object.startswith("Pod/")], "DiskPressure")


def node_tainted(condition: str | None, *taints: dict) -> dict:
    node = node_under(condition or "DiskPressure")
    node["spec"]["taints"] = ([] if condition is None else node["spec"]["taints"]) + list(taints)
    if condition is None:
        node["status"]["conditions"] = node["status"]["conditions"][1:]
    return node


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_a_scheduler_that_names_no_taint_still_gets_the_pressure_fix_from_the_nodes_taints():
    found = rules.diagnose(shot(pods=pending_on_taint("disk-pressure", UNNAMED), nodes=[node_under("DiskPressure")]))
    held = next(f for f in found if f.object.startswith("Pod/"))
    assert held.reason == "DiskPressure" and "cluster down --purge" in held.fix
    no_toleration_advised(found)


def test_a_taint_the_pods_tolerate_is_not_blamed_and_one_they_do_not_is_named():
    tolerated = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    found = rules.diagnose(shot(pods=pending_on_taint("disk-pressure", UNNAMED, tolerated),
                                nodes=[node_tainted("DiskPressure", GPU_TAINT)]))
    no_toleration_advised(found)
    found = rules.diagnose(shot(pods=pending_on_taint("disk-pressure", UNNAMED), nodes=[node_tainted(None, GPU_TAINT)]))
    (held,) = [f for f in found if f.reason == "UntoleratedTaint"]
    assert "{nvidia.com/gpu: present}" in held.fix and "key: nvidia.com/gpu, operator: Equal, value: present" in held.fix

