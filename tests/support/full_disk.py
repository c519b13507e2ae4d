"""A filesystem of the test's own that is full: a 64 KiB tmpfs, filled to its last byte, so that
every write into it fails with ENOSPC as on a full disk (root, to mount it; skipped without)."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest


@contextlib.contextmanager
def full_folder(where: Path, before: Callable[[Path], None] | None = None):
    """`where`/full: a mounted tmpfs whose space is all taken by one file, `filler`; `before`
    writes there what should be there before it filled up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem to fill needs root")
    folder = where / "full"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(folder)], check=True)
    try:
        if before:
            before(folder)
        with open(folder / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def left(folder: Path) -> list[str]:
    """What the folder holds besides the filler."""
    return sorted(p.name for p in folder.iterdir() if p.name != "filler")
