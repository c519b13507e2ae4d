"""`python -m generator run`: a job's pods as processes of this machine, their env, folders and
signals (the operator's restarts and success: kinds/pytorchjob/test_contract.py)."""
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from generator.kinds.pytorchjob import plan as v1_plan
from tests.support import local_jobs
from tests.support.cli_helpers import run
from tests.support.waiting import wait_for


def test_no_command_runs_the_image_entrypoint(tmp_path):
    body, _ = local_jobs.job("entry", "pass")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].pop("command")
    (master,) = v1_plan.plan(body, tmp_path).replicas
    assert master.argv == [sys.executable, "-m", "trainer"]
    assert master.env["OUTPUT_DIR"] == str(tmp_path / "pods" / "master-0" / "output")


def test_output_dir_without_a_volume_stays_inside_the_run_folder(tmp_path):
    body, _ = local_jobs.job("outdir", "pass", "pass", workers=1,
                             extra_env=[{"name": "OUTPUT_DIR", "value": "/opt/pytorch/output"}])
    master = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["volumeMounts"] = [{"name": "output", "mountPath": "/opt/pytorch/output"}]
    master["volumes"] = [{"name": "output", "persistentVolumeClaim": {"claimName": "out"}}]
    master_plan, worker_plan = v1_plan.plan(body, tmp_path).replicas
    assert master_plan.env["OUTPUT_DIR"] == str(tmp_path / "out")  # the Master's volume
    assert worker_plan.env["OUTPUT_DIR"] == str(tmp_path / "pods" / "worker-0" / "output")  # the Worker's own disk


def test_a_working_dir_that_climbs_out_of_the_run_folder_is_refused_and_nothing_is_made(tmp_path):
    from generator.errors import UserError

    run_dir = tmp_path / "run"
    body, _ = local_jobs.job("climb", "pass")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["workingDir"] = "/../../../../escaped"
    with pytest.raises(UserError) as refused:
        v1_plan.plan(body, run_dir)
    assert 'spec.pytorchReplicaSpecs.Master.template.spec.containers[pytorch].workingDir: workingDir is ' \
           '"/../../../../escaped", which contains ".."' in str(refused.value)
    assert not (tmp_path / "escaped").exists() and not run_dir.exists()


def test_secret_values_come_from_the_shell_or_are_refused(tmp_path, monkeypatch):
    secret = [{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    body, _ = local_jobs.job("secret", "pass", extra_env=secret)
    monkeypatch.delenv("API_KEY", raising=False)
    code, _, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "comes from Secret s/k, which only a cluster has" in err and "export API_KEY=" in err
    monkeypatch.setenv("API_KEY", "from-shell")
    (master,) = v1_plan.plan(body, tmp_path).replicas
    assert master.env["API_KEY"] == "from-shell"


def test_active_deadline_stops_the_job(tmp_path):
    body, marker = local_jobs.job("deadline", "import time; time.sleep(60)", "import time; time.sleep(60)",
                                  workers=1, run_policy={"activeDeadlineSeconds": 1})
    start = time.monotonic()
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "DeadlineExceeded" in err and time.monotonic() - start < 20
    assert local_jobs.alive(marker) == []


def test_a_command_that_cannot_start_fails_the_job_by_name(tmp_path):
    body, marker = local_jobs.job("nostart", "import time; time.sleep(30)", "pass", workers=1)
    worker = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["no-such-program-pytorchjob-kit"]
    code, _, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "worker-0 failed with exit code 127 (could not start)" in err
    assert "cannot start no-such-program-pytorchjob-kit" in err
    assert local_jobs.alive(marker) == []


def test_stop_reaches_the_trainer_under_a_shell(tmp_path):
    """The whole process group gets SIGTERM, so a trainer started by `sh -c` can checkpoint."""
    got = tmp_path / "got-sigterm"
    inner = (f"import signal, sys, time, pathlib; "
             f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(got)!r}).write_text('yes'), sys.exit(143))); "
             f"print('up', flush=True); time.sleep(120)")
    body, marker = local_jobs.job("shell", "pass")
    container = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["command"] = ["sh", "-c", f"{sys.executable} -c \"{inner}\"; echo after"]
    runner = local_jobs.Generator("run", local_jobs.write(tmp_path, body), cwd=tmp_path)
    runner.wait_for("| up")
    runner.proc.send_signal(signal.SIGINT)
    runner.finish()
    assert got.read_text() == "yes"
    assert local_jobs.alive(marker) == []


def test_sigint_stops_every_replica_and_leaves_no_orphans(tmp_path):
    sleeper = "import time, sys; print('up', flush=True); time.sleep(120)"
    body, marker = local_jobs.job("interrupt", sleeper, sleeper, workers=2)
    runner = local_jobs.Generator("run", local_jobs.write(tmp_path, body), cwd=tmp_path)
    runner.wait_for("| up", count=3)
    runner.proc.send_signal(signal.SIGINT)
    code, _, err = runner.finish()
    assert code == 130 and "stopped by SIGINT" in err and "Traceback" not in err
    assert "Ctrl-C again kills them now" in err
    assert local_jobs.alive(marker) == []


