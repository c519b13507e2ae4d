import os

import pytest

# Tests render with the same engine a user gets; force the SDK here only when asked.
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture
def job_chart():
    from generator import paths
    return paths.JOB_CHART
