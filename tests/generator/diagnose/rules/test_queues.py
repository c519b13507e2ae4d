"""diagnose on recorded API objects: Kueue admission and gang scheduling."""
from __future__ import annotations

import copy

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import job, only, pod, shot


def test_kueue_without_quota_and_without_a_local_queue():
    labelled = job(labels={"kueue.x-k8s.io/queue-name": "team-a"}, run_policy={"suspend": True})
    workload = {"metadata": {"name": "pytorchjob-mnist-3c6f1"}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending",
         "message": "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor "
                    "default-flavor, 1 more needed"}]}}
    found = only(rules.diagnose(shot(job=labelled, pods=[], workload=workload)), "Pending")
    assert found.object == "Workload/pytorchjob-mnist-3c6f1" and "insufficient unused quota for cpu" in found.message
    assert "the queue team-a lacks quota" in found.fix
    workload = copy.deepcopy(workload)
    workload["status"]["conditions"][0].update(reason="Inadmissible", message="LocalQueue team-a doesn't exist")
    found = only(rules.diagnose(shot(job=labelled, pods=[], workload=workload)), "Inadmissible")
    assert "set `kueue.queueName` (now team-a) to a LocalQueue" in found.fix
    # A queue name and no Workload: Kueue does not manage PyTorchJobs here.
    assert only(rules.diagnose(shot(job=labelled, pods=[])), "NoWorkload").severity == "error"

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

def test_kueue_admitted_but_the_job_stays_suspended():
    labelled = job(labels={"kueue.x-k8s.io/queue-name": "team-a"}, run_policy={"suspend": True})
    workload = {"metadata": {"name": "pytorchjob-mnist-3c6f1"}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue team"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]}}
    found = only(rules.diagnose(shot(job=labelled, pods=[], workload=workload)), "AdmittedButSuspended")
    assert found.severity == "warning" and "Kueue has not resumed it" in found.message
