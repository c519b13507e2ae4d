"""The README's helm commands, run as written with the helm CLI and kubectl against a cluster that
starts with no operator (`cluster up --no-operator`): install both charts, follow the job,
upgrade and test the operator, uninstall both, and what each step leaves in the cluster; between
them, the README's generator commands for a cluster, on the same mnist.yaml. One change to the
README's mnist.yaml: the digits data set, because there is no internet here."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import pull_images, trainer_image
from tests.support import ROOT, docs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def node_options():
    # The node `cluster up` chooses (the real node where it can run), which offers this machine's CPUs:
    # mnist.yaml's three pods of 500m fit on two cores.
    return ["--no-operator"]


@pytest.fixture(scope="module", autouse=True)
def pulled(cluster):
    """The trainer's image in the real node before the README's job, whose log is then followed from its start."""
    pull_images(cluster, [trainer_image()])


def readme_commands() -> list[str]:
    return [line for block in docs.blocks("charts.md", "The job chart") for line in docs.command_lines(block, ("helm ", "kubectl "))]


def generator_commands() -> list[str]:
    """The README's `On a cluster` block."""
    return [line.split("  #")[0].strip() for line in docs.block("generator.md", "On a cluster").splitlines() if line.strip()]


def mnist_yaml() -> str:
    text = docs.block("charts.md", "The job chart", fence="yaml").removeprefix("# mnist.yaml\n")
    assert '"--dataset", "mnist"' in text
    return text.replace('"--dataset", "mnist"', '"--dataset", "digits"')


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Where the README's commands run: the charts as in a clone, and mnist.yaml beside them."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "charts").symlink_to(ROOT / "charts")
    (folder / "mnist.yaml").write_text(mnist_yaml())
    # A job only the operator's webhook refuses: two Masters.
    (folder / "mnist-bad.yaml").write_text("""apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bad}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: ghcr.io/pytorchjob-kit/trainer:0.1.0}]
""")
    return folder


