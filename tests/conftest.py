"""Shared fixtures. Support code the tests import lives in tests/support/."""
import os

import pytest

# Child processes (trainer, runner) hash the same way in every run.
os.environ.setdefault("PYTHONHASHSEED", "0")

# Property tests run the same examples every time in CI, so a failure reproduces and a pass means
# the same thing twice; HYPOTHESIS_PROFILE=explore searches afresh.
from hypothesis import HealthCheck, settings  # noqa: E402

# No example database: derandomized runs need none, and test workers running side by side would share one.
settings.register_profile("ci", derandomize=True, database=None, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every test but e2e's: whatever processes it started are killed when it ends, a timeout included.
from tests.support.leftovers import no_process_outlives_its_test  # noqa: E402, F401


def pytest_collection_modifyitems(items):
    """The longest tests (real training) first: test workers running side by side then finish
    together instead of one working through a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("trains") is None)


@pytest.fixture(autouse=True)
def only_this_machines_registry(request, monkeypatch):
    """Outside e2e, images' configs come from the registry on this machine alone: what a test sees
    must not change with what the internet serves, nor wait on a resolver (e2e/test_images.py asks
    other registries)."""
    if request.node.get_closest_marker("e2e") is None:
        monkeypatch.setenv("PYTORCHJOB_KIT_OFFLINE", "1")
