"""The training operator's contract as `generator run` plays it (kinds/pytorchjob/contract.py):
the env it injects, which exits each restart policy retries, backoffLimit, and when the job has succeeded."""
import json
import time

import pytest

from generator.kinds.pytorchjob.contract import retryable
from tests.support import local_jobs
from tests.support.cli_helpers import run

PRINT_ENV = ("import os, json; keys = ['MASTER_ADDR','MASTER_PORT','WORLD_SIZE','RANK','LOCAL_RANK','PYTHONUNBUFFERED',"
             "'PET_MASTER_ADDR','PET_MASTER_PORT','PET_NNODES','PET_NODE_RANK','PET_NPROC_PER_NODE','GREETING','OUT',"
             "'POD']; print(json.dumps({k: os.environ.get(k) for k in keys}))")


def env_lines(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        replica, sep, text = line.partition(" | ")
        if sep and text.startswith("{"):
            out[replica.strip()] = json.loads(text)
    return out


def test_env_contract_of_every_replica(tmp_path):
    body, marker = local_jobs.job("envjob", PRINT_ENV, PRINT_ENV, workers=2, extra_env=[
        {"name": "GREETING", "value": "hi"}, {"name": "OUT", "value": "/opt/pytorch/output/x"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/opt/pytorch/output"}]
        pod["volumes"] = [{"name": "out", "persistentVolumeClaim": {"claimName": "results"}}]
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    envs = env_lines(out)
    assert set(envs) == {"master-0", "worker-0", "worker-1"}
    port = envs["master-0"]["MASTER_PORT"]
    for rank, replica in enumerate(["master-0", "worker-0", "worker-1"]):
        e = envs[replica]
        assert (e["MASTER_ADDR"], e["MASTER_PORT"], e["WORLD_SIZE"], e["RANK"]) == ("127.0.0.1", port, "3", str(rank))
        assert e["LOCAL_RANK"] is None and e["PYTHONUNBUFFERED"] == "1"
        assert (e["PET_MASTER_ADDR"], e["PET_NNODES"], e["PET_NODE_RANK"]) == ("127.0.0.1", "3", str(rank))
        assert e["GREETING"] == "hi" and e["POD"] == f"envjob-{replica}"
        assert e["OUT"] == str(tmp_path / "run" / "results" / "x")  # the mount path, mapped to a folder
    assert "job succeeded: the Master succeeded" in err
    assert local_jobs.alive(marker) == []


def test_restart_policy_never_fails_the_job_naming_replica_code_and_last_lines(tmp_path):
    crash = "print('loading data'); print('fatal: disk full'); raise SystemExit(3)"
    body, marker = local_jobs.job("never", "import time; time.sleep(30)", crash, workers=2, restart="Never")
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1
    assert "job failed: worker-" in err and "failed with exit code 3 (restartPolicy Never)" in err
    assert "    fatal: disk full" in err and "    loading data" in err
    assert local_jobs.alive(marker) == []


def test_on_failure_restarts_until_backoff_limit(tmp_path):
    body, marker = local_jobs.job("backoff", "raise SystemExit(1)", run_policy={"backoffLimit": 2})
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1
    assert out.count("restarting (restartPolicy OnFailure") == 2
    assert "BackoffLimitExceeded: 2 restart(s) used, runPolicy.backoffLimit is 2" in err
    assert local_jobs.alive(marker) == []


def test_exit_code_policy_retries_only_128_to_255(tmp_path):
    flaky = ("import os, pathlib; p = pathlib.Path(os.environ['OUT_FLAG']); "
             "raise SystemExit(0 if p.exists() else (p.touch() or 137))")
    body, _ = local_jobs.job("exitcode", flaky, restart="ExitCode",
                             extra_env=[{"name": "OUT_FLAG", "value": str(tmp_path / "flag")}])
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 0 and "exited with code 137; restarting" in out
    body, _ = local_jobs.job("permanent", "raise SystemExit(2)", restart="ExitCode")
    code, _, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "exit code 2 is permanent under restartPolicy ExitCode" in err


@pytest.mark.parametrize("policy, code, expected", [
    ("Always", 0, True), ("OnFailure", 0, False), ("OnFailure", 1, True), ("Never", 1, False),
    ("ExitCode", 1, False), ("ExitCode", 127, False), ("ExitCode", 128, True), ("ExitCode", 143, True),
    ("ExitCode", 255, True)])
def test_retry_decisions(policy, code, expected):
    assert retryable(policy, code) is expected


def test_worker_only_job_succeeds_when_every_worker_does(tmp_path):
    body, _ = local_jobs.job("workers", None, "print('done')", workers=2)
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 0 and "job succeeded: every Worker succeeded" in err


def test_worker_only_job_fails_when_one_worker_fails_though_another_succeeded(tmp_path):
    code_text = ("import os, sys, time\n"
                 "if os.environ['POD'].endswith('worker-1'):\n    time.sleep(1); sys.exit(3)\n"
                 "print('done')")
    body, marker = local_jobs.job("someworkers", None, code_text, workers=2, restart="Never",
                                  extra_env=[{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    code, _, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "worker-1 failed with exit code 3" in err and "job succeeded" not in err
    assert local_jobs.alive(marker) == []


def test_an_elastic_worker_only_job_succeeds_with_its_first_worker_as_the_operator_decides(tmp_path):
    """training-operator v1.9.4: under elasticPolicy with no Master, one Worker's success ends the
    job, and the others are stopped. A rank 0 still writing its outputs in another Worker loses them,
    which is why `validate` warns of elastic jobs (and the trainer's ranks wait for rank 0's outputs)."""
    code_text = ("import os, time\n"
                 "if os.environ['POD'].endswith('worker-1'):\n    print('up', flush=True); time.sleep(120)\n"
                 "print('done')")
    body, marker = local_jobs.job("elasticworkers", None, code_text, workers=2, extra_env=[
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d"}
    code, _, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 0 and "job succeeded: a Worker succeeded (elastic)" in err
    assert "worker-1    Stopped" in err
    assert local_jobs.alive(marker) == []


def test_restarts_back_off_and_identical_failures_end_the_run(tmp_path, monkeypatch):
    from generator.container import process

    monkeypatch.setattr(process, "BACKOFF_START", 0.2)  # 10 s, doubling, as the kubelet
    body, marker = local_jobs.job("crashloop", "import sys; print('bad config'); sys.exit(3)")
    started = time.monotonic()
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    took = time.monotonic() - started
    assert code == 1
    assert "restart 1)" in out + err and "restart 2, back-off 0.2s)" in out + err and "restart 4, back-off 0.8s)" in out + err
    assert "master-0 failed with exit code 3 (it failed 5 times in a row the same way" in err
    assert "set runPolicy.backoffLimit" in err and "bad config" in err
    assert 1.4 <= took < 30  # 0 + 0.2 + 0.4 + 0.8 of back-off, not a tight loop
    assert local_jobs.alive(marker) == []


def test_the_master_port_is_the_operators_default_in_the_chart_and_in_generator_run():
    """23456 named pytorchjob-port is the operator's (e2e/test_operator.py reads what the real one
    injects against contract.MASTER_PORT); the chart's default `port` and `generator run`'s plan
    must say the same, or a job runs on one port here and another on a cluster."""
    import yaml

    from generator import helm, paths
    from generator.kinds.pytorchjob import contract, plan

    assert yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())["port"] == contract.MASTER_PORT
    job = next(o for o in helm.render_objects(paths.JOB_CHART, {}) if o["kind"] == "PyTorchJob")
    (main,) = [c for c in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
               if c["name"] == "pytorch"]
    assert main["ports"] == [{"name": contract.PORT_NAME, "containerPort": contract.MASTER_PORT}]
    assert (plan.DEFAULT_PORT, plan.PORT_NAME) == (contract.MASTER_PORT, contract.PORT_NAME)
