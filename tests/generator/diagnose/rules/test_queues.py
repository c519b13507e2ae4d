"""diagnose on recorded API objects: Kueue admission and gang scheduling."""
from __future__ import annotations

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import job, only, pod, shot


def test_a_queue_name_without_a_workload_means_kueue_does_not_manage_the_kind():
    # Kueue's own Workloads are tested as recorded from the local cluster (diagnose/test_recorded.py).
    labelled = job(labels={"kueue.x-k8s.io/queue-name": "team-a"}, run_policy={"suspend": True})
    found = only(rules.diagnose(shot(job=labelled, pods=[])), "NoWorkload")
    assert found.severity == "error" and "kubeflow.org/pytorchjob integration" in found.fix

def test_volcano_gang_pending_and_missing():
    annotated = {"scheduling.k8s.io/group-name": "mnist"}
    pods = [pod("mnist-master-0", "Master", "Pending", statuses=[], annotations=annotated, spec={"schedulerName": "volcano"})]
    group = {"spec": {"minMember": 3}, "status": {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
         "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; Pending: 3 Unschedulable"}]}}
    found = only(rules.diagnose(shot(pods=pods, pod_groups={"volcano": group})), "PodGroupPending")
    assert "the gang of 3 pods is Pending: 3/3 tasks in gang unschedulable" in found.message
    found = only(rules.diagnose(shot(pods=pods, pod_groups={})), "PodGroupCRDMissing")
    assert "`gangScheduling.enabled: false`" in found.fix
