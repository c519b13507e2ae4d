"""An image archive given to `image load`, checked member by member before root hands it to skopeo.

skopeo's oci-archive transport unpacks the tar itself and follows the links in it, so an archive
holding `blobs/sha256 -> /etc/cron.d` and then `blobs/sha256/x` would write where the link points.
An OCI archive is unpacked here instead, into a private folder of ours, taking only what the OCI
image layout has (oci-layout, index.json, blobs/<alg>/<hex>) as regular files and folders, and skopeo
reads that folder. A `docker save` archive (manifest.json) is read by skopeo in place, never
unpacked, and links in it are kept only when they point inside it. Either way no member may be
absolute, climb out with `..`, or make the archive larger than LIMIT or the free disk space."""
from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from generator import trusted
from generator.errors import UserError

# The most an archive may unpack to, all members together; the trainer's image is about 5.4 GB.
LIMIT = 64 << 30
# Room left on the disk after an OCI archive is unpacked.
SPARE = 1 << 30
OCI_NAMES = re.compile(r"(oci-layout|index\.json|blobs|blobs/[a-z0-9]+([+._-][a-z0-9]+)*(/[a-f0-9]+)?)")
LAYOUT_HINT = "an OCI archive holds only oci-layout, index.json and blobs/<alg>/<hex>, as regular files and folders"
KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
         tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a named pipe"}


def _refuse(path: Path, member: str, why: str) -> UserError:
    return UserError(f"{path}: member {member!r} {why}; nothing was loaded: give an archive that `podman save`, "
                     "`docker save` or `skopeo copy` wrote")


def _name(path: Path, member: tarfile.TarInfo) -> str:
    """The member's name inside the archive, refused when absolute or climbing out."""
    name = member.name.removeprefix("./").rstrip("/")
    if member.name.startswith("/") or ".." in member.name.split("/"):
        raise _refuse(path, member.name, "is absolute or climbs out with `..`")
    return name


def _members(path: Path, tar: tarfile.TarFile, limit: int) -> dict[str, tarfile.TarInfo]:
    """Every member by name, read before anything is written: the generic rules for any archive."""
    members: dict[str, tarfile.TarInfo] = {}
    total = 0
    for member in tar:
        name = _name(path, member)
        if not name:
            continue  # the archive's own top folder, "./"
        if not (member.isfile() or member.isdir() or member.issym()):
            raise _refuse(path, member.name, f"is {KINDS.get(member.type, 'no regular file or folder')}")
        if name in members:
            raise _refuse(path, member.name, "appears twice")
        total += member.size
        if total > limit:
            raise _refuse(path, member.name, f"makes the archive larger than {limit} bytes unpacked")
        members[name] = member
    return members


def _docker(path: Path, members: dict[str, tarfile.TarInfo]) -> None:
    """`docker save` links each legacy layer folder's layer.tar to its blob: only links inside stay."""
    for name, member in members.items():
        if member.issym():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
            if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
                raise _refuse(path, member.name, f"is a symbolic link to {member.linkname!r}, outside the archive")


def _oci(path: Path, members: dict[str, tarfile.TarInfo]) -> None:
    for name, member in members.items():
        if member.issym():
            raise _refuse(path, member.name, f"is a symbolic link (to {member.linkname!r}); {LAYOUT_HINT}")
        blob = name.count("/") == 2
        if not OCI_NAMES.fullmatch(name) or member.isdir() == (blob or name in ("oci-layout", "index.json")):
            raise _refuse(path, member.name, f"is not part of an OCI image layout; {LAYOUT_HINT}")


def _unpack(path: Path, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], into: Path) -> None:
    """Only folders and regular files, into a folder no other user can write to, so no link is ever there
    to follow; each file created anew (O_EXCL) and never longer than its header says."""
    free = shutil.disk_usage(into).free
    size = sum(m.size for m in members.values())
    if size + SPARE > free:
        raise UserError(f"{path}: unpacked it needs {size} bytes, and {into} has {free} free (keeping {SPARE} spare); "
                        "free some space, or set TMPDIR to a folder with room")
    for name in sorted(n for n, m in members.items() if m.isdir()):
        os.makedirs(into / name, mode=0o700, exist_ok=True)
    for member in tar:
        name = _name(path, member)
        if not name:
            continue
        seen = members.get(name)
        if seen is None or (seen.type, seen.size) != (member.type, member.size):
            raise _refuse(path, member.name, "changed while it was read")
        if not member.isfile():
            continue
        (into / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(into / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out, tar.extractfile(member) as data:
            shutil.copyfileobj(data, out)


@contextlib.contextmanager
def source(path: Path, limit: int = LIMIT) -> Iterator[str]:
    """skopeo's source for the archive at `path`, checked (an OCI one unpacked into a private
    folder, removed after): `oci:FOLDER` or `docker-archive:PATH`."""
    try:
        with tarfile.open(path) as tar:
            members = _members(path, tar, limit)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UserError(f"{path}: not an image archive ({exc}); give an image of the local store, an OCI archive, or "
                        "what `docker save` / `podman save` writes") from None
    if "manifest.json" in members:
        _docker(path, members)
        yield f"docker-archive:{path}"
        return
    if "oci-layout" not in members:
        raise UserError(f"{path}: a tar file without oci-layout or manifest.json, so no image archive; give an image of "
                        "the local store, an OCI archive, or what `docker save` / `podman save` writes")
    _oci(path, members)
    # 0700 and a new name, in a folder nobody else may rename it out of (a sticky /tmp is fine): ours alone.
    trusted.check(Path(tempfile.gettempdir(), "pytorchjob-kit-archive-"), "the temp folder", "set TMPDIR to a folder "
                  "of your own", itself=False)
    into = Path(tempfile.mkdtemp(prefix="pytorchjob-kit-archive-"))
    try:
        try:
            with tarfile.open(path) as tar:
                _unpack(path, tar, members, into)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise UserError(f"{path}: could not be unpacked into {into} ({exc}); nothing was loaded") from None
        yield f"oci:{into}"
    finally:
        shutil.rmtree(into, ignore_errors=True)
