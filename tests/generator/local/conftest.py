"""Fixtures shared by the local runner's tests."""
import pytest


@pytest.fixture(autouse=True)
def _run_in_tmp(tmp_path, monkeypatch):
    """runs/<job>/ lands in the test's folder, not in the checkout."""
    monkeypatch.chdir(tmp_path)
