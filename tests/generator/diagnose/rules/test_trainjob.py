"""diagnose of a Trainer v2 TrainJob: its runtime, JobSet's pods (container `node`), the node Job's
events and the TrainJob's own conditions, as Trainer and JobSet write them.
tests/e2e/test_cluster_commands.py diagnoses a real failed TrainJob."""
from __future__ import annotations

from generator.diagnose import report, rules
from generator.diagnose.snapshot import Snapshot
from tests.generator.diagnose.rules.shots import only
from tests.support import trainjobs
from tests.support.trainjobs import IMAGE

NOW = "2026-11-23T10:30:00Z"


def trainjob(name="mnist", conditions=(), jobs_status=None, suspend=None, env=None, runtime="mnist") -> dict:
    job = trainjobs.trainjob(name, {"numNodes": 2, "image": IMAGE, "env": env or []},
                             {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime},
                             {"namespace": "ml", "uid": "tj-uid", "creationTimestamp": "2026-11-23T10:00:00Z"},
                             **({} if suspend is None else {"suspend": suspend}))
    job["status"] = {"conditions": [{"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions],
                     "jobsStatus": jobs_status or []}
    return job


def training_runtime(volumes=None) -> dict:
    pod_spec = {"containers": [{"name": "node", "image": IMAGE,
                                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}],
                "volumes": volumes or []}
    return trainjobs.training_runtime("mnist", pod_spec, nodes=2)


def node_pod(index, phase="Running", statuses=None, conditions=None) -> dict:
    return {"metadata": {"name": f"mnist-node-0-{index}-x7k2p", "namespace": "ml",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "mnist", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                    "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"containers": [{"name": "node", "image": IMAGE, "resources": {
                "requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}],
                     "nodeName": None if phase == "Pending" else "node-a"},
            "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": statuses if statuses is not None else [
                {"name": "node", "image": IMAGE, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-23T10:01:00Z"}}}]}}


def shot(**fields) -> Snapshot:
    base = {"job": trainjob(jobs_status=[{"name": "node", "active": 2, "succeeded": 0, "failed": 0}]),
            "runtime": training_runtime(), "pods": [node_pod(0), node_pod(1)],
            "nodes": [{"metadata": {"name": "node-a", "labels": {}}, "spec": {"taints": []},
                       "status": {"allocatable": {"cpu": "3", "memory": "32Gi"}}}], "now": NOW}
    base.update(fields)
    return Snapshot(**base)


def test_a_running_trainjob_is_healthy_and_its_state_comes_from_its_active_jobs():
    s = shot()
    findings = rules.diagnose(s)
    assert findings == [] and report.exit_code(findings) == report.HEALTHY
    assert report.as_table(s, findings) == "TrainJob mnist (namespace ml): Running, 2 pod(s)\nnothing wrong found\n"


def test_a_failed_node_shows_the_node_containers_exit_code_and_log_and_the_trainjobs_reason():
    failed = {"name": "node", "image": IMAGE, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    job = trainjob(conditions=[("Failed", "FailedJobs", "jobset failed due to one or more job failures")],
                   jobs_status=[{"name": "node", "active": 0, "succeeded": 0, "failed": 1}])
    s = shot(job=job, pods=[node_pod(0, "Failed", [failed]), node_pod(1)],
             logs={"mnist-node-0-0-x7k2p/node": "python -m trainer: error: unrecognized arguments: --no-such-flag\n"})
    findings = rules.diagnose(s)
    assert [(f.object, f.reason) for f in findings] == [("Pod/mnist-node-0-0-x7k2p", "Error"), ("TrainJob/mnist", "FailedJobs")]
    assert findings[0].message.startswith("container node exited with code 1 (Error); its last log lines:")
    assert findings[0].message.endswith("unrecognized arguments: --no-such-flag")
    assert report.as_table(s, findings).startswith("TrainJob mnist (namespace ml): Failed, 2 pod(s)\n")


def test_restarts_of_the_whole_set_run_out_and_the_fix_is_the_backoff_limit():
    job = trainjob(conditions=[("Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")])
    findings = rules.diagnose(shot(job=job))
    found = only(findings, "ReachedMaxRestarts")
    assert found.object == "TrainJob/mnist" and "`runPolicy.backoffLimit`" in found.fix and "maxRestarts" in found.fix
    assert [f.reason for f in findings] == ["ReachedMaxRestarts"]  # not told twice by the generic failure


def test_nodes_that_do_not_fit_name_the_node_containers_request():
    message = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims."
    pending = [node_pod(i, "Pending", [], [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": message}]) for i in (0, 1)]
    found = only(rules.diagnose(shot(pods=pending)), "Insufficient cpu")
    assert found.object == "Pod/mnist-node-0-0-x7k2p (and 1 more: mnist-node-0-1-x7k2p)"
    assert "lower `resources.requests.cpu` (each pod asks for 2; the nodes offer 3 in all)" in found.fix


def test_a_secret_the_trainer_env_names_and_a_config_map_the_runtime_mounts_are_missing():
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    runtime = training_runtime(volumes=[{"name": "settings", "configMap": {"name": "train-settings"}}])
    findings = rules.diagnose(shot(job=trainjob(env=env, jobs_status=[{"name": "node", "active": 2}]), runtime=runtime,
                                   secrets={"hf": False}, config_maps={"train-settings": False}))
    secret = only(findings, "SecretNotFound")
    assert secret.object == "Secret/hf" and "node container node reads env HF_TOKEN from Secret hf" in secret.message
    assert secret.fix.endswith("or change `env`/`envFrom`")  # no per-role env in v2: every node is alike
    config = only(findings, "ConfigMapNotFound")
    assert "volume settings of the node pods mounts ConfigMap train-settings" in config.message


def test_a_trainjob_without_pods_after_a_minute_names_trainer_and_jobset_or_its_missing_runtime():
    quiet = trainjob()
    found = only(rules.diagnose(shot(job=quiet, pods=[])), "NoPods")
    assert "no Trainer controller (or no JobSet controller)" in found.message
    assert "install Kubeflow Trainer v2.3 with JobSet" in found.fix and "`kubectl get jobset mnist -n ml`" in found.fix
    missing = only(rules.diagnose(shot(job=quiet, pods=[], runtime=None)), "RuntimeNotFound")
    assert "TrainingRuntime mnist, which does not exist" in missing.message


def test_a_node_jobs_refusal_is_told_and_its_own_failure_is_left_to_the_trainjob():
    quota = {"involvedObject": {"kind": "Job", "name": "mnist-node-0", "namespace": "ml"}, "reason": "FailedCreate",
             "type": "Warning", "lastTimestamp": "2026-11-23T10:02:00Z",
             "message": 'Error creating: pods "mnist-node-0-0-abcde" is forbidden: exceeded quota: team, requested: cpu=2'}
    limit = dict(quota, reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")
    findings = rules.diagnose(shot(pods=[], events=[quota, limit]))
    found = only(findings, "FailedCreate")
    assert found.object == "Job/mnist-node-0" and "`kubectl describe quota -n ml`" in found.fix
    assert not [f for f in findings if f.reason == "BackoffLimitExceeded"]


def test_a_suspended_trainjob_is_told_with_the_patch_that_resumes_it():
    found = only(rules.diagnose(shot(job=trainjob(suspend=True), pods=[])), "Suspended")
    assert "(spec.suspend)" in found.message
    assert "kubectl patch trainjob mnist -n ml --type merge -p '{\"spec\":{\"suspend\":false}}'" in found.fix


def test_a_complete_trainjob_with_pods_left_running_is_not_told_about_clean_pod_policy():
    job = trainjob(conditions=[("Complete", "AllJobsCompleted", "jobset completed successfully")])
    assert rules.diagnose(shot(job=job)) == []


def test_a_complete_trainjob_whose_pods_are_gone_has_ended_and_nothing_is_wrong():
    """JobSet deletes a finished set's pods: a Complete TrainJob half an hour old with none left is
    done, not a job that never made pods."""
    job = trainjob(conditions=[("Complete", "AllJobsCompleted", "jobset completed successfully")],
                   jobs_status=[{"name": "node", "active": 0, "succeeded": 2, "failed": 0}])
    s = shot(job=job, pods=[])
    findings = rules.diagnose(s)
    assert findings == [] and report.exit_code(findings) == report.HEALTHY
    assert report.as_table(s, findings) == "TrainJob mnist (namespace ml): Complete, 0 pod(s)\nnothing wrong found\n"


def test_torchruns_report_of_a_failed_worker_gives_way_to_the_workers_own_last_lines():
    """Under torchrun (every TrainJob node) the launcher's traceback and box follow the trainer's
    error and would fill the lines diagnose shows; the real launcher's output is cut to one line."""
    import subprocess
    import sys

    from generator.diagnose import snapshot
    from tests.support import ROOT

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "1",
                           "-m", "trainer", "--dataset", "digits", "--no-such-flag"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and snapshot.CHILD_FAILED in proc.stderr
    shown = snapshot.last_lines(proc.stdout + proc.stderr).splitlines()
    assert shown[-2:] == ["python -m trainer: error: unrecognized arguments: --no-such-flag",
                          "torchrun: rank 0 (local_rank: 0) failed with exit code 2 (its traceback of the launcher left out)"]
    assert len(shown) <= snapshot.LOG_LINES and not any("Traceback" in line for line in shown)
    plain = "\n".join(f"line {i}" for i in range(30)) + "\n"
    assert snapshot.last_lines(plain) == "\n".join(f"line {i}" for i in range(10, 30)) + "\n"


def test_a_trainjob_queued_under_kueue_0_19_is_on_the_supported_path():
    queued = trainjob(jobs_status=[{"name": "node", "active": 2, "succeeded": 0, "failed": 0}])
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    assert not [f for f in rules.diagnose(shot(job=queued, kueue_version="v0.19.2"))
                if f.reason == "KueueV1IntegrationDeprecated"]
