"""Tools the project's own work runs but its venv does not hold (PyPA's build, pre-commit), each in a
venv of its own in the user's cache, made once and named by the exact version it pins."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from generator import paths


def venv(requirement: str) -> Path:
    """The bin folder of a venv holding `requirement` (NAME==VERSION) alone."""
    folder = paths.cache_dir() / "tools" / requirement.replace("==", "-")
    if not (folder / ".complete").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement], check=True)
        (folder / ".complete").touch()
    return folder / "bin"