def test_a_second_ctrl_c_kills_replicas_that_ignore_sigterm(tmp_path):
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                "time.sleep(120)")
    body, marker = local_jobs.job("stubborn", stubborn)
    runner = local_jobs.Generator("run", local_jobs.write(tmp_path, body), cwd=tmp_path)
    runner.wait_for("| up")
    started = time.monotonic()
    runner.proc.send_signal(signal.SIGINT)
    runner.wait_for("Ctrl-C again kills them now)", stderr=True)  # the first is being handled
    runner.proc.send_signal(signal.SIGINT)
    code, _, err = runner.finish()
    assert time.monotonic() - started < 8  # not the 10 s grace period
    assert code == 130 and "killing the replicas now" in err
    assert local_jobs.alive(marker) == []


def test_replicas_die_with_the_runner_even_on_kill_9_and_whatever_they_started_in_new_sessions(tmp_path):
    """`kill -9` of `generator run` gives it no chance to stop anything: its replicas, and what they
    started in a session of their own, go with it all the same, as a pod's processes go with the pod."""
    escaper = ("import subprocess, time; subprocess.Popen(['sleep', '300'], start_new_session=True); "
               "print('up', flush=True); time.sleep(120)")
    body, marker = local_jobs.job("orphans", escaper, escaper, workers=1)
    runner = local_jobs.Generator("run", local_jobs.write(tmp_path, body), cwd=tmp_path)
    try:
        runner.wait_for("| up", count=2)
        assert len(local_jobs.alive(marker)) >= 4  # two replicas and their two sleeps, at least
        runner.proc.kill()
        runner.proc.wait()
        wait_for(lambda: local_jobs.alive(marker) == [], 5, "the replicas and their sleeps to die", interval=0.05)
    finally:
        for pid in local_jobs.alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_dry_run_prints_the_plan(tmp_path):
    body, marker = local_jobs.job("dry", "print('ran')", "print('ran')", workers=1)
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--dry-run")
    assert code == 0 and "master-0 (rank 0, restartPolicy OnFailure)" in out and "\nran" not in out
    assert "env: WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" in out


def test_invalid_manifest_is_refused_before_anything_runs(tmp_path):
    body, _ = local_jobs.job("bad", "print('ran')")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    code, out, err = run("run", local_jobs.write(tmp_path, body))
    assert code == 1 and "Master.replicas: must be written and be exactly 1" in err and out == ""


def test_absurd_replica_counts_are_refused_before_anything_starts(tmp_path):
    body, _ = local_jobs.job("huge", "pass", "pass", workers=10**12)
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--dry-run")
    assert code == 1 and out == ""
    assert "makes 1000000000001 pods, more than this machine runs as processes (64 at most)" in err


def test_an_image_this_machine_lacks_is_refused_as_on_the_process_node_unless_named_a_copy(tmp_path):
    body, marker = local_jobs.job("mirror", "print('ran from the mirror')")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/ml/trainer:7"
    path = local_jobs.write(tmp_path, body)
    code, out, err = run("run", path, "--run-dir", str(tmp_path / "run"))
    assert code == 1 and out == ""
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[pytorch].image" in err
    assert "is not an image this machine has" in err and "registry.example.com/ml/trainer:7" in err
    assert "--image registry.example.com/ml/trainer=ghcr.io/pytorchjob-kit/trainer" in err
    # and the two ways to say it is your own code
    assert "pass `--image registry.example.com/ml/trainer=host`" in err
    assert "`--image registry.example.com/ml/trainer=DIR[:PATH]`" in err
    assert not (tmp_path / "run").exists()  # refused before anything was made
    code, out, err = run("run", path, "--run-dir", str(tmp_path / "run"),
                         "--image", "registry.example.com/ml/trainer=ghcr.io/pytorchjob-kit/trainer")
    assert code == 0, err
    assert "master-0 | ran from the mirror" in out + err
    code, _, err = run("run", path, "--image", "registry.example.com/ml/trainer=nginx")
    assert code == 2 and "nginx is not a folder here, nor a known image" in err
    assert "or REPO=KNOWN, where KNOWN is one of ghcr.io/pytorchjob-kit/trainer" in " ".join(err.split())


