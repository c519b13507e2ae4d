"""The Kubeflow SDK for Trainer v2 (`kubeflow` 0.5, its TrainerClient: how most Trainer v2 users
list, follow and read TrainJobs, and send training functions) on the local cluster with the real
Kubeflow Trainer v2.3.0: it follows a TrainJob from `generator submit` and one from `helm install`
of the chart to Complete with their nodes and logs, a training function it sends runs on upstream's
torch-distributed runtime, and the generator's commands read that job. The SDK runs in a venv of
its own (tests/support/kubeflow_sdk_v2.py says why), which `make e2e` makes and names in
KUBEFLOW_SDK_V2_PYTHON.

The chart's default limits hold memory alone, which the SDK cannot read (kubeflow/sdk#516): these
jobs pass only because the chart gives each TrainJob node a CPU limit too."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from tests.support import ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
SDK_PYTHON = os.environ.get("KUBEFLOW_SDK_V2_PYTHON", "")
NEEDS = "needs the Kubeflow SDK 0.5's venv: `make e2e` makes it (.venv/kubeflow-sdk-v2) and sets KUBEFLOW_SDK_V2_PYTHON"

NS = "sdk2"
# Two nodes each, one short epoch on data the trainer makes offline; the chart's default memory limit.
VALUES = ("target: v2\njob: {{name: {name}}}\ntopology: {{workers: 1}}\nresources: {{requests: {{cpu: 100m, memory: 128Mi}}}}\n"
          "args: [--dataset=digits, --epochs=1, --threads=1]\n")
LAST_LINE = "epoch 1/1: test accuracy"


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    # The SDK's training functions run on torch-distributed's pytorch/pytorch image, which the registry on this
    # machine holds as the trainer's Python and torch. Two jobs of two 100m nodes, then the SDK's of two 500m nodes.
    return ["--trainer"]


def sdk(cluster, *args: str) -> dict:
    """tests/support/kubeflow_sdk_v2.py with the SDK's venv, against this cluster."""
    if not SDK_PYTHON:
        pytest.fail(NEEDS)
    action, *rest = args
    done = subprocess.run([SDK_PYTHON, str(ROOT / "tests" / "support" / "kubeflow_sdk_v2.py"), action,
                           str(cluster.kubeconfig), NS, *rest], capture_output=True, text=True, timeout=660)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """sdkjob from `generator submit` and helmjob from `helm install`, started together in a
    namespace of this module's own."""
    from generator.cluster.ops import RUNTIME_UNSEEN
    from generator.controlplane import build, pins
    from generator.controlplane.layout import Layout
    from generator.controlplane.releases.base import helm_env

    core = cluster.core()
    core.create_namespace({"metadata": {"name": NS}})
    folder = tmp_path_factory.mktemp("sdk2")
    for name in ("sdkjob", "helmjob"):
        (folder / f"{name}.yaml").write_text(VALUES.format(name=name))
    cluster.cli("submit", str(folder / "sdkjob.yaml"), "-n", NS, check=True)
    helm = [str(build.binary(pins.HELM_BINARY))]
    env = helm_env(Layout(cluster.dir))

    def install():
        return subprocess.run([*helm, "install", "helmjob", str(ROOT / "charts" / "pytorchjob"), "-f",
                               str(folder / "helmjob.yaml"), "-n", NS], env=env, capture_output=True, text=True,
                              timeout=120)

    done = install()
    # Trainer's webhook looks the runtime up in its informer cache, which may not yet hold the one the
    # chart's hook created a moment before (kubeflow/trainer checks runtimeRef there): a user installs
    # again, as `generator submit` asks again itself. Any other refusal fails here.
    for _ in range(5):
        if done.returncode == 0 or RUNTIME_UNSEEN not in done.stderr:
            break
        subprocess.run([*helm, "uninstall", "helmjob", "-n", NS], env=env, capture_output=True, timeout=120)
        time.sleep(2)
        done = install()
    assert done.returncode == 0, done.stderr
    try:
        yield ("sdkjob", "helmjob")
    finally:
        subprocess.run([*helm, "uninstall", "helmjob", "-n", NS], env=env, capture_output=True, timeout=120)
        core.delete_namespace(NS)


def test_the_sdk_follows_trainjobs_from_submit_and_helm_to_complete_with_their_nodes_and_logs(cluster, jobs):
    read = sdk(cluster, "follow", *jobs)
    # Trainer's version read from the kubeflow-trainer-public ConfigMap, every runtime labelled: no warning.
    assert read["warnings"] == []
    for name in jobs:
        job = read[name]
        assert (job["status"], job["nodes"], job["runtime"]) == ("Complete", 2, name)  # the chart's TrainingRuntime
        # Each node found by JobSet's labels and its completion index; a CPU device, one process each.
        assert [(s["name"], s["status"], s["device"], s["count"]) for s in job["steps"]] == [
            ("node-0", "Succeeded", "cpu", "1"), ("node-1", "Succeeded", "cpu", "1")]
        assert all(re.fullmatch(rf"{name}-node-0-{i}-\w+", s["pod"]) for i, s in enumerate(job["steps"]))
        assert any(LAST_LINE in line for line in job["logs"]["node-0"])  # rank 0 alone logs its training
        assert not any(LAST_LINE in line for line in job["logs"]["node-1"])
    assert set(jobs) <= set(read["listed"])


def test_the_sdk_deletes_a_trainjob_from_submit(cluster, jobs):
    from kubernetes import client

    sdk(cluster, "follow", "sdkjob")  # done before it goes, whatever order the tests run in
    assert sdk(cluster, "delete", "sdkjob")["deleted"] == "sdkjob"
    custom = client.CustomObjectsApi(cluster.api())
    wait_for(lambda: "sdkjob" not in [j["metadata"]["name"] for j in custom.list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", NS, "trainjobs")["items"]], 120, "the TrainJob to go")
    missing = cluster.cli("status", "sdkjob", "-n", NS)
    assert missing.returncode == 1 and f"PyTorchJob sdkjob not found in namespace {NS}, nor a TrainJob" in missing.stderr


def test_a_training_function_sent_through_the_sdk_completes_and_the_generators_commands_read_it(cluster, jobs):
    """`TrainerClient().train(trainer=CustomTrainer(func=...), runtime="torch-distributed")`: the
    SDK names the job, writes the function's source from a heredoc and starts it with torchrun on
    pytorch/pytorch, two nodes of half a CPU each."""
    sent = sdk(cluster, "train")
    name = sent["name"]
    assert (sent["status"], sent["nodes"], sent["runtime"]) == ("Complete", 2, "torch-distributed")
    assert [(s["name"], s["status"]) for s in sent["steps"]] == [("node-0", "Succeeded"), ("node-1", "Succeeded")]
    assert "sdk function: 2 ranks, sum of ranks 3" in sent["logs"]["node-0"]

    waited = cluster.cli("wait", name, "-n", NS, "--for", "Succeeded", "--timeout", "60", timeout=120)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() == f"trainjob {name} complete"
    status = cluster.cli("status", name, "-n", NS, check=True).stdout
    assert status.startswith(f"TrainJob {name} (namespace {NS}): Complete\n")
    logs = cluster.cli("logs", name, "-n", NS, check=True).stdout
    assert "node-0-0 | sdk function: 2 ranks, sum of ranks 3" in logs.splitlines()
    diagnosed = cluster.cli("diagnose", name, "-n", NS)
    assert diagnosed.returncode == 0, diagnosed.stdout + diagnosed.stderr
    assert diagnosed.stdout.startswith(f"TrainJob {name} (namespace {NS}): Complete, 2 pod(s)\n")
