"""`run --container`'s images: the local image each of the job's images runs as (itself, the trainer's
build this machine has, or the job's image with a folder laid over it for `--image REPO=DIR`), and
the `--image` mappings refused under --container because they would run this machine's programs."""
from __future__ import annotations

from generator.errors import UserError
from generator.images import engine as engine_
from generator.local.plan import Plan


def refuse_aliases(aliases: dict[str, str] | None, trainer: str) -> tuple[dict[str, str], dict[str, str]]:
    """--image under --container, as (the copies of the trainer, the layers). REPO=<the trainer's
    repository> (a copy of the trainer) runs the trainer's local image; REPO=DIR[:PATH] runs REPO's
    image with DIR laid over it at PATH (a thin layer built here: layer()). `host` runs code with
    this machine's Python, and the charts' other images train nothing, so they are refused, saying
    what to do instead."""
    copies, layers, wrong = {}, {}, {}
    for repo, target in (aliases or {}).items():
        if target == trainer:
            copies[repo] = target
        elif target.startswith("/"):  # programs.mapping made DIR[:PATH] absolute
            layers[repo] = target
        else:
            wrong[repo] = target
    if wrong:
        listing = ", ".join(f"{repo}={target}" for repo, target in wrong.items())
        raise UserError(f"--image {listing}: with --container each replica runs its own image, so there is no "
                        "program of this machine to map; build your image into the local store (`python -m generator "
                        "image build DIR -t REPO:TAG`) and run without --image, lay your code over the job's image with "
                        f"REPO=DIR[:PATH], or run without --container (only REPO={trainer}, a copy of the trainer's "
                        "image, and REPO=DIR[:PATH] are taken with --container)")
    return copies, layers


def layer(eng: engine_.Engine, base: str, target: str, workdir: str | None, repo: str, say=print) -> str:
    """`--image REPO=DIR[:PATH]` under --container: the job's image `base` with DIR laid over it at
    PATH (default: the container's workingDir, else the code path); the local name it runs as."""
    from generator.container import programs
    from generator.images import layer as layer_

    folder, at = programs.split_code(target)
    at = at or workdir or programs.CODE_PATH
    tag, built = layer_.build(eng, base, folder, at, repo)
    if built:
        say(f"note: {base} runs as {tag}: {folder} laid over it at {at}")
    return tag


def local_images(eng: engine_.Engine, plan: Plan, aliases: dict[str, str] | None = None,
                 say=print, layers: dict[str, str] | None = None) -> dict[str, str]:
    """The job's image -> the local image it runs as: itself when the store holds it; the trainer's
    CUDA build for the chart's default trainer image where only that is built here (as the registry
    holds it); for a copy of the trainer (`--image REPO=<trainer>`), the trainer's image of the same
    tag. A missing image is named, with how to get it; an image whose USER is root under
    runAsNonRoot is refused as a kubelet refuses it."""
    from generator.container import programs
    from generator.images import trainer

    wanted: dict[str, list[str]] = {}
    for r in plan.replicas:
        wanted.setdefault(r.container.image, []).append(r.name)
    out: dict[str, str] = {}
    missing = []
    builds = [trainer.reference("cpu"), trainer.reference("gpu")]  # the trainer's builds, as `image build` names them
    for image, users in wanted.items():
        repo = programs.repository(image)
        last = image.split("@", 1)[0].rsplit("/", 1)[-1]
        tag = last.rpartition(":")[2] if ":" in last else "latest"
        if repo in (aliases or {}):  # a copy of the trainer: whichever build of it this machine has
            candidates = builds
        elif repo == trainer.repository() and tag == trainer.version():  # the chart's default: either build
            candidates = [image, builds[1]]
        else:
            candidates = [image]
        found = next((c for c in candidates if eng.image_id(c)), None)
        if found and found != image:
            say(f"note: {image} runs as {found}, the trainer's build this machine has"
                + (" (the CUDA one, which runs on the CPU too)" if found == builds[1] else ""))
        if found and repo in (layers or {}):
            workdir = next(r.container.workdir for r in plan.replicas if r.container.image == image)
            out[image] = layer(eng, found, layers[repo], workdir, repo, say)
            continue
        if found:
            out[image] = found
            continue
        if candidates[-1] in builds:
            how = "build the trainer's image with `python -m generator image build` (or `make image`)"
        else:
            how = (f"build yours with `python -m generator image build DIR -t {image}`, or get it with "
                   f"`{eng.name} pull {image}` or `{eng.name} load -i FILE`")
        missing.append(f"image {' or '.join(dict.fromkeys([image, *candidates]))} ({', '.join(users)}) is not in "
                       f"{eng.name}'s local store: {how}")
    if missing:
        raise UserError("\n".join(missing))
    for r in plan.replicas:
        c = r.container
        if c.non_root and c.uid is None:
            user = eng.run("image", "inspect", "--format", "{{.Config.User}}", out[c.image]).stdout.strip()
            if user.split(":")[0] in ("", "0", "root"):
                raise UserError(f"{r.name}: container has runAsNonRoot and image {c.image} will run as root (its USER is "
                                f"{user or 'unset'}), which a kubelet refuses to start; set runAsUser to a non-root uid")
    return out
