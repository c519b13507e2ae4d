"""Folders root works in by path (a cluster's folder, the binary cache): only where no other user
of the machine can change what the path leads to between a check and its use.

No link anywhere on the path (a link is another user's to re-point, or leads where its maker chose);
every folder on the way the user's own or root's; none of them writable by anyone else, except a
sticky one such as /tmp (mode 1777): there another user may add entries but cannot rename or remove
the user's own, so an entry of the user's below it stays theirs. The folder itself may be writable
by nobody else, sticky or not. What does not exist yet is made later by the user, so it counts."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from generator.errors import UserError


def absolute(path: str | Path) -> Path:
    """`path` made absolute without asking the filesystem: a link in it stays there, to be refused."""
    return Path(os.path.abspath(path))


def check(path: str | Path, what: str, fix: str, itself: bool = True) -> Path:
    """The absolute path, refused (naming the part, `what` it is and the `fix`) unless it is the user's alone;
    without `itself`, only the folders above it are checked (the caller checks the last part its own way)."""
    path = absolute(path)
    me = os.geteuid()
    current = Path(path.anchor)
    for index, part in enumerate(("", *path.parts[1:])):
        current = current / part if part else current
        try:
            seen = os.lstat(current)
        except FileNotFoundError:
            return path  # the rest is made by the user
        except OSError as exc:
            raise UserError(f"{what} {path}: {current} cannot be read ({exc.strerror}); {fix}") from None
        last = index == len(path.parts) - 1
        if last and not itself:
            return path
        if stat.S_ISLNK(seen.st_mode):
            raise UserError(f"{what} {path}: {current} is a symbolic link, which its owner could point anywhere; "
                            f"name the folder by its real path, with no link in it ({fix})")
        if seen.st_uid not in (0, me):
            raise UserError(f"{what} {path}: {current} belongs to uid {seen.st_uid}, neither you (uid {me}) nor root, "
                            f"who could swap what is below it; {fix}")
        sticky = bool(seen.st_mode & stat.S_ISVTX) and not last
        if seen.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
            raise UserError(f"{what} {path}: {current} is writable by other users (mode {stat.S_IMODE(seen.st_mode):o}), "
                            f"who could swap what is below it; {fix}")
    return path
