"""Kubeflow Trainer v2.3.0 with its JobSet dependency on the local cluster (`cluster up --trainer`),
installed as a user installs it: upstream's kubeflow-trainer chart through the helm CLI. The charts
come from the Go module cache that `cluster build` filled (never copied into the repository); helm
wants a chart's dependencies in its charts/ folder, so a copy is staged outside the repository with
JobSet's chart placed there. The images the charts name are read from the charts, and the process
node maps them to the built controllers."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from generator.controlplane import build, pins, processes
from generator.controlplane.layout import Layout
from generator.controlplane.state import OperatorRelease
from generator.errors import UserError

RELEASE = "kubeflow-trainer"
NAMESPACE = "kubeflow-system"
# The chart leaves every built-in runtime off; torch-distributed is the one `--target v2` defaults to.
# TrainJobStatus (alpha, off by default; the chart's manager.config.featureGates) starts the status
# server (the chart's port 10443) that the trainer's progress reports go to, and has the controller
# inject its URL, CA and a projected token into every trainer container.
FEATURE_GATES = {"TrainJobStatus": True}
VALUES = {"runtimes": {"torchDistributed": {"enabled": True}}, "manager": {"config": {"featureGates": FEATURE_GATES}}}
RUNTIME = "torch-distributed"
# The Deployments the chart makes (its fullname, and JobSet's `fullnameOverride: jobset` in Trainer's values).
CONTROLLER = f"{RELEASE}-controller-manager"
JOBSET_CONTROLLER = "jobset-controller"


def module_cache() -> Path:
    """Where `go` keeps modules: $GOMODCACHE, else `go env`, else Go's default."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go:
        out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
        if out:
            return Path(out)
    return Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"


def trainer_chart(cache: Path | None = None) -> Path:
    return (cache or module_cache()) / f"{pins.TRAINER_MODULE}@{pins.TRAINER_VERSION}" / "charts" / "kubeflow-trainer"


def jobset_chart(cache: Path | None = None) -> Path:
    return (cache or module_cache()) / f"{pins.JOBSET_MODULE}@{pins.jobset_version()}" / "charts" / "jobset"


def _charts() -> tuple[Path, Path]:
    trainer, jobset = trainer_chart(), jobset_chart()
    for chart, fix in ((trainer, f"go mod download {pins.TRAINER_MODULE}@{pins.TRAINER_VERSION}"),
                       (jobset, f"cd {pins.JOBSET_MODULE_DIR} && go mod download {pins.JOBSET_MODULE}")):
        if not (chart / "Chart.yaml").is_file():
            raise UserError(f"{chart}: no such chart in the Go module cache, where `cluster build` leaves it; run "
                            f"`{fix}` (or `python -m generator cluster build` after clearing the cache)")
    return trainer, jobset


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


def install(layout: Layout, env: dict[str, str]) -> OperatorRelease:
    """`helm install kubeflow-trainer` of the staged chart; helm itself waits for the chart's
    post-install Job that applies the runtimes (it needs the Trainer CRDs, not the controller)."""
    chart = stage(layout.root / "helm" / "charts")
    values = layout.root / "trainer-values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    argv = [str(build.binary(pins.HELM_BINARY)), "install", RELEASE, str(chart), "--namespace", NAMESPACE,
            "--create-namespace", "--values", str(values), "--timeout", "5m"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"helm install {RELEASE} {chart} failed: {proc.stderr.strip()}")
    return OperatorRelease(NAMESPACE, CONTROLLER, RELEASE)


def wait_ready(layout: Layout, kubelet: processes.Child, timeout: float = 300) -> None:
    """Both controllers' Deployments available (their pods Ready once each has written its own
    serving certificate) and the API server reaching Trainer's webhooks and JobSet's."""
    from kubernetes import client

    from generator.controlplane.operator import admin_client, holds

    end = time.monotonic() + timeout  # one timeout for every step, as loaded a machine may be
    api = admin_client(layout)
    apps = client.AppsV1Api(api)

    def available(name: str) -> bool:
        return holds(apps.read_namespaced_deployment_status(name, NAMESPACE), "Available")

    for name in (JOBSET_CONTROLLER, CONTROLLER):
        processes.wait_until(lambda name=name: available(name), processes.left(end), f"deployment {NAMESPACE}/{name} to be "
                             "available (its pod run by the kubelet and Ready)", kubelet, interval=1.0)
    processes.wait_until(lambda: webhooks_answer(api), processes.left(end), "the API server to reach Trainer's and JobSet's webhooks",
                         kubelet)


def webhooks_answer(api) -> bool:
    """A dry-run TrainJob naming no runtime that exists is refused by Trainer's webhook, and a
    dry-run JobSet with a bad failure policy by JobSet's: each answers only once it is reached."""
    from kubernetes import client

    from generator.kinds import TRAINJOB as job

    custom = client.CustomObjectsApi(api)
    probes = [(job.group, job.version, job.plural, {
        "apiVersion": job.api_version, "kind": job.kind, "metadata": {"name": "webhook-probe"},
        "spec": {"runtimeRef": {"name": "no-such-runtime-webhook-probe"}}}),
              ("jobset.x-k8s.io", "v1alpha2", "jobsets", {
                  "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "webhook-probe"},
                  "spec": {"replicatedJobs": [{"name": "a", "replicas": 1, "template": {"spec": {"template": {"spec": {
                      "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}],
                      "successPolicy": {"operator": "All", "targetReplicatedJobs": ["no-such-job"]}}})]
    for group, version, plural, body in probes:
        try:
            custom.create_namespaced_custom_object(group, version, "default", plural, body, dry_run="All")
        except client.ApiException as exc:
            if "admission webhook" in (exc.body or "") and "denied" in (exc.body or ""):
                continue
            return False
        return False
    return True
