"""`cluster up --image` on the real node, which pulls every image from the registry on this
machine: each mapping becomes an image the registry holds as REPO:TAG (`latest` where no tag is
given), pushed before the node starts and again at each `cluster up` on the running cluster.

- REPO[:TAG]=DIR[:PATH]: the folder DIR laid over REPO:TAG's image from the local store (your build
  or pull of it) or, where the store lacks it, over the torch runtime image the registry holds for
  Trainer's torch-distributed runtime (the trainer's Python and torch), at PATH (default the code
  path, /workspace), work starting there;
- REPO[:TAG]=KNOWN: a copy of the image the registry holds for the known repository KNOWN;
- REPO[:TAG]=host: refused before this (realnode/support.py): it runs this machine's programs.

A node pulls `latest` again for each pod (imagePullPolicy Always) and any other tag once, as every
kubelet does: a changed folder reaches new pods under `latest`, or under a new tag."""
from __future__ import annotations

from generator.container import programs
from generator.controlplane import chart_images, registry
from generator.errors import UserError
from generator.images import base, layer
from generator.images import engine as engine_
from generator.images.registry import split


def tagged(ref: str) -> str:
    """REPO[:TAG] as the registry holds it: the tag written out, Docker Hub's names in full."""
    repo, tag = split(ref)
    return base.qualified(f"{repo}:{tag}")


def torch_image(local: dict[str, str]) -> str:
    """The local image the registry holds as Trainer's torch runtime image."""
    return next(image for name, image in local.items() if split(name)[0] == chart_images.TORCH_REPOSITORY)


def known_image(local: dict[str, str], ref: str, known: str) -> str:
    """The local image of the known repository `known` (a chart image's repository) as the registry holds it."""
    for name, image in local.items():
        if programs.repository(split(name)[0]) == programs.repository(known):
            return image
    raise UserError(f"--image {ref}={known}: the registry on this machine holds no image of {known}; name one of "
                    f"{', '.join(sorted({programs.repository(split(n)[0]) for n in local}))}, or a folder")


def laid_over(eng: engine_.Engine, ref: str, target: str, local: dict[str, str], say=print) -> str:
    """REPO[:TAG]=DIR[:PATH]: the local image of DIR laid at PATH (default the code path) over your
    image REPO:TAG where the store holds it, else over the torch runtime image."""
    name = tagged(ref)
    folder, at = programs.split_code(target)
    at = at or programs.CODE_PATH
    own = eng.image_id(name)
    over = name if own else torch_image(local)
    image, built = layer.build(eng, over, folder, at, ref)
    if built:
        under = f"your image {name}" if own else f"{over} (the trainer's Python and torch)"
        say(f"{name}: {folder} laid over {under} at {at}")
    return image


def publish(reg: registry.Registry, images: dict[str, str], local: dict[str, str], say=print) -> list[str]:
    """Build and push each `--image` mapping (`local`: what chart_images.seed made, name -> local
    image); the names the registry holds them under."""
    if not images:
        return []
    eng = engine_.get(say)
    held = []
    for ref, target in images.items():
        name = tagged(ref)
        if target.startswith("/"):  # programs.mapping made DIR[:PATH] absolute
            image = laid_over(eng, ref, target, local, say)
        else:
            image = known_image(local, ref, target)
        registry.push(reg, eng, image, name, say)
        held.append(name)
    return held
