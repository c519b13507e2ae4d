"""The scenario values files under tests/scenarios and their rendering."""
from __future__ import annotations

from pathlib import Path

import yaml

from generator import helm, paths

DIR = Path(__file__).parent / "scenarios"
GOLDEN = Path(__file__).parent / "golden"
RELEASE, NAMESPACE = "scenario", "training"


def names() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.yaml"))


def values(name: str) -> dict:
    return yaml.safe_load((DIR / f"{name}.yaml").read_text()) or {}


def render_stream(name: str) -> str:
    return helm.render_stream(paths.JOB_CHART, values(name), RELEASE, NAMESPACE)


def render_objects(name: str) -> list[dict]:
    return helm.render_objects(paths.JOB_CHART, values(name), RELEASE, NAMESPACE)
