"""Code the tests share: paths, CLI runner, chart scenarios, API doubles and helpers."""
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
MANIFESTS = TESTS / "manifests"
# Upstream's reading material sits beside the checkout, never inside it.
REFERENCE = ROOT.parent / "shared" / "reference"


def upstream_examples() -> list:
    """Upstream's example jobs as test parameters, or one visibly skipped case when they are absent."""
    folder = REFERENCE / "training-operator-v1.9.4" / "examples"
    found = sorted(folder.glob("*.yaml"))
    if found:
        return [pytest.param(p, id=f"upstream-{p.name}") for p in found]
    return [pytest.param(None, id="upstream-absent",
                         marks=pytest.mark.skip(reason=f"{folder} is absent: upstream's examples come from ../shared"))]


def our_manifests() -> list:
    return [pytest.param(p, id=p.name) for p in sorted(MANIFESTS.glob("*.yaml"))]
