"""Real clients on the local cluster see our jobs as on any cluster: the official Kubeflow training
SDK (`kubeflow-training`, what notebooks, Katib and pipelines use) follows a job from `generator
submit` and one from `helm install` of the chart, and the generator's commands take a job the SDK
created; kubectl's wait, logs, events and describe read a finished job from `submit`. The SDK runs
in a venv of its own (tests/support/kubeflow_sdk.py says why), which `make e2e` makes and names in
KUBEFLOW_SDK_PYTHON."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support import ROOT
from tests.support.trainjobs import IMAGE

pytestmark = pytest.mark.e2e
SDK_PYTHON = os.environ.get("KUBEFLOW_SDK_PYTHON", "")

NS = "sdk"
# Two pods each, one short epoch on data the trainer makes offline.
TRAINING = ["--dataset=digits", "--epochs=1", "--threads=1"]
VALUES = ("job: {{name: {name}}}\ntopology: {{workers: 1}}\nresources: {{requests: {{cpu: 100m, memory: 128Mi}}}}\n"
          f"args: [{', '.join(TRAINING)}]\n")
LAST_LINE = "epoch 1/1: test accuracy"


def kubectl(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    from generator.controlplane import build

    return subprocess.run([str(build.binary("kubectl")), *args], env=cluster.env, capture_output=True, text=True,
                          timeout=timeout)


def sdk(cluster, *args: str) -> dict:
    """tests/support/kubeflow_sdk.py with the SDK's venv, against this cluster."""
    if not SDK_PYTHON:
        pytest.fail("needs the Kubeflow SDK's venv: `make e2e` makes it (.venv/kubeflow-sdk) and sets KUBEFLOW_SDK_PYTHON")
    action, *rest = args
    done = subprocess.run([SDK_PYTHON, str(ROOT / "tests" / "support" / "kubeflow_sdk.py"), action,
                           str(cluster.kubeconfig), NS, *rest], capture_output=True, text=True, timeout=660)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """sdkjob from `generator submit`, helmjob from `helm install` and fromsdk from the SDK's
    `create_job`, started together (so they train side by side) in a namespace of this module's own."""
    from kubernetes import client

    from generator.controlplane import build, pins
    from generator.controlplane.layout import Layout
    from generator.controlplane.releases.base import helm_env

    core = client.CoreV1Api(cluster.api())
    core.create_namespace({"metadata": {"name": NS}})
    folder = tmp_path_factory.mktemp("sdk")
    for name in ("sdkjob", "helmjob"):
        (folder / f"{name}.yaml").write_text(VALUES.format(name=name))
    cluster.cli("submit", str(folder / "sdkjob.yaml"), "-n", NS, check=True)
    helm = [str(build.binary(pins.HELM_BINARY))]
    env = helm_env(Layout(cluster.dir))
    done = subprocess.run([*helm, "install", "helmjob", str(ROOT / "charts" / "pytorchjob"), "-f",
                           str(folder / "helmjob.yaml"), "-n", NS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if SDK_PYTHON:
        sdk(cluster, "create", "fromsdk", IMAGE, *TRAINING)
    try:
        yield ("sdkjob", "helmjob")
    finally:
        subprocess.run([*helm, "uninstall", "helmjob", "-n", NS], env=env, capture_output=True, timeout=120)
        core.delete_namespace(NS)


def test_the_sdk_follows_jobs_from_submit_and_helm_to_success_with_their_pods_and_logs(cluster, jobs):
    read = sdk(cluster, "follow", *jobs)
    for name in jobs:
        assert read[name]["succeeded"] is True
        # The SDK's model of the job read back whole: the runPolicy the chart always writes.
        assert read[name]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
        assert read[name]["pods"] == [f"{name}-master-0", f"{name}-worker-0"]
        assert sorted(read[name]["logs"]) == [f"{name}-master-0", f"{name}-worker-0"]
        assert LAST_LINE in read[name]["logs"][f"{name}-master-0"]  # rank 0 alone logs its training
    assert set(jobs) <= set(read["listed"])


def test_generator_commands_take_a_job_the_sdk_created(cluster, jobs):
    if not SDK_PYTHON:
        pytest.fail("needs the Kubeflow SDK's venv: `make e2e` makes it (.venv/kubeflow-sdk) and sets KUBEFLOW_SDK_PYTHON")
    waited = cluster.cli("wait", "fromsdk", "-n", NS, "--for", "Succeeded", "--timeout", "600", timeout=660)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() == "pytorchjob fromsdk succeeded"
    status = cluster.cli("status", "fromsdk", "-n", NS, check=True).stdout
    assert status.startswith(f"PyTorchJob fromsdk (namespace {NS}): Succeeded\n")
    logs = cluster.cli("logs", "fromsdk", "-n", NS, check=True).stdout
    assert f"master-0 | {LAST_LINE}" in logs
    diagnosed = cluster.cli("diagnose", "fromsdk", "-n", NS)
    assert diagnosed.returncode == 0, diagnosed.stdout + diagnosed.stderr
    assert diagnosed.stdout.startswith(f"PyTorchJob fromsdk (namespace {NS}): Succeeded, 2 pod(s)\n")


def test_kubectl_wait_logs_events_and_describe_read_a_finished_job_from_submit(cluster, jobs):
    done = kubectl(cluster, "-n", NS, "wait", "--for=condition=Succeeded", "pytorchjob/sdkjob", "--timeout=600s",
                   timeout=660)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pytorchjob.kubeflow.org/sdkjob condition met"

    logs = kubectl(cluster, "-n", NS, "logs", "sdkjob-master-0")
    assert logs.returncode == 0, logs.stderr
    assert LAST_LINE in logs.stdout

    events = kubectl(cluster, "-n", NS, "get", "events", "--field-selector", "involvedObject.name=sdkjob", "-o", "json")
    assert events.returncode == 0, events.stderr
    reasons = {e["reason"] for e in json.loads(events.stdout)["items"]}
    # What the operator records on a cloud cluster: its pods and Services made, then the outcome.
    assert {"SuccessfulCreatePod", "SuccessfulCreateService", "PyTorchJobSucceeded"} <= reasons, reasons
    pod_events = kubectl(cluster, "-n", NS, "get", "events", "--field-selector", "involvedObject.name=sdkjob-master-0",
                         "-o", "json")
    # ... and on each pod, the scheduler and the node, as a kubelet records them.
    assert {"Scheduled", "Pulled", "Created", "Started"} <= {e["reason"] for e in json.loads(pod_events.stdout)["items"]}

    described = kubectl(cluster, "-n", NS, "describe", "pytorchjob", "sdkjob")
    assert described.returncode == 0, described.stderr
    text = described.stdout
    for expected in (r"Name:\s+sdkjob\n", rf"Namespace:\s+{NS}\n", r"Kind:\s+PyTorchJob\n",
                     r"Run Policy:\n\s+Clean Pod Policy:\s+None\n\s+Suspend:\s+false\n",
                     r"Reason:\s+PyTorchJobSucceeded\n\s+Status:\s+True\n\s+Type:\s+Succeeded\n",
                     # The age reads "6s (x2 over 6s)" where the operator recorded the event twice.
                     r"Events:\n.*Normal\s+PyTorchJobSucceeded\s+\S+(?: \(x\d+ over \S+\))?\s+"
                     r"pytorchjob-controller\s+PyTorchJob sdkjob is successfully"):
        assert re.search(expected, text, re.S), f"{expected!r} not in:\n{text}"

