"""`generator run` of your own code (tests/userproject, not our trainer) under `--image REPO=DIR`:
the README's example as written, a script that fails, and the commands users write (a shell's
`-c` script with a heredoc, `python -m`, workingDir, `$(VAR)`), restarts and Ctrl-C."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REFERENCE, ROOT, docs, local_jobs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.trains
PROJECT = ROOT / "tests" / "userproject"
IMAGE = "registry.example.com/ml/toy"
CPU_DEMO = REFERENCE / "training-operator-v1.9.4" / "examples" / "cpu-demo_demo.yaml"


def generator(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """As a user's shell runs it: nothing of the test's environment but the checkout on PYTHONPATH."""
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def result(folder: Path) -> dict:
    return json.loads((folder / "result.json").read_text())


@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_the_readmes_own_code_example_runs_as_written(tmp_path):
    block = docs.block("run.md", "Your own code")
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert [shlex.split(line)[0] for line in lines] == ["python", "python", "curl", "python"]
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    ran = []
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "curl":  # CI has no internet: the same file, from ../shared
            if not CPU_DEMO.is_file():
                pytest.skip(f"{CPU_DEMO} is absent: Kubeflow's cpu-demo example comes from ../shared")
            shutil.copy(CPU_DEMO, tmp_path / "demo.yaml")
            continue
        ran.append(generator(*argv[3:], cwd=tmp_path))
        # the replicas' own lines are on stdout: a failure shows them whole, the root cause included
        assert ran[-1].returncode == 0, f"{line}\n{ran[-1].stdout}\n{ran[-1].stderr}"
    pytorchjob, trainjob, demo = ran
    # 1 Master + 2 Workers: three ranks; the Master's claim holds what the script wrote
    assert "outputs in runs/toy/toy-output: result.json" in pytorchjob.stderr
    assert result(tmp_path / "runs/toy/toy-output")["world_size"] == 3
    assert "master-0 | toy: 3 ranks (gloo, cpu), 160 points each" in pytorchjob.stdout
    # 2 nodes, each torchrun with the PET_* variables alone: two ranks
    assert "job succeeded: every node succeeded" in trainjob.stderr
    assert result(tmp_path / "runs/toy-v2/toy-v2-output")["world_size"] == 2
    # Kubeflow's example unchanged: `torchrun demo.py` in the image's folder, nprocPerNode 2 on 2 nodes
    assert "master-0 | toy: 4 ranks (gloo, cpu), 120 points each" in demo.stdout
    assert "job succeeded: the Master succeeded" in demo.stderr


def test_a_failing_script_fails_the_job_with_its_exit_code_and_last_lines(tmp_path):
    documents = list(yaml.safe_load_all((PROJECT / "pytorchjob.yaml").read_text()))
    for spec in documents[1]["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] += ["--fail-at-step", "2"]
    (tmp_path / "failing.yaml").write_text(yaml.safe_dump_all(documents))
    proc = generator("run", "failing.yaml", "--image", f"{IMAGE}={PROJECT}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    # Every rank stops alike; whichever the runner sees first fails the job (ExitCode: 3 is permanent).
    assert re.search(r"job failed: (master-0|worker-[01]) failed with exit code 3 \(exit code 3 is permanent under "
                     r"restartPolicy ExitCode\); its last lines:\n(    .*\n)*    toy: rank [012] stops at step 2 with "
                     r"exit code 3, as asked\n", proc.stderr), proc.stderr


def test_a_shell_script_with_a_heredoc_python_m_working_dir_and_vars_run_as_in_the_image(tmp_path):
    script = ("set -eu\ncat > /output/note.txt <<EOF\nfrom $(WHO) in $(pwd)\nEOF\n"
              "python -m train --epochs 1 --out /output\nsh -c 'test -f /src/toyset.py && echo found /src'")
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "shell"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
               "containers": [{"name": "pytorch", "image": f"{IMAGE}:1.0", "workingDir": "/src",
                               "command": ["bash", "-c"], "args": [script], "env": [{"name": "WHO", "value": "me"}],
                               "volumeMounts": [{"name": "out", "mountPath": "/output"}]}],
               "volumes": [{"name": "out", "emptyDir": {}}]}}}}}}
    (tmp_path / "shell.yaml").write_text(yaml.safe_dump(job))
    # No PATH: the image holds the folder at the container's workingDir, where `python -m` finds it.
    proc = generator("run", "shell.yaml", "--image", f"{IMAGE}={PROJECT}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "runs/shell/pods/master-0/out"
    # $(WHO) is Kubernetes' expansion; $(pwd) the shell's own, in the code's folder
    assert (out / "note.txt").read_text() == f"from me in {PROJECT}\n"
    assert result(out)["world_size"] == 1
    assert f"master-0 | found {PROJECT}" in proc.stdout


def project_of(tmp_path, name: str, source: str):
    """A project folder of one script, for `--image REPO=DIR`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / name).write_text(source)
    return project


