"""Your own image: a Dockerfile in your folder built the way the trainer's is (the same engine and
settings), once per change of what it copies."""
from __future__ import annotations

import re
from pathlib import Path

from generator.errors import UserError
from generator.images import base, recipe
from generator.images import engine as engine_


def default_tag(context: Path) -> str:
    """localhost/<folder name>:latest, the folder's name made a valid repository name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", context.resolve().name.lower()).strip("-._") or "image"
    return f"localhost/{name}:latest"


def build(directory: str, tag: str | None = None, dockerfile: str | None = None, build_args: dict[str, str] | None = None,
          say=print, show=None) -> tuple[str, bool]:
    """(the image's name, whether it was built now) for the Dockerfile of `directory`."""
    context = Path(directory)
    file = Path(dockerfile) if dockerfile else context / "Dockerfile"
    if not file.is_file():
        raise UserError(f"{file}: no such Dockerfile; write one there, or name it with -f")
    ref = tag or default_tag(context)
    eng = engine_.get(say)
    made, base_id = base.arguments(eng, file, say, show)
    job = recipe.Recipe(ref, file.resolve(), context.resolve(), {**made, **(build_args or {})},
                        fix=f"the lines above say why; fix {file} (or what it needs) and run again")
    if not recipe.current(eng, job, base_id):
        say(f"building {ref} from {file} with {eng.name}")
    return ref, recipe.ensure(eng, job, base_id, show=show)
