"""The helm CLI our users run (v4, built from its Go module by `generator cluster build`) on both
charts: `helm lint --strict` passes with every scenario's values, and `helm template` renders
exactly the reviewed goldens, which the Helm SDK the generator uses rendered."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from generator.controlplane import pins
from tests.support import scenarios

pytestmark = pytest.mark.e2e  # needs the Go-built binary, as the rest of `make e2e`


def _values(tmp_path, chart: str, name: str) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(scenarios.values(chart, name)))
    return str(path)


def test_it_is_the_helm_major_the_readme_names(helm):
    version = subprocess.run([helm, "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert version.startswith(pins.HELM_VERSION.rsplit(".", 1)[0]), version  # `go install` stamps major.minor


@pytest.mark.parametrize(("chart", "name"), scenarios.all_cases())
def test_helm_lint_strict_passes_with_every_scenario(helm, tmp_path, chart, name):
    proc = subprocess.run([helm, "lint", "--strict", str(scenarios.CHARTS[chart]), "-f", _values(tmp_path, chart, name)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(("chart", "name"), scenarios.all_cases())
def test_helm_template_renders_the_golden(helm, tmp_path, chart, name):
    proc = subprocess.run([helm, "template", scenarios.RELEASE, str(scenarios.CHARTS[chart]), "--namespace",
                           scenarios.NAMESPACE, "-f", _values(tmp_path, chart, name)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    golden = [d for d in yaml.safe_load_all(scenarios.golden_path(chart, name).read_text()) if d]
    assert sorted(rendered, key=_identity) == sorted(golden, key=_identity)  # helm orders by kind, the goldens by file


def _identity(obj: dict) -> tuple:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
