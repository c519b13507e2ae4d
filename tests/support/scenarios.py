"""Scenario values files under tests/scenarios/<chart>/ and their rendering."""
from __future__ import annotations

from pathlib import Path

import yaml

from generator import helm, paths

DIR = Path(__file__).parent.parent / "scenarios"
GOLDEN = Path(__file__).parent.parent / "golden"
CHARTS = {"pytorchjob": paths.JOB_CHART, "pytorch-operator": paths.OPERATOR_CHART}
RELEASE, NAMESPACE = "scenario", "training"


def names(chart: str) -> list[str]:
    return sorted(p.stem for p in (DIR / chart).glob("*.yaml"))


def all_cases() -> list[tuple[str, str]]:
    return [(chart, name) for chart in CHARTS for name in names(chart)]


def values(chart: str, name: str) -> dict:
    return yaml.safe_load((DIR / chart / f"{name}.yaml").read_text()) or {}


def golden_path(chart: str, name: str) -> Path:
    return GOLDEN / chart / f"{name}.yaml"


def render_stream(chart: str, name: str) -> str:
    return helm.render_stream(CHARTS[chart], values(chart, name), RELEASE, NAMESPACE)


def render_objects(chart: str, name: str) -> list[dict]:
    return helm.render_objects(CHARTS[chart], values(chart, name), RELEASE, NAMESPACE)