def test_ctrl_c_stops_your_torchrun_and_every_process_it_started(tmp_path):
    # Each rank marks a file when it is up (their printed lines would share one pipe, and interleave).
    project = project_of(tmp_path, "sleeper.py", "import os, pathlib, sys, time\n"
                         "pathlib.Path(sys.argv[1], os.environ['LOCAL_RANK']).write_text('up')\ntime.sleep(120)\n")
    (tmp_path / "up").mkdir()
    body, marker = local_jobs.job("interrupt", "unused")
    container = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container.update(image=f"{IMAGE}:1.0",
                     command=["torchrun", "--nproc-per-node=2", "/workspace/sleeper.py", str(tmp_path / "up")])
    runner = local_jobs.Generator("run", local_jobs.write(tmp_path, body), "--image", f"{IMAGE}={project}", cwd=tmp_path)
    wait_for(lambda: sorted(p.name for p in (tmp_path / "up").iterdir()) == ["0", "1"], 120, "both ranks to start")
    runner.proc.send_signal(signal.SIGINT)
    code, _, err = runner.finish()
    assert code == 130 and "stopped by SIGINT" in err and "Traceback" not in err
    assert local_jobs.alive(marker) == []  # torchrun's workers too


def test_values_name_your_image_and_command_as_a_manifest_does(tmp_path):
    (tmp_path / "values.yaml").write_text(f"job: {{name: vtoy}}\nimage: {{repository: {IMAGE}, tag: '1.4'}}\n"
                                          "command: [torchrun, /workspace/train.py]\nargs: [--epochs, '1']\n")
    proc = generator("run", "values.yaml", "--image", f"{IMAGE}={PROJECT}", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (f"master-0 (rank 0, restartPolicy OnFailure): {sys.executable} -m torch.distributed.run "
            f"{PROJECT}/train.py --backend gloo --epochs 1") in proc.stdout
    refused = generator("run", "values.yaml", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 1 and f"pass `--image {IMAGE}=host`" in refused.stderr


def test_your_script_is_restarted_by_its_restart_policy_as_the_trainer_is(tmp_path):
    # The first life fails, the second finds the first's mark on the claim and succeeds.
    project = project_of(tmp_path, "flaky.py", "import pathlib, sys\nmark = pathlib.Path(sys.argv[1]) / 'tried'\n"
                         "if not mark.exists():\n    mark.write_text('1'); print('first life fails'); "
                         "sys.exit(1)\nprint('second life succeeds')\n")
    body, marker = local_jobs.job("flaky", "unused")
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["containers"][0].update(image=f"{IMAGE}:1.0", command=["python", "flaky.py", "/state"],
                                volumeMounts=[{"name": "state", "mountPath": "/state"}])
    pod["volumes"] = [{"name": "state", "persistentVolumeClaim": {"claimName": "state"}}]
    proc = generator("run", local_jobs.write(tmp_path, body), "--image", f"{IMAGE}={project}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "master-0 | exited with code 1; restarting (restartPolicy OnFailure, restart 1)" in proc.stdout
    assert "master-0 | second life succeeds" in proc.stdout
    assert re.search(r"^master-0\s+Succeeded\s+1\s+0", proc.stderr, re.M)
    assert local_jobs.alive(marker) == []


def test_host_runs_your_command_on_this_machines_files_with_its_python(tmp_path):
    body, _ = local_jobs.job("onhost", "unused")
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(
        image=f"{IMAGE}:1.0", command=["sh", "-c", "cd $(CODE) && python -c 'import sys, toyset; print(toyset.FEATURES, "
                                                   "sys.executable)'"],
        env=[{"name": "CODE", "value": str(PROJECT)}])
    proc = generator("run", local_jobs.write(tmp_path, body), "--image", f"{IMAGE}=host", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"master-0 | 8 {sys.executable}" in proc.stdout  # the script's `python` is the tool's interpreter
