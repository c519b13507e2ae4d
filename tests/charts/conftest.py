"""What the chart tests share: the helm CLI our users run, as `generator cluster build` builds it."""
from __future__ import annotations

import pytest

from generator.controlplane import build, pins


@pytest.fixture(scope="module")
def helm() -> str:
    binary = build.binary(pins.HELM_BINARY)
    if not binary.is_file():
        pytest.fail(f"{binary} is not built: run `python -m generator cluster build` (`make e2e` does)")
    return str(binary)
