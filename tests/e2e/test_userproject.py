"""Your own code on the local cluster: tests/userproject's manifests, unchanged, through the real
API server and operator, on the real node, which pulls their image from the registry on this
machine: `cluster up --image REPO:TAG=DIR` lays the project's folder over the torch runtime image at
/workspace, where the manifests name their script, and pushes it there as REPO:TAG.

The TrainJob goes through the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 (`cluster up
--trainer`)."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.e2e.conftest import pull_images
from tests.support import REFERENCE, ROOT
from tests.support.waiting import wait_for

# A cluster of its own, whose first pod pulls a 3 GB image: each test's own waits are up to 600 s.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
PROJECT = ROOT / "tests" / "userproject"
IMAGE = "registry.example.com/ml/toy"
SDK_BASE = "pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"  # the Kubeflow training SDK's PYTORCHJOB_BASE_IMAGE
CPU_DEMO = REFERENCE / "training-operator-v1.9.4" / "examples" / "cpu-demo_demo.yaml"


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    # The project's folder laid over the torch runtime image, as the manifests' tag and as Kubeflow's
    # cpu-demo names its image; the Kubeflow SDK's base image for function-based jobs a copy of the trainer's.
    return ["--trainer", "--image", f"{IMAGE}:1.0={PROJECT}", "--image", f"pytorch-cpu:py3.8={PROJECT}",
            "--image", f"{SDK_BASE}=ghcr.io/pytorchjob-kit/trainer"]


@pytest.fixture(scope="module", autouse=True)
def pulled(cluster):
    """The project's image in the node before the first job, which then waits for training alone."""
    pull_images(cluster, [f"{IMAGE}:1.0"], within=600)


