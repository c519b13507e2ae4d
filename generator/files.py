"""Files the tool writes where the user points it (`-o FILE`, `diagnose --save`): all or nothing, and
never through a symbolic link that another user made.

The folder is opened without following a link at its last part, the temp file is made in that open
folder and renamed within it, so a link that appears at the target after the checks is replaced by
the rename, never written through. The user's own links, to the file or to its folder, are followed
(a `current.yaml` pointing at the file it stands for), one at a time under the same rules; another
user's link is refused: root writing into a shared folder must not land where that user chose."""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from generator.errors import Finding, UserError

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


@contextlib.contextmanager
def record_lock(record: Path):
    """Held while a machine-wide record (the kernel settings', `run --container`'s) is read and
    changed: a lock file beside it, its folder made 0700 first."""
    record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(record.with_name(f".{record.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temp file beside it, fsync, rename. An existing file keeps
    its mode, a new one gets the umask's; anything that is not a regular file is refused rather than
    replaced."""
    named = path
    for _ in range(MAX_LINKS):
        folder, name = os.path.split(path)
        folder = folder or "."
        if name in ("", ".", ".."):
            raise _refused(named, "is a directory, so it is not replaced")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _refused(named, f"cannot make the folder {folder} ({exc.strerror})") from None
        opened = _open_folder(folder, named)
        if isinstance(opened, str):  # the user's own link to a folder: go where it points
            path = os.path.join(opened, name)
            continue
        try:
            followed = _write_in(opened, folder, name, text, named)
        finally:
            os.close(opened)
        if followed is None:
            return
        path = followed
    raise _refused(named, f"goes through more than {MAX_LINKS} symbolic links",
                   hint="name the file itself rather than a chain of links")


def write_whole(path, text: str, mode: int = 0o666) -> None:
    """The tool's own small files in its own folders (a cluster's state, the registry's records):
    written beside `path` under a name of this process's, renamed over it; where the write fails (a
    full disk) the temp file is removed and the OSError raised, `path` left as it was. `mode` is
    narrowed by the umask."""
    folder, name = os.path.split(os.fspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _refused(path: str, message: str, hint: str = "name a file to write, or leave out -o to print to stdout") -> UserError:
    return UserError([Finding("", message, hint=hint)], source=path)


def _foreign_link(path: str, what: str, owner: int, points_to: str) -> UserError:
    return _refused(path, f"{what} is a symbolic link (to {points_to}) made by uid {owner}, not by you (uid "
                          f"{os.geteuid()}), so it is not written through",
                    hint="name the file itself, if that is where you mean to write, or remove the link first")


def _open_folder(folder: str, named: str) -> int | str:
    """An open folder, not through a link at its last part; or, where that part is the user's own
    link, the path it points to."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        try:
            seen = os.lstat(folder)
        except OSError:
            seen = None
        if seen is None or not stat.S_ISLNK(seen.st_mode):
            raise _refused(named, f"cannot open the folder {folder} ({exc.strerror})") from None
        target = os.readlink(folder)
        if seen.st_uid != os.geteuid():
            raise _foreign_link(named, f"its folder {folder}", seen.st_uid, target) from None
        return os.path.join(os.path.dirname(folder), target)


def _write_in(folder_fd: int, folder: str, name: str, text: str, named: str) -> str | None:
    """Write `name` in the open folder; None when written, else the path the user's own link at
    `name` points to, for the caller to follow."""
    try:
        seen = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        seen = None
    if seen is not None and stat.S_ISLNK(seen.st_mode):
        target = os.readlink(name, dir_fd=folder_fd)
        if seen.st_uid != os.geteuid():
            raise _foreign_link(named, "it", seen.st_uid, target)
        return os.path.join(folder, target)
    if seen is not None and not stat.S_ISREG(seen.st_mode):
        kind = "a directory" if stat.S_ISDIR(seen.st_mode) else "not a regular file (a device, pipe or socket)"
        raise _refused(named, f"is {kind}, so it is not replaced")
    if seen is not None:
        mode = stat.S_IMODE(seen.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    temp, fd = _temp_file(folder_fd, name, named)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        os.rename(temp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)  # replaces a link itself, never its target
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=folder_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):  # a full disk, a quota: the file as it was, and no temp file beside it
            raise _refused(named, f"could not be written ({exc.strerror}); it is left as it was",
                           hint="free space where it goes (`df` shows how much is left), or name a file elsewhere") from None
        raise
    try:
        os.fsync(folder_fd)  # the rename itself survives a crash
    except OSError:
        pass
    return None


def _temp_file(folder_fd: int, name: str, named: str) -> tuple[str, int]:
    """A new file of our own in the open folder, open for writing (O_EXCL: never one that was there)."""
    for _ in range(100):
        # os.urandom rather than secrets, which would cost every command its hashlib, hmac and random imports.
        temp = f".{name}.{os.urandom(4).hex()}.tmp"
        try:
            return temp, os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=folder_fd)
        except FileExistsError:
            continue
        except OSError as exc:
            raise _refused(named, f"cannot write in its folder ({exc.strerror})",
                           hint="name a folder you may write in, or leave out -o to print to stdout") from None
    raise _refused(named, "no free name for a temp file beside it", hint="remove the .*.tmp files left there")
