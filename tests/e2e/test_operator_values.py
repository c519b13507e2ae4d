"""The operator chart installed the way users of other charts write their values: their own
image repository and tag, and a namespace that exists before the install (namespace.create false)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e
NAMESPACE = "ai-platform"


@pytest.fixture(scope="module")
def operator_values():
    return {"image": {"repository": "registry.example.com/mirror/training-operator", "tag": "v1-93c5489"},
            "namespace": {"create": False, "name": NAMESPACE}}


def test_the_install_lands_in_the_existing_namespace_with_the_users_image(cluster):
    from kubernetes import client

    api = cluster.api()
    (deployment,) = client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items
    (container,) = deployment.spec.template.spec.containers
    assert container.image == "registry.example.com/mirror/training-operator:v1-93c5489"
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
    assert set(names) == {"supervisor", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                          "kubelet"}
    assert all(p["running"] for p in names.values())
    assert names["kubelet"]["log"] == str(cluster.dir / "logs" / "kubelet.log")
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
