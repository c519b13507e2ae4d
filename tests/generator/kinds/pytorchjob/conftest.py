"""The local runner's tests run in their own folder (tests/generator/local/conftest.py)."""
from tests.generator.local.conftest import _run_in_tmp  # noqa: F401
