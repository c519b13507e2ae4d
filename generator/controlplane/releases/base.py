"""One Helm release that `cluster up` installs on its node, and how every one of them is installed
and waited for: the helm CLI's `helm install` of a chart (a folder, or an OCI reference with the
flags that reach its registry), then its Deployments Available, its webhooks answering through
the API server (a dry-run only a webhook refuses), and the APIs it serves Available. Each wait
takes what the caller's one deadline has left, so all of them together stay within the user's
`cluster up --timeout`. The releases themselves (operator.py, trainer.py, kueue.py) are data of
this type with what is their own: where their chart comes from, and its values."""
from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from generator.controlplane import build, pins, processes
from generator.controlplane.layout import Layout
from generator.controlplane.state import InstalledRelease
from generator.errors import UserError

INTERVAL = 0.5  # between two looks of every wait here


@dataclass(frozen=True)
class Probe:
    """A dry-run create of `body` that the API server's own checks let pass and only a webhook
    refuses: refused, the webhook answered, so the API server reaches it with a certificate it trusts."""
    body: dict
    plural: str
    namespaced: bool = True


@dataclass(frozen=True)
class Release:
    name: str  # the Helm release's, as `helm list` shows it
    namespace: str
    deployments: tuple[str, ...]  # the controllers' Deployments, waited for in this order; the last is the release's own
    webhooks: str  # whose webhooks the probes reach, as the wait names them ("Kueue's webhooks")
    probes: tuple[Probe, ...]
    values_file: str  # the values `helm install` is given, written into the cluster's folder
    api_services: tuple[tuple[str, str], ...] = ()  # (APIService, what it serves) waited for after the webhooks

    def installed(self, chart: str = "") -> InstalledRelease:
        return InstalledRelease(self.namespace, self.deployments[-1], self.name, chart)

    def with_deployment(self, namespace: str, deployment: str) -> Release:
        """The same release where the chart's values put its one Deployment elsewhere."""
        return replace(self, namespace=namespace, deployments=(deployment,))


@dataclass(frozen=True)
class Chart:
    """Where `helm install` finds a chart: a folder, or `oci://HOST/REPO/NAME` with the flags
    that pick its version and reach its registry."""
    ref: str
    flags: tuple[str, ...] = ()


def helm_env(layout: Layout) -> dict[str, str]:
    """The helm CLI against this cluster, as the user's shell would run it."""
    from generator.controlplane import components

    return {**os.environ, **components.helm_env(layout)}


def install_argv(release: Release, chart: Chart, values_file: Path, timeout: float, create_namespace: bool = True) -> list[str]:
    """`helm install` of `chart` as `release`, helm's own waits (the charts' hooks) within `timeout` seconds."""
    argv = [str(build.binary(pins.HELM_BINARY)), "install", release.name, chart.ref, *chart.flags,
            "--namespace", release.namespace, "--values", str(values_file)]
    if create_namespace:
        argv.append("--create-namespace")
    return [*argv, "--timeout", f"{math.ceil(timeout)}s"]


def install(layout: Layout, release: Release, chart: Chart, values: dict, end: float,
            create_namespace: bool = True) -> InstalledRelease:
    """`helm install` as a user would run it on any cluster, so `helm list`, `upgrade`, `test` and
    `uninstall` see the release; helm itself waits for the charts' install hooks (Trainer's Job
    that applies its runtimes) within what the deadline `end` has left."""
    values_file = layout.root / release.values_file
    fd = os.open(values_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(yaml.safe_dump(values))
    argv = install_argv(release, chart, values_file, processes.left(end), create_namespace)
    proc = subprocess.run(argv, env=helm_env(layout), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"helm install {release.name} {chart.ref} failed: {proc.stderr.strip()}")
    return release.installed(chart.ref)


def wait_ready(layout: Layout, release: Release, kubelet: processes.Child, end: float) -> None:
    """Its Deployments Available (each pod Ready by its readiness probe: its serving certificate
    written), then its webhooks answering through the API server, then its APIs served, each wait
    within what the deadline `end` has left."""
    from kubernetes import client

    from generator.controlplane.admin import admin_client, holds

    api = admin_client(layout)
    apps = client.AppsV1Api(api)
    for name in release.deployments:
        processes.wait_until(lambda name=name: holds(apps.read_namespaced_deployment_status(name, release.namespace),
                                                     "Available"),
                             processes.left(end), f"deployment {release.namespace}/{name} to be available (its pod run "
                             "by the kubelet and Ready)", kubelet, interval=INTERVAL)
    processes.wait_until(lambda: all(webhook_answers(api, p) for p in release.probes), processes.left(end),
                         f"the API server to reach {release.webhooks}", kubelet, interval=INTERVAL)
    for service, what in release.api_services:
        processes.wait_until(lambda service=service: _served(api, service), processes.left(end),
                             f"the API server to serve {what}", kubelet, interval=INTERVAL)


def webhook_answers(api, probe: Probe) -> bool:
    """Whether the probe's dry-run is refused by an admission webhook (any other answer: not yet)."""
    from kubernetes import client

    group, version = probe.body["apiVersion"].split("/")
    custom = client.CustomObjectsApi(api)
    try:
        if probe.namespaced:
            custom.create_namespaced_custom_object(group, version, "default", probe.plural, probe.body, dry_run="All")
        else:
            custom.create_cluster_custom_object(group, version, probe.plural, probe.body, dry_run="All")
    except client.ApiException as exc:
        return "admission webhook" in (exc.body or "") and "denied" in (exc.body or "")
    return False


def _served(api, name: str) -> bool:
    from kubernetes import client

    from generator.controlplane.admin import holds

    try:
        service = client.ApiregistrationV1Api(api).read_api_service(name)
    except client.ApiException:
        return False
    return holds(service, "Available")


def module_cache() -> Path:
    """Where `go` keeps modules: $GOMODCACHE, else `go env`, else Go's default."""
    import shutil

    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go:
        out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
        if out:
            return Path(out)
    return Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"


def module_chart(module: str, version: str, chart: str, cache: Path | None = None) -> Path:
    """A chart an upstream Go module carries, in the module cache that `cluster build` filled."""
    return (cache or module_cache()) / f"{module}@{version}" / "charts" / chart


def check_chart(path: Path, fix: str) -> Path:
    """`path`, refused with how to get it when it holds no chart (never copied into the repository)."""
    if not (path / "Chart.yaml").is_file():
        raise UserError(f"{path}: no such chart in the Go module cache, where `cluster build` leaves it; run "
                        f"`{fix}` (or `python -m generator cluster build` after clearing the cache)")
    return path
