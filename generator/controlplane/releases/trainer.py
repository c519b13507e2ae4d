"""Kubeflow Trainer v2.3.0 with its JobSet dependency (`cluster up --trainer`), installed as a user
installs it: upstream's kubeflow-trainer chart through the helm CLI. The charts come from the Go
module cache that `cluster build` filled (never copied into the repository); helm wants a chart's
dependencies in its charts/ folder, so a copy is staged outside the repository with JobSet's chart
placed there. The images the charts name are read from the charts, and the registry on this
machine holds them, made from the built controllers."""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import yaml

from generator.controlplane import pins
from generator.controlplane.layout import Layout
from generator.controlplane.releases.base import Chart, Probe, Release, check_chart, module_chart
from generator.errors import UserError
from generator.kinds import TRAINJOB as _JOB

NAME = "kubeflow-trainer"
NAMESPACE = "kubeflow-system"
# The chart leaves every built-in runtime off; torch-distributed is the one `--target v2` defaults to.
# TrainJobStatus (alpha, off by default; the chart's manager.config.featureGates) starts the status
# server (the chart's port 10443) that the trainer's progress reports go to, and has the controller
# inject its URL, CA and a projected token into every trainer container.
FEATURE_GATES = {"TrainJobStatus": True}
VALUES = {"runtimes": {"torchDistributed": {"enabled": True}}, "manager": {"config": {"featureGates": FEATURE_GATES}}}
RUNTIME = "torch-distributed"
# The Deployments the chart makes (its fullname, and JobSet's `fullnameOverride: jobset` in Trainer's values).
CONTROLLER = f"{NAME}-controller-manager"
JOBSET_CONTROLLER = "jobset-controller"
# A TrainJob naming no runtime that exists is refused by Trainer's webhook, and a JobSet with a bad
# success policy by JobSet's: each only once the API server reaches it.
PROBES = (
    Probe({"apiVersion": _JOB.api_version, "kind": _JOB.kind, "metadata": {"name": "webhook-probe"},
           "spec": {"runtimeRef": {"name": "no-such-runtime-webhook-probe"}}}, _JOB.plural),
    Probe({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "webhook-probe"},
           "spec": {"replicatedJobs": [{"name": "a", "replicas": 1, "template": {"spec": {"template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}],
               "successPolicy": {"operator": "All", "targetReplicatedJobs": ["no-such-job"]}}}, "jobsets"),
)
# Both controllers Available (their pods Ready once each has written its own serving certificate).
RELEASE = Release(NAME, NAMESPACE, (JOBSET_CONTROLLER, CONTROLLER), "Trainer's and JobSet's webhooks", PROBES,
                  "trainer-values.yaml")


def trainer_chart(cache: Path | None = None) -> Path:
    return module_chart(pins.TRAINER_MODULE, pins.TRAINER_VERSION, "kubeflow-trainer", cache)


def jobset_chart(cache: Path | None = None) -> Path:
    return module_chart(pins.JOBSET_MODULE, pins.jobset_version(), "jobset", cache)


def _charts() -> tuple[Path, Path]:
    return (check_chart(trainer_chart(), f"go mod download {pins.TRAINER_MODULE}@{pins.TRAINER_VERSION}"),
            check_chart(jobset_chart(), f"cd {pins.JOBSET_MODULE_DIR} && go mod download {pins.JOBSET_MODULE}"))


def stage(into: Path) -> Path:
    """A copy of the kubeflow-trainer chart with JobSet's chart in its charts/ folder, which is
    what `helm dependency build` would leave there. The chart also lists LWS, needed only with
    `dataCache.enabled` (off here and by default); helm refuses a listed dependency that charts/
    lacks even when its condition is off, so the copy's Chart.yaml lists JobSet alone."""
    trainer, jobset = _charts()
    chart = into / trainer.name
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(trainer, chart)
    shutil.copytree(jobset, chart / "charts" / jobset.name)
    for folder, _, files in os.walk(chart):  # the module cache is read-only
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["dependencies"] = [d for d in meta.get("dependencies") or [] if d["name"] == jobset.name]
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


@functools.lru_cache(maxsize=1)
def images() -> dict[str, str]:
    """role -> the image repository the charts' defaults name: the Trainer controller, the JobSet
    controller, and the runtimes installer's shell image. Empty when the charts are not in the
    module cache (nothing can install them then)."""
    try:
        trainer, jobset = _charts()
    except UserError:
        return {}
    t = yaml.safe_load((trainer / "values.yaml").read_text())
    j = yaml.safe_load((jobset / "values.yaml").read_text())
    installer = t["runtimes"]["installer"]["image"]
    return {"trainer-controller": f"{t['image']['registry']}/{t['image']['repository']}",
            "jobset": j["image"]["repository"],
            "installer": f"{installer['registry']}/{installer['repository']}"}


def chart(layout: Layout) -> Chart:
    """The staged chart, in the cluster's folder. helm itself waits for its post-install Job that
    applies the runtimes (it needs the Trainer CRDs, not the controller)."""
    return Chart(str(stage(layout.root / "helm" / "charts")))
