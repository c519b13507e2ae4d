"""Kueue's chart as `cluster up --kueue` hands it to helm, and the queues it creates: the chart's
own manager configuration with only our two integrations, the image the node maps read from the
chart, and a ClusterQueue sized to the node or to `--kueue-quota`. A module cache with a stand-in
chart here; the real chart goes through helm and Kueue in `make e2e` (tests/e2e/test_kueue.py)."""
from __future__ import annotations

import pytest
import yaml

from generator.container import programs
from generator.controlplane import pins
from generator.controlplane.releases import kueue as kueue_release
from generator.errors import UserError

CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
webhook:
  port: 9443
integrations:
  frameworks:
  - "batch/job"
  - "kubeflow.org/pytorchjob"
  - "pod"
  - "trainer.kubeflow.org/trainjob"
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "mod"
    chart = kueue_release.chart_folder(root)
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"name": "kueue", "version": "0.19.2"}))
    (chart / "values.yaml").write_text(yaml.safe_dump({
        "controllerManager": {"manager": {"image": {"repository": "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue",
                                                    "tag": "release-0.19"}}},
        "managerConfig": {"controllerManagerConfigYaml": CONFIG}}))
    monkeypatch.setenv("GOMODCACHE", str(root))
    kueue_release.images.cache_clear()
    yield root
    kueue_release.images.cache_clear()


def test_the_chart_is_the_pinned_modules_own(tmp_path):
    assert str(kueue_release.chart_folder(tmp_path)).endswith(f"sigs.k8s.io/kueue@{pins.KUEUE_VERSION}/charts/kueue")


def test_the_pytorchjob_and_trainjob_integrations_are_on_and_the_rest_of_the_config_is_the_charts(cache):
    values = kueue_release.values(kueue_release.chart_folder())
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    # Jobs and JobSets too: a TrainJob's JobSet creates Jobs through Kueue's batch Job webhook.
    assert config["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob",
                                                    "trainer.kubeflow.org/trainjob"]
    assert config["webhook"] == {"port": 9443} and config["kind"] == "Configuration"


def test_the_node_runs_the_charts_image_as_the_built_controller(cache):
    repository = kueue_release.images()["kueue"]
    assert repository == "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue"
    program = programs.known(kueue_release.images())[repository]
    assert (program.role, program.entrypoint, program.user) == ("kueue", ("/manager",), (65532, 65532))
    assert program.mode == programs.PRIVATE


def test_a_missing_chart_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "empty"))
    kueue_release.images.cache_clear()
    with pytest.raises(UserError, match=r"no such chart in the Go module cache.*go mod download sigs.k8s.io/kueue@v0.19.2"):
        kueue_release.checked_chart()
    assert kueue_release.images() == {}
    kueue_release.images.cache_clear()


NODE = {"status": {"allocatable": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "0", "pods": "110"}}}


@pytest.mark.parametrize(("asked", "quota"), [
    ("", {"cpu": "4", "memory": "16Gi"}),  # the node's, without the GPUs it does not have
    ("cpu=2", {"cpu": "2", "memory": "16Gi"}),
    ("cpu=500m,nvidia.com/gpu=1", {"cpu": "500m", "memory": "16Gi", "nvidia.com/gpu": "1"}),
])
def test_the_cluster_queue_holds_the_nodes_resources_unless_told(asked, quota):
    parsed = kueue_release.parse_quota(asked or None)
    assert kueue_release.quota_for(NODE, parsed) == quota
    flavor, cluster_queue, local_queue = kueue_release.queues(quota)
    assert flavor["kind"] == "ResourceFlavor"
    group = cluster_queue["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == list(quota)
    assert group["flavors"] == [{"name": "default-flavor", "resources": [
        {"name": r, "nominalQuota": q} for r, q in quota.items()]}]
    assert local_queue["metadata"] == {"name": "default", "namespace": "default"}
    assert local_queue["spec"] == {"clusterQueue": "cluster-queue"}


def test_the_cluster_queue_admits_jobs_of_every_namespace():
    """Kueue's ClusterQueue without a namespaceSelector matches no namespace (its documented
    default): every Workload would wait with "namespace doesn't match ClusterQueue selector"."""
    cluster_queue = next(o for o in kueue_release.queues({"cpu": "2"}) if o["kind"] == "ClusterQueue")
    assert "namespaceSelector" in cluster_queue["spec"] and cluster_queue["spec"]["namespaceSelector"] == {}


def test_no_queues_when_asked_for_none():
    assert kueue_release.parse_quota("none") is None


@pytest.mark.parametrize(("text", "message"), [
    ("cpu", "'cpu': write RESOURCE=QUANTITY with RESOURCE one of cpu, memory, nvidia.com/gpu (cpu=3,memory=8Gi)"),
    ("pods=10", "'pods=10': write RESOURCE=QUANTITY with RESOURCE one of cpu, memory, nvidia.com/gpu"),
    ("memory=8GB", "memory='8GB' is not a quantity; write 8Gi"),
])
def test_a_bad_quota_names_the_part_and_what_to_write(text, message):
    with pytest.raises(ValueError) as raised:
        kueue_release.parse_quota(text)
    assert message in str(raised.value)