class Shell:
    def __init__(self, cluster, workdir: Path):
        from generator.controlplane import build, pins
        from generator.controlplane.layout import Layout
        from generator.controlplane.releases.base import helm_env

        self.cluster, self.workdir = cluster, workdir
        self.tools = {"helm": str(build.binary(pins.HELM_BINARY)), "kubectl": str(build.binary("kubectl")),
                      "python": sys.executable}
        self.env = {**helm_env(Layout(cluster.dir)), "PYTHONPATH": str(ROOT)}

    def __call__(self, line: str, timeout: float = 300) -> subprocess.CompletedProcess:
        words = shlex.split(line)
        return subprocess.run([self.tools[words[0]], *words[1:]], cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def operator_pods(cluster, terminating: bool = False) -> list:
    pods = cluster.core().list_namespaced_pod("kubeflow", label_selector="app.kubernetes.io/component=controller").items
    return [p for p in pods if terminating or not p.metadata.deletion_timestamp]


def ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def job_condition(cluster, name: str, namespace: str) -> str:
    from kubernetes import client

    job = client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object("kubeflow.org", "v1", namespace,
                                                                              "pytorchjobs", name)
    true = [c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"]
    return true[-1] if true else ""


def leftovers(cluster, release: str) -> list[str]:
    """Every object, of any kind in any namespace, that still carries the release's instance label."""
    kubectl = Shell(cluster, ROOT)
    kinds = kubectl("kubectl api-resources --verbs=list -o name").stdout.split()
    found = []
    for kind in kinds:
        if kind.startswith("events"):
            continue
        listed = kubectl(f"kubectl get {kind} -A -l app.kubernetes.io/instance={release} -o name")
        found += listed.stdout.split()
    return found


@pytest.mark.timeout(900)  # two 3-pod trainings of five epochs, two helm upgrades and tests, each waited for
def test_the_readme_commands_install_run_upgrade_test_and_uninstall_both_charts(cluster, workdir):
    from kubernetes import client

    commands = readme_commands()
    assert commands == [
        "helm install training charts/pytorch-operator -n kubeflow --create-namespace",
        "helm install mnist charts/pytorchjob -f mnist.yaml -n training --create-namespace",
        "kubectl -n training logs -f mnist-master-0",
        "helm upgrade training charts/pytorch-operator -n kubeflow --set leaderElection=true --wait",
        "helm test training -n kubeflow",
        "helm uninstall mnist -n training",
        "helm uninstall training -n kubeflow",
    ]
    sh = Shell(cluster, workdir)
    install_operator, install_job, follow, upgrade, test, uninstall_job, uninstall_operator = commands

    done = sh(install_operator)
    assert done.returncode == 0, done.stderr
    # The operator chart's README checks the install with kubectl: those lines pass as written.
    operator_readme = (ROOT / "charts" / "pytorch-operator" / "README.md").read_text()
    install_block = re.search(r"## Install\n\n```console\n(.*?)```", operator_readme, re.S).group(1)
    checks = [line for line in install_block.splitlines() if line.startswith("kubectl ")]
    assert [c.split()[1:3] for c in checks] == [["wait", "--for=condition=Established"], ["-n", "kubeflow"]]
    for line in checks:
        checked = sh(line + " --timeout=180s", timeout=240)
        assert checked.returncode == 0, line + "\n" + checked.stderr
    (first,) = wait_for(lambda: [p for p in operator_pods(cluster) if ready(p)], 180, "the operator to be Ready")

    done = sh(install_job)
    assert done.returncode == 0, done.stderr
    # As a user would, follow the log once the pod is there; it ends when the Master does.
    wait_for(lambda: sh("kubectl -n training get pod mnist-master-0").returncode == 0, 180, "the Master's pod")
    logs = wait_for(lambda: (lambda p: p if p.returncode == 0 and "test accuracy" in p.stdout else None)(
        sh(follow, timeout=900)), 900, "the Master's log to end")
    assert "epoch 5/5: test accuracy" in logs.stdout
    wait_for(lambda: job_condition(cluster, "mnist", "training") == "Succeeded", 300, "mnist to succeed")

    # The upgrade rolls the operator, and its test passes right after it, as on any cluster: the new
    # pod is Ready when --wait returns, the old one served until then.
    done = sh(upgrade)
    assert done.returncode == 0, done.stderr
    assert any(ready(p) and p.metadata.name != first.metadata.name for p in operator_pods(cluster))
    done = sh(test)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Phase:          Succeeded" in done.stdout
    # Then the old pod goes, leaving one with the new flag.
    (second,) = wait_for(lambda: [p for p in operator_pods(cluster) if ready(p) and p.metadata.name != first.metadata.name
                                  and "--leader-elect" in " ".join(p.spec.containers[0].args or [])]
                         and len(operator_pods(cluster)) == 1 and operator_pods(cluster), 240, "the operator to roll")
    assert second.status.pod_ip != first.status.pod_ip
    # The certificate the operator wrote survived the upgrade, and its webhook still answers.
    secret = cluster.core().read_namespaced_secret("training-pytorch-operator-webhook-cert", "kubeflow")
    assert {"tls.crt", "tls.key"} <= set(secret.data or {})
    refused = sh("kubectl -n training create --dry-run=server -f mnist-bad.yaml")
    assert refused.returncode != 0, refused.stdout
    assert "denied the request: spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1" in refused.stderr

    # The job's release upgrades in place too (a field the operator's webhook lets change), then
    # its (empty) test suite passes, and the finished job keeps its outcome.
    done = sh("helm upgrade mnist charts/pytorchjob -f mnist.yaml -n training "
              "--set runPolicy.ttlSecondsAfterFinished=3600 --wait")
    assert done.returncode == 0, done.stderr
    done = sh("helm test mnist -n training")
    assert done.returncode == 0, done.stdout + done.stderr
    job = client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object(
        "kubeflow.org", "v1", "training", "pytorchjobs", "mnist")
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False, "ttlSecondsAfterFinished": 3600}
    assert job_condition(cluster, "mnist", "training") == "Succeeded"

    # A second operator release is refused before anything is created.
    second_release = sh("helm install other charts/pytorch-operator -n other-ops --create-namespace")
    assert second_release.returncode != 0
    assert ('the training operator already runs in this cluster: Deployment kubeflow/training-pytorch-operator of '
            'release "training"') in second_release.stderr
    assert "helm upgrade training charts/pytorch-operator -n kubeflow" in second_release.stderr

    done = sh(uninstall_job)
    assert done.returncode == 0, done.stderr
    core = cluster.core()
    wait_for(lambda: not core.list_namespaced_pod("training").items, 120, "the job's pods to go")
    assert [c.metadata.name for c in core.list_namespaced_persistent_volume_claim("training").items] == ["mnist-output"]
    assert leftovers(cluster, "mnist") == ["persistentvolumeclaim/mnist-output"]  # output.keep

    # The README's generator block for a cluster, as written, with the operator still installed.
    block = generator_commands()
    assert [line.split()[:4] for line in block] == [
        ["kubectl", "create", "namespace", "training"], *[["python", "-m", "generator", verb] for verb in (
            "submit", "status", "logs", "logs", "wait", "delete")]]
    # The claim helm kept is release mnist's; submit (release "release") is told so, and starts afresh without it.
    refused = sh(block[1], timeout=120)
    assert refused.returncode == 1 and "PersistentVolumeClaim mnist-output belongs to another Helm release" in refused.stderr
    assert "--release" in refused.stderr and "kubectl delete persistentvolumeclaims mnist-output -n training" in refused.stderr
    assert sh("kubectl -n training delete pvc mnist-output").returncode == 0
    outputs = []
    for line in block[1:]:  # training is there already: helm created it
        done = sh(line, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
        outputs.append(done)
    submitted, status, followed, previous, waited, deleted = outputs
    assert submitted.stdout.splitlines() == ["pytorchjob mnist created", "pytorchjob mnist succeeded"]
    assert "mnist: Succeeded" in submitted.stderr
    assert status.stdout.startswith("PyTorchJob mnist (namespace training): Succeeded\n")
    assert "master-0 | epoch 5/5: test accuracy" in followed.stdout
    assert "master-0: no log:" in previous.stderr  # it never restarted: there is no earlier container
    assert waited.stdout.strip() == "pytorchjob mnist succeeded"
    assert deleted.stdout.splitlines() == ["pytorchjob mnist deleted", "persistentvolumeclaim mnist-output deleted"]
    assert leftovers(cluster, "mnist") == []

    done = sh(uninstall_operator)
    assert done.returncode == 0, done.stderr
    # Gone, not only terminating: the real node gives the operator its grace period to stop in.
    wait_for(lambda: not operator_pods(cluster, terminating=True), 120, "the operator's pod to go")
    extensions = client.ApiextensionsV1Api(cluster.api())
    assert extensions.read_custom_resource_definition("pytorchjobs.kubeflow.org")  # crds.keep
    assert leftovers(cluster, "training") == ["customresourcedefinition.apiextensions.k8s.io/pytorchjobs.kubeflow.org"]

    # The kept CRD belongs to "training": another name is told how to adopt it.
    other = sh("helm install ops charts/pytorch-operator -n kubeflow")
    assert other.returncode != 0 and 'the CRD pytorchjobs.kubeflow.org belongs to release "training"' in other.stderr

    # Installed again under its name with crds.keep=false, the CRD goes with the release.
    done = sh("helm install training charts/pytorch-operator -n kubeflow --set crds.keep=false")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: [p for p in operator_pods(cluster) if ready(p)], 180, "the operator to be Ready again")
    assert sh(uninstall_operator).returncode == 0
    wait_for(lambda: not operator_pods(cluster, terminating=True), 120, "the operator's pod to go again")
    wait_for(lambda: not extensions.list_custom_resource_definition(
        field_selector="metadata.name=pytorchjobs.kubeflow.org").items, 60, "the CRD to go")
    assert leftovers(cluster, "training") == []


# docs/charts.md's `From an OCI registry`, on the registry on this machine: a repository of the test's
# own there stands for the page's registry, and each command that reaches it gets the client certificate.
OCI_HOST = "registry.example.com"


@pytest.mark.timeout(600)  # the operator's pod started from the pushed chart, and a job from the other
def test_the_oci_block_pushes_both_charts_shows_their_values_and_installs_them_from_the_registry(cluster, workdir):
    from generator.controlplane import oci_charts, registry
    from tests.support.samples import mismatch

    reg = registry.default()
    stand_in = f"{reg.address}/readme"
    steps = docs.console_steps(docs.block("charts.md", "From an OCI registry"))
    assert [c.split()[:2] for c, _ in steps] == [["helm", "package"]] * 2 + [["helm", "push"]] * 2 + [
        ["helm", "show"]] + [["helm", "install"]] * 2
    sh = Shell(cluster, workdir)
    try:
        for command, sample in steps:
            line = command.replace(OCI_HOST, stand_in)
            if "oci://" in line:
                line += " " + " ".join(oci_charts.tls_flags(reg))
            done = sh(line)
            printed = (done.stdout + done.stderr).replace(stand_in, OCI_HOST)
            assert done.returncode == 0, f"{line}\n{printed}"
            assert mismatch(sample, printed) == "", f"{command}: {mismatch(sample, printed)}\n{printed}"
            if command.startswith("helm install training "):  # its webhook judges the job's install
                wait_for(lambda: [p for p in operator_pods(cluster) if ready(p)], 180, "the operator from the registry")
        version = oci_charts.version(oci_charts.CHARTS[1])
        job = cluster.custom().get_namespaced_custom_object("kubeflow.org", "v1", "training", "pytorchjobs", "mnist")
        assert job["metadata"]["labels"]["helm.sh/chart"] == f"pytorchjob-{version}"
        listed = json.loads(sh("helm list -A -o json").stdout)
        assert sorted((r["name"], r["chart"]) for r in listed) == [("mnist", f"pytorchjob-{version}"),
                                                                  ("training", f"pytorch-operator-{version}")]
    finally:
        for line in ("helm uninstall mnist -n training", "kubectl -n training delete pvc mnist-output --ignore-not-found",
                     "helm uninstall training -n kubeflow"):
            sh(line)
        for chart in oci_charts.CHARTS:  # the registry's storage outlives the test: its repository goes
            digest = reg.has(f"readme/{oci_charts.name(chart)}")
            if digest:
                reg.request(f"/v2/readme/{oci_charts.REPOSITORY}/{chart.name}/manifests/{digest}", method="DELETE")
