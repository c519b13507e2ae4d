"""An image built from a Dockerfile once per machine: its tag, what it is built from, and a record
of the build in the user's cache, so a later call finds the image up to date until one of its
inputs (the Dockerfile, the files it copies, its build arguments, its base) changes. The engine's
own layer cache then rebuilds only the steps after the first changed one."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from generator import files
from generator.images import engine as engine_
from generator.images.engine import Engine


@dataclass(frozen=True)
class Recipe:
    tag: str
    dockerfile: Path
    context: Path
    build_args: dict[str, str] = field(default_factory=dict)
    fix: str = "fix the Dockerfile or what it needs, and run again"  # said when the build fails
    # What the image is built from, where the context's files are not (a context made only to build it).
    stamp: str = ""

    def copied(self) -> list[Path]:
        """The files of the context that the Dockerfile's COPY and ADD instructions name, and the
        context's ignore file: what the image is built from besides the Dockerfile. A link is one
        entry, never followed (a link to /proc/kcore would stall the read), as COPY copies it."""
        text = self.dockerfile.read_text().replace("\\\n", " ")
        sources: list[str] = []
        for line in text.splitlines():
            words = line.split()
            if words and words[0].upper() in ("COPY", "ADD"):
                if any(w.startswith("--from") for w in words[1:]):
                    continue  # from another stage or image, not from the context
                sources += [w for w in words[1:-1] if not w.startswith("--") and "://" not in w]
        found: list[Path] = []
        for source in [*sources, ".dockerignore", ".containerignore"]:
            pattern = source.lstrip("/")  # a source is in the context even when written from its top
            if ".." in pattern.split("/"):
                continue  # outside the context: the build refuses it
            for path in _matches(self.context, pattern):
                if not _through_link(path, self.context):
                    found += _entries(path)
        return list(dict.fromkeys(found))

    def key(self, base_id: str = "") -> str:
        digest = hashlib.sha256()
        digest.update(self.dockerfile.read_bytes())
        digest.update(json.dumps(sorted(self.build_args.items())).encode())
        digest.update(base_id.encode())
        if self.stamp:
            digest.update(self.stamp.encode())
            return digest.hexdigest()[:16]
        for path in self.copied():
            digest.update(str(path.relative_to(self.context)).encode() + b"\0")
            _content(path, digest)
        return digest.hexdigest()[:16]


def _matches(context: Path, pattern: str) -> list[Path]:
    """What a COPY source names: a plain name even when it is a link to nothing here (glob skips those)."""
    if pattern in ("", ".", "./"):
        return [context]
    if any(c in pattern for c in "*?["):
        return sorted(context.glob(pattern))
    return [context / pattern] if os.path.lexists(context / pattern) else []


def _through_link(path: Path, context: Path) -> bool:
    """Whether a folder between the context and `path` is a link (the glob followed it)."""
    return any(parent.is_symlink() for parent in path.parents if parent != context and parent.is_relative_to(context))


def _entries(path: Path) -> list[Path]:
    """The regular files and links at `path`, a folder walked without following links."""
    if path.is_symlink() or path.is_file():
        return [path]
    if not path.is_dir():
        return []  # a named pipe or a device: nothing an image is built from
    found = []
    for top, folders, names in os.walk(path):  # links to folders are listed in `folders`, not entered
        folders[:] = [f for f in folders if f != "__pycache__"]
        entries = [Path(top, f) for f in [*names, *folders]]
        found += sorted(p for p in entries if p.is_symlink() or p.is_file())
    return found


def _content(path: Path, digest) -> None:
    """A regular file's bytes, or a link's target: opened without following a link, and never a pipe
    or device put there since (O_NONBLOCK: opening a pipe does not wait)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        digest.update(b"link\0" + os.readlink(path).encode())
        return
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            digest.update(b"special\0")
            return
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)


def _record(tag: str) -> Path:
    folder = engine_.folder() / "built"
    folder.mkdir(exist_ok=True, mode=0o700)
    return folder / f"{hashlib.sha256(tag.encode()).hexdigest()[:16]}.json"


def current(eng: Engine, recipe: Recipe, base_id: str = "") -> bool:
    """Whether the local store holds `recipe.tag` as built from today's inputs."""
    try:
        record = json.loads(_record(recipe.tag).read_text())
    except (OSError, ValueError):
        return False
    return record.get("key") == recipe.key(base_id) and record.get("id") == eng.image_id(recipe.tag)


def ensure(eng: Engine, recipe: Recipe, base_id: str = "", show=None) -> bool:
    """Build `recipe` unless the store holds it up to date; True when it was built now."""
    if current(eng, recipe, base_id):
        return False
    with open(_record(recipe.tag).with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another clone building the same tag: wait, then find it built
        if current(eng, recipe, base_id):
            return False
        key = recipe.key(base_id)
        replaced = eng.image_id(recipe.tag)
        argv = eng.argv("build", "-f", str(recipe.dockerfile), "-t", recipe.tag, *eng.build_flags(),
                        *[f"--build-arg={k}={v}" for k, v in sorted(recipe.build_args.items())], str(recipe.context))
        started = time.monotonic()
        engine_.stream(argv, f"building {recipe.tag} from {recipe.dockerfile}", recipe.fix, env=eng.environ(),
                       show=show, nice=eng.name != engine_.DOCKER)
        built = eng.image_id(recipe.tag)
        if replaced and replaced != built:
            # The image the tag named before would stay untagged (gigabytes for the trainer's, at every change
            # of what it copies); the engine keeps it while another tag, a child image or a container uses it.
            eng.run("rmi", replaced, check=False)
        record = {"key": key, "id": built, "seconds": round(time.monotonic() - started)}
        files.write_whole(_record(recipe.tag), json.dumps(record))
    return True
