"""Kubeflow Trainer's chart as `cluster up --trainer` hands it to helm: staged from the Go module
cache with JobSet's chart as its dependency, and the images the node maps read from the charts.
A module cache of stand-in charts here; the real charts go through helm in `make e2e`."""
from __future__ import annotations

import pytest
import yaml

from generator.container import programs
from generator.controlplane import pins
from generator.controlplane.releases import trainer as trainer_release
from generator.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A Go module cache holding the two charts' files that matter here, read-only as Go leaves them."""
    root = tmp_path / "mod"
    trainer = trainer_release.trainer_chart(root)
    jobset = trainer_release.jobset_chart(root)
    for chart, meta, values in (
            (trainer, {"name": "kubeflow-trainer", "version": "2.3.0", "dependencies": [
                {"name": "jobset", "version": "0.12.0", "repository": "oci://registry.k8s.io/jobset/charts"},
                {"name": "lws", "version": "0.8.0", "repository": "oci://registry.k8s.io/lws/charts",
                 "condition": "dataCache.enabled,dataCache.lws.install"}]},
             {"image": {"registry": "ghcr.io", "repository": "kubeflow/trainer/trainer-controller-manager"},
              "runtimes": {"installer": {"image": {"registry": "docker.io", "repository": "alpine", "tag": "3.21"}}}}),
            (jobset, {"name": "jobset", "version": "0.12.0"},
             {"image": {"repository": "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset", "tag": "main"}})):
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
        (chart / "values.yaml").write_text(yaml.safe_dump(values))
        for path in [*chart.rglob("*"), chart]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    monkeypatch.setenv("GOMODCACHE", str(root))
    trainer_release.images.cache_clear()
    yield root
    trainer_release.images.cache_clear()
    for path in root.rglob("*"):  # so that pytest can remove it
        path.chmod(0o755)


def test_the_charts_are_the_pinned_modules_own(tmp_path):
    assert str(trainer_release.trainer_chart(tmp_path)).endswith(
        f"github.com/kubeflow/trainer/v2@{pins.TRAINER_VERSION}/charts/kubeflow-trainer")
    assert str(trainer_release.jobset_chart(tmp_path)).endswith(
        f"sigs.k8s.io/jobset@{pins.jobset_version()}/charts/jobset")


def test_the_staged_chart_holds_jobset_as_its_dependency_and_no_lws(cache, tmp_path):
    staged = trainer_release.stage(tmp_path / "staged")
    meta = yaml.safe_load((staged / "Chart.yaml").read_text())
    assert [d["name"] for d in meta["dependencies"]] == ["jobset"]  # LWS serves only dataCache, off
    assert yaml.safe_load((staged / "charts" / "jobset" / "Chart.yaml").read_text())["version"] == "0.12.0"
    trainer_release.stage(tmp_path / "staged")  # staged again over the last copy (the next cluster up)
    assert not staged.is_relative_to(cache)


def test_missing_charts_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "empty"))
    with pytest.raises(UserError, match=r"no such chart in the Go module cache.*go mod download "
                                        r"github.com/kubeflow/trainer/v2@v2.3.0"):
        trainer_release.stage(tmp_path / "staged")
    trainer_release.images.cache_clear()
    assert trainer_release.images() == {}  # nothing to map, and nothing can install them
    trainer_release.images.cache_clear()


def test_the_nodes_images_are_the_charts_and_an_image_of_ours_stays_ours(cache):
    images = trainer_release.images()
    assert images == {"trainer-controller": "ghcr.io/kubeflow/trainer/trainer-controller-manager",
                      "jobset": "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset",
                      "installer": "docker.io/alpine"}
    known = programs.known(images)
    assert known["ghcr.io/kubeflow/trainer/trainer-controller-manager"].mode == programs.PRIVATE
    assert known["us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset"].mode == programs.PRIVATE
    # The installer's alpine is the operator chart's init image already: a shell either way.
    assert programs.resolve("docker.io/alpine:3.21", upstream=images).mode == programs.SHELL
    with pytest.raises(programs.ImagePullError):  # `generator run` never runs the controllers
        programs.resolve("ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0")


def test_the_installed_chart_turns_the_train_job_status_gate_on(tmp_path):
    """Rendered from the real charts in the Go module cache (`cluster build` leaves them there):
    the controller's configuration carries the gate, and its Service the status server's port."""
    from generator import helm

    try:
        staged = trainer_release.stage(tmp_path)
    except UserError as exc:
        pytest.skip(f"the real charts are not in the module cache: {exc}")
    objects = helm.render_objects(staged, trainer_release.VALUES, trainer_release.NAME, trainer_release.NAMESPACE)
    configs = [yaml.safe_load(text) for o in objects if o["kind"] == "ConfigMap"
               for text in (o.get("data") or {}).values() if "featureGates" in text]
    assert [c["featureGates"] for c in configs] == [{"TrainJobStatus": True}]
    assert configs[0]["statusServer"]["port"] == 10443
    services = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].startswith(trainer_release.NAME)]
    assert any(p["name"] == "status-server" for s in services for p in s["spec"]["ports"])
