"""Your folder laid over an image: a thin image, the base with the folder DIR copied to PATH and
work starting there, as `generator run` starts your code in DIR. Built in seconds, once per
change of DIR or of the base; `run --container` runs it, and the node pulls it from the
registry on this machine (`cluster up --image REPO:TAG=DIR[:PATH]`)."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from generator.images import engine as engine_
from generator.images import recipe

REPOSITORY = "localhost/pytorchjob-kit-layer"


def build(eng: engine_.Engine, base: str, folder: str, at: str, repo: str) -> tuple[str, bool]:
    """(the layer's local name, whether it was built now): `folder` at `at` over the local image
    `base`. One name per mapping, so a changed folder replaces its own layer and no other."""
    base_id = eng.image_id(base) or ""
    name = re.sub(r"[^a-z0-9._-]+", "-", repo.lower()).strip("-._") or "image"
    tag = f"{REPOSITORY}/{name}:{hashlib.sha256(f'{folder}:{at}'.encode()).hexdigest()[:12]}"
    home = engine_.folder() / "layers"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    dockerfile = home / f"{tag.rsplit(':', 1)[1]}.Containerfile"
    if any(ord(c) < 32 or ord(c) == 127 for c in f"{base_id}{at}"):
        raise ValueError(f"{at!r}: a path with a control character would add lines to the Containerfile")
    text = f"FROM {base_id}\nCOPY . {at}\nWORKDIR {at}\n"
    if not dockerfile.is_file() or dockerfile.read_text() != text:
        dockerfile.write_text(text)
    job = recipe.Recipe(tag, dockerfile, Path(folder), fix=f"the lines above say why; fix {folder} and run again")
    return tag, recipe.ensure(eng, job, base_id)
