"""diagnose on recorded API objects: containers that cannot start or fail, Workers waiting for their Master, sidecars."""
from __future__ import annotations

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import job, only, pod, running, shot, unschedulable


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

def test_an_istio_sidecar_that_outlives_the_trainer():
    statuses = [{"name": "pytorch", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("istio-proxy")]
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master", statuses=statuses)])), "SidecarKeepsPodRunning")
    assert "`disableIstioSidecar: true`" in found.fix

def test_a_missing_config_map_volume():
    j = job()
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
        {"name": "settings", "configMap": {"name": "train-settings"}}]
    found = only(rules.diagnose(shot(job=j, config_maps={"train-settings": False})), "ConfigMapNotFound")
    assert found.object == "ConfigMap/train-settings" and "volume settings of the Worker pods" in found.message
