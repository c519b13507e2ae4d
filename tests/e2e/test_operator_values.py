"""The operator chart installed the way users of other charts write their values: their own
image repository and tag (their registry's mirror of the operator's image), and a namespace that
exists before the install (namespace.create false). On the node `cluster up` chooses: the real
node pulls the mirror's name from the registry on this machine."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from generator import paths
from tests.e2e.conftest import leftover_processes, needs_real_node
from tests.support import ROOT

pytestmark = pytest.mark.e2e
NAMESPACE = "ai-platform"
# The image the chart names by default, which this machine made for the registry, and the user's mirror of it.
CHART_IMAGE = yaml.safe_load((paths.OPERATOR_CHART / "values.yaml").read_text())["image"]
REPOSITORY, TAG = "registry.example.com/mirror/training-operator", CHART_IMAGE["tag"]


@pytest.fixture(scope="module")
def operator_values():
    # A platform team copies the operator's image into its own registry (skopeo copy, crane copy); here,
    # the image this machine made, loaded into the registry under the mirror's name before `cluster up`.
    done = subprocess.run([sys.executable, "-m", "generator", "image", "load",
                           f"{CHART_IMAGE['repository']}:{TAG}", "--as", f"{REPOSITORY}:{TAG}"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return {"image": {"repository": REPOSITORY, "tag": TAG}, "namespace": {"create": False, "name": NAMESPACE}}


@needs_real_node
def test_values_naming_an_operator_image_the_registry_lacks_are_refused_before_anything_starts(tmp_path_factory):
    """The real node pulls only from the registry on this machine: a mirror not loaded there would
    leave the operator in ImagePullBackOff and `cluster up` waiting out its timeout."""
    folder = tmp_path_factory.mktemp("held")
    given = folder.with_name("held-values.yaml")
    missing = f"registry.example.com/mirror/never-loaded:{TAG}"
    given.write_text(yaml.safe_dump({"image": {"repository": missing.rsplit(":", 1)[0], "tag": TAG}}))
    done = subprocess.run([sys.executable, "-m", "generator", "cluster", "up", "--dir", str(folder),
                           "-f", str(given)], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert (f"error: -f {given}: the node pulls {missing} from the registry on this machine, which does not "
            f"hold it, so the operator would never start; put it there first: `python -m generator image load "
            f"{missing}`") in done.stderr
    assert f"`python -m generator image load IMAGE --as {missing}` for your mirror" in done.stderr
    assert not (folder / "state.json").exists() and not leftover_processes(folder)  # nothing was started


def test_the_install_lands_in_the_existing_namespace_with_the_users_image(cluster):
    from kubernetes import client

    api = cluster.api()
    (deployment,) = client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items
    (container,) = deployment.spec.template.spec.containers
    assert container.image == f"{REPOSITORY}:{TAG}"
    namespace = client.CoreV1Api(api).read_namespace(NAMESPACE)
    assert "helm.sh/chart" not in (namespace.metadata.labels or {})  # created beside the chart, not by it
    assert client.CoreV1Api(api).list_namespaced_service_account(NAMESPACE).items


def test_the_operator_serves_its_webhook_from_that_namespace(cluster, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "two-masters"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0"}]}}}}}}))
    from kubernetes import client

    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(cluster.api()).create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", json.loads(manifest.read_text()))
    assert "denied the request" in json.loads(refused.value.body)["message"]
    # The generator refuses the same job before it reaches a cluster, naming the field.
    proc = cluster.cli("submit", str(manifest), "-n", "default")
    assert proc.returncode == 1 and "spec.pytorchReplicaSpecs.Master.replicas: must be written and be exactly 1" in proc.stderr


def test_cluster_status_names_every_process_and_its_log(cluster):
    proc = cluster.cli("cluster", "status", "--dir", str(cluster.dir), "--format", "json", check=True)
    report = json.loads(proc.stdout)
    assert report["phase"] == "ready"
    names = {p["name"]: p for p in report["processes"]}
    node = report["node"]
    # The node runs containerd and kube-proxy beside its kubelet (each known as PROGRAM@NODE), the cluster its DNS.
    assert set(names) == {"supervisor", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                          f"kubelet@{node}", f"containerd@{node}", f"kube-proxy@{node}", "coredns"}
    assert all(p["running"] for p in names.values())
    assert names[f"kubelet@{node}"]["log"] == str(cluster.dir / "logs" / f"kubelet@{node}.log")
    assert [(n["name"], n["phase"], sorted(n["processes"])) for n in report["nodes"]] == [
        (node, "ready", ["containerd", "kube-proxy", "kubelet"])]
    again = cluster.cli("cluster", "up", "--dir", str(cluster.dir), check=True)
    assert again.stdout == f"export KUBECONFIG={cluster.kubeconfig}\n"  # already up: the same cluster


def test_cluster_up_piped_into_a_reader_that_quits_ends_quietly(cluster, tmp_path):
    """`cluster up | head -1`, and into a pipe already closed: status 0 or 141, nothing said, and
    the cluster still up (the pipe tests of the other commands are in tests/generator/cli/)."""
    from tests.support.pipes import OUTPUT_CLOSED, into_a_closed_pipe, quiet, read_one_line_then_close

    up = ["cluster", "up", "--dir", str(cluster.dir)]
    code, line, err = read_one_line_then_close(up, tmp_path)
    assert code in (0, OUTPUT_CLOSED) and quiet(err) and line == f"export KUBECONFIG={cluster.kubeconfig}\n", err
    code, err = into_a_closed_pipe(up, tmp_path)
    assert code == OUTPUT_CLOSED and quiet(err), err
    report = json.loads(cluster.cli("cluster", "status", "--dir", str(cluster.dir), "--format", "json", check=True).stdout)
    assert report["phase"] == "ready"
