"""A volume's ownership as a kubelet sets it for the pod's fsGroup, for `generator run` and
`run --container` alike: folders and files belong to the group, which may read (and on a writable
volume write) them, and folders pass the group on to what is made in them."""
from __future__ import annotations

import os
import stat
from pathlib import Path


def own(path: Path, group: int, bits: int) -> None:
    os.chown(path, -1, group, follow_symlinks=False)
    os.chmod(path, path.stat().st_mode & 0o777 | bits)


def own_tree(root: Path, group: int) -> None:
    """fsGroup on a writable volume. A pod may write this volume while the walk goes on, so
    nothing is reached by a path that a link could redirect: folders are walked through open
    descriptors (os.fwalk never follows a link), and each file is opened without following one
    and changed through its descriptor."""

    def change(fd: int, bits: int) -> None:
        os.fchown(fd, -1, group)
        os.fchmod(fd, os.fstat(fd).st_mode & 0o777 | bits)

    for _, _, files, folder in os.fwalk(root, follow_symlinks=False):
        change(folder, 0o2770)
        for name in files:
            try:  # O_NONBLOCK: a FIFO left in the volume must not hold the walk up
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
            except OSError:  # a link (ELOOP), or gone meanwhile: nothing of ours to change
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    change(fd, 0o660)
            finally:
                os.close(fd)
