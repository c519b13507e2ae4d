"""The trainer's image (trainer/Dockerfile): its name from the job chart (repository, and the
chart's appVersion as tag, `-cuda` for the CUDA build), its variant, and its build here."""
from __future__ import annotations

import re
import urllib.error
import urllib.request

import yaml

from generator import paths
from generator.errors import UserError
from generator.images import base, recipe
from generator.images import engine as engine_


def repository() -> str:
    return yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())["image"]["repository"]


def version() -> str:
    return yaml.safe_load((paths.JOB_CHART / "Chart.yaml").read_text())["appVersion"]


def reference(variant: str) -> str:
    """The chart's name for the build: <version> for the CPU one, <version>-cuda for the CUDA one."""
    return f"{repository()}:{version()}{'-cuda' if variant == 'gpu' else ''}"


def cpu_index() -> str:
    """PyTorch's CPU wheel index, as the Dockerfile names it."""
    found = re.search(r'PIP_EXTRA_INDEX_URL="([^"]+)"', paths.TRAINER_DOCKERFILE.read_text())
    if not found:
        raise RuntimeError(f"{paths.TRAINER_DOCKERFILE} names no PIP_EXTRA_INDEX_URL for the CPU variant")
    return found.group(1)


def unreachable(url: str) -> str:
    """Why `url` cannot be fetched from here; '' when it can."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=15):
            return ""
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


def choose(variant: str, say=print) -> str:
    """cpu or gpu. `auto` is the CPU build where PyTorch's CPU index answers, else the CUDA one
    from PyPI (it runs on the CPU too); `cpu` where the index does not answer is refused."""
    if variant == "gpu":
        return variant
    why = unreachable(cpu_index())
    if not why:
        return "cpu"
    if variant == "cpu":
        raise UserError(f"VARIANT=cpu installs torch from PyTorch's CPU wheel index {cpu_index()}, which this machine "
                        f"cannot reach ({why}); build the CUDA variant from PyPI instead (`make image VARIANT=gpu`, about "
                        "5 GB, it runs on the CPU too), or build where that index is reachable")
    say(f"PyTorch's CPU wheel index {cpu_index()} is not reachable from here ({why}): building the CUDA variant "
        "from PyPI, which runs on the CPU too")
    return "gpu"


def build(variant: str = "auto", say=print, show=None) -> tuple[str, bool]:
    """(the image's name, whether it was built now): built once per machine, then reused until
    the Dockerfile, the files it copies or the base change."""
    eng = engine_.get(say)
    notes: list[str] = []  # why auto chose the CUDA build: worth saying only when it builds
    chosen = choose(variant, notes.append)
    args, base_id = base.arguments(eng, paths.TRAINER_DOCKERFILE, say, show)
    args["VARIANT"] = chosen
    ref = reference(chosen)
    job = recipe.Recipe(ref, paths.TRAINER_DOCKERFILE, paths.ROOT, args,
                        fix="its last lines above say why (pip needs the Python package index, reached as this machine reaches it)")
    if not recipe.current(eng, job, base_id):
        for note in notes:
            say(note)
        say(f"building {ref} from {paths.TRAINER_DOCKERFILE.relative_to(paths.ROOT)} with {eng.name} (once per machine "
            "and change of its inputs; the first build about 6 minutes)")
    return ref, recipe.ensure(eng, job, base_id, show)