def test_volume_paths_never_leave_the_run_folder(tmp_path):
    body, marker = local_jobs.job("escape", "print('ran')")
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/opt/out", "subPath": "../../../etc"}]
    pod["volumes"] = [{"name": "out", "persistentVolumeClaim": {"claimName": "../results"}}]
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code == 1 and out == ""
    assert "volumeMounts[0].subPath: must be a relative path inside the volume (got '../../../etc')" in err
    assert "persistentVolumeClaim.claimName: is not a claim name (got '../results')" in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "results").exists()
    # A symlink planted in the run folder is not followed out of it.
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results").symlink_to(outside)
    pod["containers"][0]["volumeMounts"][0].pop("subPath")
    pod["volumes"][0]["persistentVolumeClaim"]["claimName"] = "results"
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code == 1 and f"maps /opt/out outside {tmp_path / 'run'} (through a symlink or '..')" in err
    assert list(outside.iterdir()) == []


def test_a_volume_folder_that_cannot_be_made_stops_the_job_cleanly(tmp_path):
    sleeper = "import time; print('up', flush=True); time.sleep(60)"
    body, marker = local_jobs.job("mkfail", sleeper, "print('never')", workers=1)
    pod = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    pod["volumes"] = [{"name": "out", "persistentVolumeClaim": {"claimName": "results"}}]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results").write_text("a file where the claim's folder goes")
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code == 1 and "Traceback" not in err and "internal error" not in err
    assert "worker-0 failed (could not start); its last lines:\n    cannot make its volume folder:" in err
    assert local_jobs.alive(marker) == []


def test_replicas_get_the_pods_env_not_this_shells(tmp_path, monkeypatch):
    monkeypatch.setenv("SHELL_ONLY_SECRET", "do-not-leak")
    code = "import os; print('leak=' + os.environ.get('SHELL_ONLY_SECRET', 'none'), 'home=' + str('HOME' in os.environ))"
    body, marker = local_jobs.job("envcheck", code)
    code_, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code_ == 0, err
    assert "master-0 | leak=none home=True" in out + err


def test_a_rerun_starts_with_fresh_pod_disks_and_keeps_the_claims(tmp_path):
    # Each run counts the files it finds in an emptyDir and in a claim (given as args, which the
    # runner maps to folders), then adds one to each.
    code = ("import os, sys; seen = [len(os.listdir(d)) for d in sys.argv[1:]]; print('seen', seen); "
            "[open(os.path.join(d, 'f%d' % n), 'w').close() for d, n in zip(sys.argv[1:], seen)]")
    body, _ = local_jobs.job("rerun", code)
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0]["args"] = ["/scratch", "/shared"]
    pod["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"},
                                            {"name": "shared", "mountPath": "/shared"}]
    pod["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "shared", "persistentVolumeClaim": {"claimName": "data"}}]
    path = local_jobs.write(tmp_path, body)
    outputs = []
    for _ in range(2):
        code_, out, err = run("run", path, "--run-dir", str(tmp_path / "run"))
        assert code_ == 0, err
        outputs.append(out + err)
    assert "master-0 | seen [0, 0]" in outputs[0]
    assert "pods start with fresh disks: the last run's pod folders are now in" in outputs[1]
    assert "master-0 | seen [0, 1]" in outputs[1]  # a fresh emptyDir, the same claim
    assert (tmp_path / "run" / "pods.previous" / "master-0" / "scratch" / "f0").exists()


def test_a_mount_at_a_prefix_of_this_interpreters_path_does_not_move_the_interpreter(tmp_path):
    top = "/" + Path(sys.executable).parts[1]  # /work for a checkout under /work, /usr for a system python
    body, _ = local_jobs.job("prefix", "import sys; print('args', sys.argv[1:])")
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0]["args"] = [f"{top}/data"]
    pod["containers"][0]["volumeMounts"] = [{"name": "w", "mountPath": top}]
    pod["volumes"] = [{"name": "w", "emptyDir": {}}]
    code, out, err = run("run", local_jobs.write(tmp_path, body), "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    assert f"master-0 | args ['{tmp_path / 'run' / 'pods' / 'master-0' / 'w' / 'data'}']" in out + err


def test_dry_run_warns_of_what_the_trainer_will_refuse_here(tmp_path, monkeypatch):
    from generator.local import pods as plan

    monkeypatch.setattr(plan, "_has_nvidia_gpu", lambda: False)
    values = tmp_path / "bert.yaml"
    values.write_text("job: {name: bert}\ntopology: {workers: 1}\nresources: {gpus: 1}\nargs: [--dir=/data, --epochs, '2']\n")
    code, out, err = run("run", str(values), "--dry-run")
    assert code == 0 and "--backend nccl --dir=/data --epochs 2" in out
    assert "note: Master: the trainer will refuse its args (unrecognized arguments: --dir=/data)" in err
    assert "note: Worker: --backend nccl needs NVIDIA GPUs and this machine has none" in err
    values.write_text("job: {name: bert}\ntopology: {workers: 1}\nargs: [--epochs, '2']\n")
    code, out, err = run("run", str(values), "--dry-run")
    assert code == 0 and "note:" not in err
