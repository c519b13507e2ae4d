"""diagnose's rules on recorded API objects: what the scheduler, the kubelet, the operator, Kueue
and Volcano write (their message formats), for causes the local control plane cannot produce
or produces only slowly. tests/e2e/test_kubelet.py diagnoses real jobs."""
from __future__ import annotations

import copy

from generator.diagnose import report, rules
from generator.diagnose.snapshot import Snapshot

NOW = "2026-11-23T10:30:00Z"


def job(name="mnist", conditions=("Created",), run_policy=None, labels=None, gpus=0) -> dict:
    def spec(role, replicas):
        container = {"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0",
                     "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}
        if gpus:
            container["resources"]["limits"]["nvidia.com/gpu"] = gpus
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "uid": "job-uid", "creationTimestamp": "2026-11-23T10:00:00Z",
                         "labels": labels or {}},
            "spec": {"runPolicy": run_policy or {}, "pytorchReplicaSpecs": {"Master": spec("Master", 1),
                                                                              "Worker": spec("Worker", 2)}},
            "status": {"conditions": [{"type": c, "status": "True", "reason": f"PyTorchJob{c}", "message": f"job {c}"}
                                      for c in conditions]}}


def pod(name, role, phase="Running", statuses=None, init=None, conditions=None, spec=None, annotations=None) -> dict:
    index = name.rsplit("-", 1)[1]
    base_spec = {"containers": [{"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0",
                                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}],
                 "nodeName": "node-a" if phase != "Pending" else None}
    base_spec.update(spec or {})
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {},
                         "labels": {"training.kubeflow.org/job-name": "mnist", "training.kubeflow.org/replica-type": role,
                                    "training.kubeflow.org/replica-index": index}},
            "spec": base_spec,
            "status": {"phase": phase, "conditions": conditions or [],
                       "containerStatuses": statuses if statuses is not None else [running("pytorch")],
                       **({"initContainerStatuses": init} if init else {})}}


def running(name, started="2026-11-23T10:01:00Z", restarts=0, last=None) -> dict:
    return {"name": name, "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0", "ready": True, "restartCount": restarts,
            "state": {"running": {"startedAt": started}}, "lastState": last or {}}


def unschedulable(message) -> list[dict]:
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]


def event(kind, name, reason, message, type_="Warning") -> dict:
    return {"involvedObject": {"kind": kind, "name": name, "namespace": "ml"}, "reason": reason, "message": message,
            "type": type_, "lastTimestamp": "2026-11-23T10:02:00Z"}


def shot(**fields) -> Snapshot:
    base = {"job": job(), "pods": [pod("mnist-master-0", "Master"), pod("mnist-worker-0", "Worker"),
                                    pod("mnist-worker-1", "Worker")],
            "nodes": [{"metadata": {"name": "node-a", "labels": {}}, "spec": {"taints": []},
                       "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}}],
            "services": ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"], "now": NOW}
    base.update(fields)
    return Snapshot(**base)


def only(findings, reason):
    chosen = [f for f in findings if f.reason == reason]
    assert len(chosen) == 1, [(f.reason, f.object) for f in findings]
    return chosen[0]


def test_a_running_job_has_nothing_wrong_and_exits_0():
    findings = rules.diagnose(shot(job=job(conditions=("Created", "Running"))))
    assert findings == [] and report.exit_code(findings) == report.HEALTHY


def test_insufficient_gpus_names_every_pending_pod_once_and_the_gpus_value():
    message = ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
               "1 No preemption victims found for incoming pod.")
    pending = [pod(n, r, "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]})
               for n, r in (("mnist-master-0", "Master"), ("mnist-worker-0", "Worker"), ("mnist-worker-1", "Worker"))]
    # The operator repeats each pod's condition as a Warning on the job; it is the same cause.
    echoes = [event("PyTorchJob", "mnist", "Unschedulable", f"Error pod {p['metadata']['name']} condition message: {message}")
              for p in pending]
    findings = rules.diagnose(shot(job=job(gpus=2), pods=pending, events=echoes))
    assert len(findings) == 1
    top = findings[0]
    assert (top.severity, top.reason) == ("error", "Insufficient nvidia.com/gpu")
    assert top.object == "Pod/mnist-master-0 (and 2 more: mnist-worker-0, mnist-worker-1)"
    assert "lower `resources.gpus` (each pod asks for 2; the nodes offer 1 in all)" in top.fix
    assert report.exit_code(findings) == report.FOUND


def test_untolerated_taints_get_a_toleration_written_from_the_nodes_taint():
    message = "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}. preemption: not eligible"
    nodes = [{"metadata": {"name": "gpu-1", "labels": {}}, "spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}, "status": {"allocatable": {}}}]
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message))]
    found = only(rules.diagnose(shot(pods=pending, nodes=nodes)), "UntoleratedTaint")
    assert "`tolerations`" in found.fix and "{dedicated: gpu}" in found.fix
    assert "{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}" in found.fix


def test_a_selector_no_node_matches():
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"nodeSelector": {"pool": "a100"}})]
    found = only(rules.diagnose(shot(pods=pending)), "NodeSelectorMismatch")
    assert "`nodeSelector` {'pool': 'a100'}" in found.fix