def test_the_pytorchjob_trains_through_the_operator_and_writes_its_result(cluster, ns):
    proc = cluster.cli("submit", "tests/userproject/pytorchjob.yaml", "-n", ns, "--wait", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "pytorchjob toy succeeded" in proc.stdout + proc.stderr
    result = json.loads((cluster.claim_folder("toy-output", ns) / "result.json").read_text())
    assert result["world_size"] == 3
    logs = cluster.cli("logs", "toy", "-n", ns, "--replica", "master-0", check=True).stdout
    assert "master-0 | toy: 3 ranks (gloo, cpu), 160 points each" in logs
    assert re.search(r"^master-0 \| toy: wrote /\S+/result\.json$", logs, re.M)  # the claim's folder, as under run


def test_a_failing_script_fails_the_job_and_diagnose_shows_its_exit_code_and_last_lines(cluster, ns, tmp_path):
    documents = list(yaml.safe_load_all((PROJECT / "pytorchjob.yaml").read_text()))
    for spec in documents[1]["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] += ["--fail-at-step", "2"]
    (tmp_path / "failing.yaml").write_text(yaml.safe_dump_all(documents))
    proc = cluster.cli("submit", str(tmp_path / "failing.yaml"), "-n", ns, "--wait", timeout=600)
    assert proc.returncode == 1, proc.stderr
    found = json.loads(cluster.cli("diagnose", "toy", "-n", ns, "--format", "json").stdout)
    failed = [f for f in found if f["object"].startswith("Pod/toy-") and f["reason"] == "Error"]
    assert failed, found
    assert any(re.fullmatch(r"container pytorch exited with code 3 \(Error\); its last log lines:\n(.*\n)*"
                            r"    toy: rank [012] stops at step 2 with exit code 3, as asked", f["message"])
               for f in failed), failed


def test_the_trainjob_runs_every_node_through_torchrun(cluster, ns):
    proc = cluster.cli("submit", "tests/userproject/trainjob.yaml", "-n", ns, "--wait", "--timeout", "600", timeout=660)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("trainjob toy-v2 created\n")
    result = json.loads((cluster.claim_folder("toy-v2-output", ns) / "result.json").read_text())
    assert result["world_size"] == 2


def test_kubeflows_cpu_demo_runs_unchanged(cluster, ns):
    """`torchrun demo.py` in the image's folder: the container starts in the folder laid over the image."""
    if not CPU_DEMO.is_file():
        pytest.skip(f"{CPU_DEMO} is absent: Kubeflow's cpu-demo example comes from ../shared")
    proc = cluster.cli("submit", str(CPU_DEMO), "-n", ns, "--wait", timeout=600)
    assert proc.returncode == 0, proc.stderr
    logs = cluster.cli("logs", "torchrun-cpu", "-n", ns, "--replica", "master-0", check=True).stdout
    assert "master-0 | toy: 4 ranks (gloo, cpu), 120 points each" in logs


def test_a_kubeflow_sdk_training_function_runs_on_its_base_image_as_a_copy_of_the_trainers(cluster, ns):
    """The SDK's `create_job(train_func=...)`: `bash -c` writing the function's source from a heredoc
    to a temporary file, then `torchrun` it, on `docker.io/pytorch/pytorch`."""
    import os
    import subprocess

    sdk_python = os.environ.get("KUBEFLOW_SDK_PYTHON", "")
    if not sdk_python:
        pytest.fail("needs the Kubeflow SDK's venv: `make e2e` makes it (.venv/kubeflow-sdk) and sets KUBEFLOW_SDK_PYTHON")
    done = subprocess.run([sdk_python, str(ROOT / "tests" / "support" / "kubeflow_sdk.py"), "create-function",
                           str(cluster.kubeconfig), ns, "fromfunc"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    proc = cluster.cli("wait", "fromfunc", "-n", ns, "--for", "Succeeded", "--timeout", "600", timeout=660)
    assert proc.returncode == 0, "\n".join([proc.stderr, cluster.cli("diagnose", "fromfunc", "-n", ns).stdout,
                                             cluster.cli("logs", "fromfunc", "-n", ns).stdout])
    logs = cluster.cli("logs", "fromfunc", "-n", ns, "--replica", "master-0", check=True).stdout
    ranks = re.search(r"^master-0 \| sdk function: (\d+) ranks, sum of ranks (\d+)$", logs, re.M)
    assert ranks, logs
    n = int(ranks.group(1))  # 2 pods of torchrun's `auto` processes each
    assert n % 2 == 0 and int(ranks.group(2)) == n * (n + 1) // 2


def test_an_image_the_registry_lacks_is_a_real_pull_failure_whose_fix_names_both_ways_to_put_it_there(cluster, ns,
                                                                                                       tmp_path):
    documents = list(yaml.safe_load_all((PROJECT / "pytorchjob.yaml").read_text()))
    job = documents[1]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = "registry.example.com/ml/toy:2.0"  # a tag not put there
    (tmp_path / "unmapped.yaml").write_text(yaml.safe_dump_all(documents))
    cluster.cli("submit", str(tmp_path / "unmapped.yaml"), "-n", ns, check=True)
    def pulls():
        found = json.loads(cluster.cli("diagnose", "toy", "-n", ns, "--format", "json").stdout or "[]")
        return [f for f in found if f["reason"] in ("ErrImagePull", "ImagePullBackOff")]

    failed = wait_for(pulls, 120, "the node to fail the pull")
    assert "registry.example.com/ml/toy:2.0" in failed[0]["message"]  # containerd's own words
    assert "`python -m generator image load registry.example.com/ml/toy:2.0`" in failed[0]["fix"]
    assert "`python -m generator cluster up --image registry.example.com/ml/toy:2.0=DIR[:PATH]`" in failed[0]["fix"]


def test_cluster_up_again_lays_a_changed_folder_over_the_image_and_new_pods_of_latest_run_it(cluster, ns, tmp_path):
    """The edit-and-rerun loop on the real node: `cluster up --image` on the running cluster builds
    and pushes again, and `latest` is pulled for each new pod (imagePullPolicy Always)."""
    from tests.support.waiting import wait_for

    core = cluster.core()
    said = []
    for i, text in enumerate(["first", "second"]):
        (tmp_path / "message.txt").write_text(text + "\n")
        up = cluster.cli("cluster", "up", "--dir", str(cluster.dir), "--image", f"registry.example.com/ml/edit={tmp_path}",
                         check=True, timeout=300)
        assert f"registry.example.com/ml/edit:latest: {tmp_path} laid over " in up.stderr
        assert "at /workspace" in up.stderr
        pod = {"metadata": {"name": f"edit-{i}"}, "spec": {"restartPolicy": "Never", "containers": [
            {"name": "cat", "image": "registry.example.com/ml/edit", "command": ["cat", "message.txt"]}]}}
        core.create_namespaced_pod(ns, pod)
        name = f"edit-{i}"
        wait_for(lambda name=name: core.read_namespaced_pod(name, ns).status.phase in ("Succeeded", "Failed"), 240,
                 "the pod to run")
        said.append(core.read_namespaced_pod_log(name, ns))
    assert said == ["first\n", "second\n"]
