"""The project's charts (charts/pytorch-operator, charts/pytorchjob) as OCI artifacts in the
registry on this machine, as a platform team keeps charts in its own registry: packaged with the
helm CLI (`helm package`) and pushed (`helm push CHART.tgz oci://127.0.0.1:PORT/charts`) with the
registry's client certificate, since it answers only that (mutual TLS). They are pushed when the
registry gets its images (`cluster up`, `image registry up`), and only where it lacks that chart
version as made from these files, as images are pushed once. `cluster up` then installs the
operator from there, as a user installs any chart from a registry:
`helm install NAME oci://127.0.0.1:PORT/charts/pytorch-operator --version V` with the same flags."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from generator import paths
from generator.controlplane import build, components, pins, registry
from generator.controlplane.releases.base import Chart
from generator.errors import UserError
from generator.images.registry import Registry

REPOSITORY = "charts"  # oci://HOST/charts/NAME, as upstream projects publish theirs
CHARTS = (paths.OPERATOR_CHART, paths.JOB_CHART)


def version(chart: Path) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])


def name(chart: Path) -> str:
    """What the registry holds the chart as: charts/NAME:VERSION (the chart's own name and version)."""
    return f"{REPOSITORY}/{chart.name}:{version(chart)}"


def names() -> list[str]:
    return [name(chart) for chart in CHARTS]


def tls_flags(reg: Registry) -> tuple[str, ...]:
    """The registry's client certificate and CA, as each of helm's registry commands takes them."""
    return ("--cert-file", str(reg.certs / "client.cert"), "--key-file", str(reg.certs / "client.key"),
            "--ca-file", str(reg.certs / "ca.crt"))


def package_argv(chart: Path, into: Path) -> list[str]:
    return [str(build.binary(pins.HELM_BINARY)), "package", str(chart), "--destination", str(into)]


def push_argv(archive: Path, reg: Registry) -> list[str]:
    return [str(build.binary(pins.HELM_BINARY)), "push", str(archive), f"oci://{reg.address}/{REPOSITORY}",
            *tls_flags(reg)]


def source(reg: Registry, chart: Path) -> Chart:
    """Where `helm install` finds `chart` in the running registry: its reference, version and the flags."""
    if not reg.address:
        raise UserError(f"the registry in {reg.root} is not running, and the charts are installed from it: run "
                        "`python -m generator image registry up`, then `cluster up` again")
    return Chart(f"oci://{reg.address}/{REPOSITORY}/{chart.name}", ("--version", version(chart), *tls_flags(reg)))


def digest(chart: Path) -> str:
    """The chart's files (names and contents): a chart edited without a new version is pushed again."""
    sha = hashlib.sha256()
    for path in sorted(p for p in chart.rglob("*") if p.is_file()):
        sha.update(f"{path.relative_to(chart)}\0{path.stat().st_size}\0".encode())  # where one file ends
        sha.update(path.read_bytes())
    return f"files:sha256:{sha.hexdigest()}"


def helm_env(reg: Registry) -> dict[str, str]:
    """helm's configuration and caches in the registry's own folder (0700), not the user's home."""
    return {**os.environ, **components.helm_homes(reg.root / "helm")}


def publish(reg: Registry, say=print, charts: tuple[Path, ...] = CHARTS) -> list[str]:
    """Package and push each chart the registry lacks as made from these files; the names pushed now."""
    pushed = []
    for chart in charts:
        held, made = name(chart), digest(chart)
        if registry.held_from(reg, held, made):
            continue
        say(f"pushing the chart {chart.name} {version(chart)} to oci://{reg.address}/{REPOSITORY}")
        with tempfile.TemporaryDirectory(dir=reg.root, prefix=".chart-") as tmp:
            _helm(package_argv(chart, Path(tmp)), reg, f"packaging {chart}")
            archive = Path(tmp) / f"{chart.name}-{version(chart)}.tgz"
            _helm(push_argv(archive, reg), reg, f"pushing {archive.name} to the registry at {reg.address}")
        registry.record(reg, held, made)
        pushed.append(held)
    return pushed


def _helm(argv: list[str], reg: Registry, doing: str) -> None:
    proc = subprocess.run(argv, env=helm_env(reg), capture_output=True, text=True)
    if proc.returncode:
        raise UserError(f"{doing} failed: {(proc.stderr or proc.stdout).strip()}; the registry's log is {reg.log}")