def test_a_claim_that_does_not_exist():
    message = 'persistentvolumeclaim "shared-data" not found'
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"volumes": [{"name": "output", "persistentVolumeClaim": {"claimName": "shared-data"}}]})]
    findings = rules.diagnose(shot(pods=pending, claims={"shared-data": None}))
    assert {f.reason for f in findings} == {"ClaimNotFound"}
    assert any(f.object == "PersistentVolumeClaim/shared-data" and "`output.existingClaim`" in f.fix for f in findings)


def test_a_read_write_once_claim_on_pods_of_several_nodes():
    pods = [pod(n, r, spec={"nodeName": node, "volumes": [{"name": "o", "persistentVolumeClaim": {"claimName": "out"}}]})
            for n, r, node in (("mnist-master-0", "Master", "a"), ("mnist-worker-0", "Worker", "b"))]
    claim = {"spec": {"accessModes": ["ReadWriteOnce"]}, "status": {"phase": "Bound"}}
    found = only(rules.diagnose(shot(pods=pods, claims={"out": claim})), "ReadWriteOnceOnManyNodes")
    assert "pods on 2 nodes" in found.message and "`output.mountOn: master`" in found.fix


def test_the_operators_init_image_that_cannot_be_pulled_points_at_the_operator_chart():
    init = [{"name": "init-pytorch", "image": "alpine:3.10", "restartCount": 0, "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "alpine:3.10"'}}}]
    worker = pod("mnist-worker-0", "Worker", "Pending", statuses=[], init=init)
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master"), worker])), "ImagePullBackOff")
    assert found.object == "Pod/mnist-worker-0" and "`pytorchInitContainerImage`" in found.fix


def test_the_trainer_image_that_cannot_be_pulled_points_at_image_values():
    statuses = [{"name": "pytorch", "image": "ghcr.io/acme/trainer:nope", "restartCount": 0, "state": {"waiting": {
        "reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = failed to pull and unpack image"}}}]
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master", "Pending", statuses=statuses)])), "ErrImagePull")
    assert "`image.repository`" in found.fix and "`image.pullSecrets`" in found.fix


def test_oom_killed_replica_shows_its_log_and_the_memory_limit():
    last = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "x", "finishedAt": "y"}}
    statuses = [{"name": "pytorch", "image": "t", "restartCount": 3, "lastState": last,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}}]
    logs = {"mnist-worker-1/pytorch": "epoch 1 step 10/50 loss 2.1\nepoch 1 step 20/50 loss 1.7\n"}
    findings = rules.diagnose(shot(pods=[pod("mnist-master-0", "Master"), pod("mnist-worker-1", "Worker", statuses=statuses)],
                                   logs=logs))
    found = only(findings, "CrashLoopBackOff")
    assert "exited with code 137 (OOMKilled), restarted 3 times; now in CrashLoopBackOff" in found.message
    assert found.message.endswith("    epoch 1 step 10/50 loss 2.1\n    epoch 1 step 20/50 loss 1.7")
    assert "raise `resources.limits.memory` (now 8Gi)" in found.fix


def test_backoff_limit_reached():
    failed = job(conditions=("Created", "Running", "Failed"), run_policy={"backoffLimit": 3})
    failed["status"]["conditions"][-1].update(reason="BackoffLimitExceeded",
                                              message="PyTorchJob mnist has failed because it has reached the specified backoff limit")
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    statuses = [{"name": "pytorch", "image": "t", "restartCount": 3, "lastState": last, "state": last}]
    findings = rules.diagnose(shot(job=failed, pods=[pod("mnist-master-0", "Master", "Failed", statuses=statuses)]))
    assert [f.reason for f in findings][:2] == ["Error", "BackoffLimitExceeded"]  # the cause ranks before the limit
    assert "`runPolicy.backoffLimit` (now 3)" in findings[1].fix


