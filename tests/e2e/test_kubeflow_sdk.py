"""Real clients on the local cluster see our jobs as on any cluster: the official Kubeflow training
SDK (`kubeflow-training`, what notebooks, Katib and pipelines use) follows a job from `generator
submit` and one from `helm install` of the chart, and the generator's commands take a job the SDK
created; kubectl's wait, logs, events and describe read a finished job from `submit`."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.trainjobs import IMAGE

pytestmark = pytest.mark.e2e
sdk = pytest.importorskip("kubeflow.training", reason="needs the Kubeflow SDK: pip install kubeflow-training==1.9.4 "
                                                      "(the test extra has it)")

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


def sdk_job(name: str):
    """A PyTorchJob as a notebook writes one with the SDK's models: a runPolicy with nothing set."""
    from kubeflow.training import models
    from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec, V1ResourceRequirements

    def template() -> V1PodTemplateSpec:
        return V1PodTemplateSpec(spec=V1PodSpec(containers=[V1Container(
            name="pytorch", image=IMAGE, args=TRAINING,
            resources=V1ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"}))]))

    return models.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob", metadata=V1ObjectMeta(name=name, namespace=NS),
        spec=models.KubeflowOrgV1PyTorchJobSpec(run_policy=models.KubeflowOrgV1RunPolicy(), pytorch_replica_specs={
            "Master": models.KubeflowOrgV1ReplicaSpec(replicas=1, template=template()),
            "Worker": models.KubeflowOrgV1ReplicaSpec(replicas=1, template=template())}))


@pytest.fixture(scope="module")
def jobs(cluster, training_client, tmp_path_factory):
    """sdkjob from `generator submit`, helmjob from `helm install` and fromsdk from the SDK's
    `create_job`, started together (so they train side by side) in a namespace of this module's own."""
    from kubernetes import client

    from generator.controlplane import build, operator
    from generator.controlplane.layout import Layout
    from tests.support import ROOT

    core = client.CoreV1Api(cluster.api())
    core.create_namespace({"metadata": {"name": NS}})
    folder = tmp_path_factory.mktemp("sdk")
    for name in ("sdkjob", "helmjob"):
        (folder / f"{name}.yaml").write_text(VALUES.format(name=name))
    cluster.cli("submit", str(folder / "sdkjob.yaml"), "-n", NS, check=True)
    helm = [str(build.binary(build.HELM_BINARY))]
    env = operator.helm_env(Layout(cluster.dir))
    done = subprocess.run([*helm, "install", "helmjob", str(ROOT / "charts" / "pytorchjob"), "-f",
                           str(folder / "helmjob.yaml"), "-n", NS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    training_client.create_job(job=sdk_job("fromsdk"))
    try:
        yield ("sdkjob", "helmjob")
    finally:
        subprocess.run([*helm, "uninstall", "helmjob", "-n", NS], env=env, capture_output=True, timeout=120)
        core.delete_namespace(NS)


@pytest.fixture(scope="module")
def training_client(cluster):
    from kubeflow.training import TrainingClient
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return TrainingClient(client_configuration=configuration, namespace=NS)


def test_the_sdk_follows_jobs_from_submit_and_helm_to_success_with_their_pods_and_logs(jobs, training_client):
    for name in jobs:
        job = training_client.wait_for_job_conditions(name, wait_timeout=600, polling_interval=2)
        # The SDK's model of the job read back whole: the runPolicy the chart always writes.
        assert job.spec.run_policy.clean_pod_policy == "None" and job.spec.run_policy.suspend is False
        assert training_client.is_job_succeeded(name)
        assert sorted(training_client.get_job_pod_names(name)) == [f"{name}-master-0", f"{name}-worker-0"]
        logs, _ = training_client.get_job_logs(name, is_master=False)
        assert sorted(logs) == [f"{name}-master-0", f"{name}-worker-0"]
        assert LAST_LINE in logs[f"{name}-master-0"]  # rank 0 alone logs its training
    assert {j.metadata.name for j in training_client.list_jobs()} >= set(jobs)


def test_generator_commands_take_a_job_the_sdk_created(cluster, jobs):
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
                     r"Events:\n.*Normal\s+PyTorchJobSucceeded\s+\S+\s+pytorchjob-controller\s+PyTorchJob sdkjob is successfully"):
        assert re.search(expected, text, re.S), f"{expected!r} not in:\n{text}"

