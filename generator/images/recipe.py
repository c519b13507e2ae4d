"""An image built from a Dockerfile once per machine: its tag, what it is built from, and a record
of the build in the user's cache, so a later call finds the image up to date until one of its
inputs (the Dockerfile, the files it copies, its build arguments, its base) changes. The engine's
own layer cache then rebuilds only the steps after the first changed one."""
from __future__ import annotations

import fcntl
import hashlib
import json
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
        context's ignore file: what the image is built from besides the Dockerfile."""
        text = self.dockerfile.read_text().replace("\\\n", " ")
        sources: list[str] = []
        for line in text.splitlines():
            words = line.split()
            if words and words[0].upper() in ("COPY", "ADD"):
                sources += [w for w in words[1:-1] if not w.startswith("--")]
        found: list[Path] = []
        for source in [*sources, ".dockerignore", ".containerignore"]:
            for path in sorted(self.context.glob(source)) if source not in (".", "./") else [self.context]:
                if path.is_dir():
                    found += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                elif path.is_file():
                    found.append(path)
        return found

    def key(self, base_id: str = "") -> str:
        digest = hashlib.sha256()
        digest.update(self.dockerfile.read_bytes())
        digest.update(json.dumps(sorted(self.build_args.items())).encode())
        digest.update(base_id.encode())
        if self.stamp:
            digest.update(self.stamp.encode())
            return digest.hexdigest()[:16]
        for path in self.copied():
            digest.update(str(path.relative_to(self.context)).encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]


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