def test_near_the_backoff_limit_warns():
    statuses = [running("pytorch", restarts=2)]
    findings = rules.diagnose(shot(job=job(conditions=("Created", "Running"), run_policy={"backoffLimit": 3}),
                                   pods=[pod("mnist-master-0", "Master", statuses=statuses)]))
    assert only(findings, "NearBackoffLimit").severity == "warning"


def test_a_missing_secret_in_the_env():
    j = job()
    j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}]
    found = only(rules.diagnose(shot(job=j, secrets={"wandb": False})), "SecretNotFound")
    assert found.object == "Secret/wandb" and "reads env WANDB_API_KEY" in found.message
    assert "kubectl create secret generic wandb -n ml" in found.fix


def test_workers_waiting_for_a_pending_master_blame_the_master():
    init = [{"name": "init-pytorch", "image": "alpine:3.10", "restartCount": 0,
             "state": {"running": {"startedAt": "2026-11-23T10:01:00Z"}}}]
    message = "0/1 nodes are available: 1 Insufficient cpu."
    pods = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message)),
            pod("mnist-worker-0", "Worker", "Pending", statuses=[], init=init)]
    findings = rules.diagnose(shot(pods=pods))
    assert findings[0].reason == "Insufficient cpu"
    waiting = only(findings, "WaitingForMaster")
    assert waiting.message == "Workers wait in init-pytorch for the Master, which is Pending"


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


def test_an_istio_sidecar_that_outlives_the_trainer():
    statuses = [{"name": "pytorch", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("istio-proxy")]
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master", statuses=statuses)])), "SidecarKeepsPodRunning")
    assert "`disableIstioSidecar: true`" in found.fix


def test_pods_that_outlive_a_finished_job():
    done = job(conditions=("Created", "Running", "Succeeded"), run_policy={"cleanPodPolicy": "None"})
    found = only(rules.diagnose(shot(job=done)), "PodsOutliveJob")
    assert "3 of its pods still run" in found.message and "`runPolicy.cleanPodPolicy: Running`" in found.fix


def test_a_job_with_no_pods_and_no_operator():
    found = only(rules.diagnose(shot(pods=[])), "NoPods")
    assert "no operator is reconciling it" in found.message


def test_json_is_a_stable_list_of_findings():
    import json

    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[],
                   conditions=unschedulable("0/1 nodes are available: 1 Insufficient memory."))]
    data = json.loads(report.as_json(rules.diagnose(shot(pods=pending))))
    assert [sorted(d) for d in data] == [["fix", "message", "object", "reason", "severity"]]
    assert data[0]["reason"] == "Insufficient memory" and "`resources.requests.memory` (each pod asks for 4Gi" in data[0]["fix"]


def test_an_unbound_claim_names_its_storage_class():
    message = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: not eligible"
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"volumes": [{"name": "output", "persistentVolumeClaim": {"claimName": "mnist-output"}}]})]
    claim = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-ssd"}, "status": {"phase": "Pending"}}
    said = event("PersistentVolumeClaim", "mnist-output", "ProvisioningFailed",
                 'storageclass.storage.k8s.io "fast-ssd" not found')
    findings = rules.diagnose(shot(pods=pending, claims={"mnist-output": claim}, events=[said]))
    assert [f.reason for f in findings] == ["ClaimUnbound", "ProvisioningFailed"]
    assert findings[1].message == 'claim mnist-output is Pending: storageclass.storage.k8s.io "fast-ssd" not found'
    assert "set `output.storageClassName` (now fast-ssd)" in findings[1].fix


def test_kueue_admitted_but_the_job_stays_suspended():
    labelled = job(labels={"kueue.x-k8s.io/queue-name": "team-a"}, run_policy={"suspend": True})
    workload = {"metadata": {"name": "pytorchjob-mnist-3c6f1"}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue team"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]}}
    found = only(rules.diagnose(shot(job=labelled, pods=[], workload=workload)), "AdmittedButSuspended")
    assert found.severity == "warning" and "Kueue has not resumed it" in found.message


def test_a_missing_config_map_volume():
    j = job()
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
        {"name": "settings", "configMap": {"name": "train-settings"}}]
    found = only(rules.diagnose(shot(job=j, config_maps={"train-settings": False})), "ConfigMapNotFound")
    assert found.object == "ConfigMap/train-settings" and "volume settings of the Worker pods" in found.message
