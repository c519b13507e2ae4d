"""The base image a Dockerfile starts FROM, where no registry serves it: Python from Debian's
packages, made with mmdebstrap (the release this machine runs), imported into the local store
once per machine under a name that carries a hash of how it was made."""
from __future__ import annotations

import fcntl
import hashlib
import subprocess
import tempfile
from pathlib import Path

from generator.images import engine as engine_
from generator.images.engine import Engine

# What `python:3.11-slim` gives the trainer's Dockerfile: python (and `python` by that name), venv,
# pip, the CA bundle, groupadd/useradd, and the OpenMP runtime torch loads.
PACKAGES = ["python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates", "passwd", "libgomp1"]
# Debian marks its Python as managed by apt (PEP 668), and pip then refuses to install beside it;
# an image's Python is the image's own, as in python:3.11-slim.
HOOK = 'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
REPOSITORY = "localhost/pytorchjob-kit/debian-python"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def suite() -> str:
    """The Debian release this machine runs (its packages are what apt here can reach)."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME=") and line.split("=", 1)[1].strip('"'):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "bookworm"


def argv(release: str, out: Path) -> list[str]:
    return ["mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", f"--customize-hook={HOOK}",
            release, str(out)]


def reference() -> str:
    """The local name of the base made here: one per release and recipe."""
    release = suite()
    key = hashlib.sha256("\n".join(argv(release, Path("-"))).encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{release}-{key}"


def dockerfile_default(dockerfile: Path, name: str) -> str | None:
    """The default of `ARG name=...` in a Dockerfile, None when it declares none."""
    for line in dockerfile.read_text().splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and words[0].upper() == "ARG" and words[1].startswith(f"{name}="):
            return words[1].split("=", 1)[1].strip().strip('"')
    return None


def qualified(image: str) -> str:
    """Docker Hub's implicit names written out (podman resolves no short names without a prompt)."""
    first, _, rest = image.partition("/")
    if first in ("docker.io", "index.docker.io") and rest:
        return qualified(rest)
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"


def served(eng: Engine, image: str) -> bool:
    """Whether `image` is in the local store, or a registry serves it now (it is pulled)."""
    if eng.image_id(qualified(image)):
        return True
    try:
        return eng.run("pull", "--quiet", qualified(image), check=False, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def arguments(eng: Engine, dockerfile: Path, say=print, show=None) -> tuple[dict[str, str], str]:
    """({"BASE": the Debian-made base}, its image ID) for a Dockerfile whose `ARG BASE=IMAGE` no
    registry serves here; ({}, "") where the engine has or pulls IMAGE, or the Dockerfile has no BASE."""
    default = dockerfile_default(dockerfile, "BASE")
    if not default or eng.name != engine_.PODMAN or eng.image_id(qualified(default)):
        return {}, ""
    # The base made here once stays this machine's, without asking a registry each time.
    if eng.image_id(reference()) or not served(eng, default):
        made = ensure(eng, say, show)
        return {"BASE": made}, eng.image_id(made) or ""
    return {}, ""


def ensure(eng: Engine, say=print, show=None) -> str:
    """The Debian-made base's local name, made first when the store lacks it."""
    ref = reference()
    if eng.image_id(ref):
        return ref
    folder = engine_.folder()
    with open(folder / ".base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once make it once
        if eng.image_id(ref):
            return ref
        engine_.install(["mmdebstrap"], say)
        say(f"making the base image {ref} from Debian's {suite()} packages with mmdebstrap (once per machine; "
            "about 2 minutes)")
        with tempfile.TemporaryDirectory(dir=folder, prefix=".base-") as tmp:
            rootfs = Path(tmp) / "rootfs.tar"
            engine_.stream(argv(suite(), rootfs), "mmdebstrap", "Debian's package mirror must be reachable "
                           "(as `apt-get update` reaches it)", show=show)
            eng.run("import", "--change", f"ENV {PATH_ENV}", "--change", 'CMD ["python3"]', str(rootfs), ref)
    return ref
