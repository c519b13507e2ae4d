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


def test_a_pytorchjob_queued_under_kueue_0_19_hears_the_v1_integration_goes_and_how_to_move():
    queued = job(labels={"kueue.x-k8s.io/queue-name": "team-a"}, conditions=("Created", "Running"))
    found = only(rules.diagnose(shot(job=queued, kueue_version="v0.19.2")), "KueueV1IntegrationDeprecated")
    assert found.severity == "warning" and found.object == "PyTorchJob/mnist"
    assert "kubeflow.org/pytorchjob integration (queue team-a), which Kueue v0.19.2 deprecates" in found.message
    assert "removal is planned for Kueue v0.20" in found.message
    assert "`python -m generator convert FILE --to v2`" in found.fix
    for quiet in (shot(job=queued, kueue_version="v0.17.0"), shot(job=queued, kueue_version=None),
                  shot(job=job(conditions=("Created", "Running")), kueue_version="v0.19.2")):
        assert not [f for f in rules.diagnose(quiet) if f.reason == "KueueV1IntegrationDeprecated"]
