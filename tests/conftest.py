"""Shared fixtures. Support code the tests import lives in tests/support/."""
import os

# Child processes (trainer, runner) hash the same way in every run.
os.environ.setdefault("PYTHONHASHSEED", "0")
