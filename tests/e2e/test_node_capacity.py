"""The node sized as `cluster up` is asked: `--cpu 1` leaves one allocatable CPU (the kubelet
reserves the rest of the machine's), `--gpus 2` puts 2 nvidia.com/gpu into the Node's capacity and
allocatable, kept there when the kubelet registers the Node again, and a job asking one GPU per pod
is scheduled and trains to Succeeded on the CPU (gloo). On a cluster of this module's own."""
from __future__ import annotations

import pytest

from tests.e2e.conftest import needs_real_node
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, needs_real_node]
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    return ["--cpu", "1", "--gpus", "2"]


def the_node(cluster):
    (node,) = cluster.core().list_node().items
    return node


def test_the_node_offers_what_cluster_up_was_asked(cluster):
    import yaml

    from generator.controlplane.realnode import support

    status = the_node(cluster).status
    assert status.allocatable["cpu"] == "1"
    assert status.capacity[GPU] == status.allocatable[GPU] == "2"
    config = yaml.safe_load((cluster.dir / "node" / "kubelet-config.yaml").read_text())
    assert config["systemReserved"] == {"cpu": f"{(support.Capacity.read().cpus - 1) * 1000}m"}


def test_a_job_asking_one_gpu_per_pod_trains_to_succeeded_on_the_cpu(cluster, tmp_path):
    path = tmp_path / "gpu.yaml"
    cluster.cli("values", "--name", "gpu", "--workers", "1", "--gpus", "1", "--backend", "gloo", "--cpu", "250m",
                "--memory", "512Mi", "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(path),
                check=True)
    cluster.cli("submit", str(path), check=True)
    done = cluster.cli("wait", "gpu", "--timeout", "600", timeout=660)  # the CUDA image's first pull included
    assert done.returncode == 0, done.stdout + done.stderr
    pods = cluster.core().list_namespaced_pod("default", label_selector="training.kubeflow.org/job-name=gpu").items
    assert len(pods) == 2
    for pod in pods:
        (container,) = [c for c in pod.spec.containers if c.name == "pytorch"]
        assert container.resources.limits[GPU] == "1"
        assert pod.status.phase == "Succeeded"
    log = cluster.cli("logs", "gpu", "--replica", "master-0", check=True).stdout
    assert "(gloo, cpu)" in log


def test_gpus_taken_from_the_node_come_back(cluster):
    """A kubelet that registers its Node again zeroes extended resources no device plugin reports
    (its reconcileExtendedResource); the cluster puts them back."""
    from generator.controlplane.realnode import gpus

    name = the_node(cluster).metadata.name
    removed = [{"op": "remove", "path": change["path"]} for change in gpus.patch(2)]
    cluster.core().patch_node_status(name, removed)
    wait_for(lambda: the_node(cluster).status.capacity.get(GPU) == "2", 30, "the Node's GPUs to be advertised again")
    assert the_node(cluster).status.allocatable.get(GPU) == "2"
