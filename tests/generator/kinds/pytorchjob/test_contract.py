"""The training operator's contract as `generator run` plays it (kinds/pytorchjob/contract.py):
which exits each restart policy retries, backoffLimit, and when the job has succeeded."""
import time

import pytest

from generator.kinds.pytorchjob.contract import retryable
from tests.support import local_jobs
from tests.support.cli_helpers import run


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
