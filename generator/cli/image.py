"""`image build`: real images built on this machine (Docker, else podman), once per machine."""
from __future__ import annotations

import re

import click

# A build's step as the engines print them: podman's and buildah's `STEP 3/12: RUN ...`, Docker's
# plain progress `#7 [3/12] RUN ...`.
STEP = re.compile(r"^(STEP \d+/\d+: |#\d+ \[[^\]]*\d+/\d+\] )")
STEP_WIDTH = 160  # a RUN step's whole shell script would wrap over many lines


def _steps(line: str) -> None:
    if STEP.match(line):
        _say(line if len(line) <= STEP_WIDTH else line[:STEP_WIDTH - 3] + "...")


# The trainer image's variants: cpu, gpu (CUDA), or auto (generator/images/trainer.py chooses).
VARIANTS = ("auto", "cpu", "gpu")


def _say(line: str) -> None:
    click.echo(line, err=True)


@click.group("image")
def command() -> None:
    """Real OCI images built here: Docker where its engine answers, else podman (installed from Debian's packages when missing)."""


@command.command("build")
@click.argument("directory", required=False, type=click.Path(file_okay=False, exists=True))
@click.option("-t", "--tag", metavar="NAME:TAG", help="Your image's name (default: localhost/<DIRECTORY's name>:latest).")
@click.option("-f", "--file", "dockerfile", metavar="FILE", help="Your Dockerfile (default: DIRECTORY/Dockerfile).")
@click.option("--build-arg", "build_args", multiple=True, metavar="KEY=VALUE", help="A build argument; repeatable.")
@click.option("--variant", type=click.Choice(VARIANTS), default="auto", show_default=True,
              help="The trainer's torch: cpu from PyTorch's CPU wheel index (tag <version>), gpu the CUDA build from "
                   "PyPI (tag <version>-cuda); auto is cpu where that index answers, else gpu.")
@click.option("--quiet", is_flag=True, help="Leave the engine's build output out.")
@click.option("--steps", is_flag=True, help="Of the engine's build output, show only each step as it starts.")
def build(directory, tag, dockerfile, build_args, variant: str, quiet: bool, steps: bool) -> None:
    """Build the trainer's image (trainer/Dockerfile), or with DIRECTORY your own Dockerfile's, into the
    engine's local store, once per machine; later calls find it up to date until the Dockerfile,
    the files it copies or its base change."""
    show = None if quiet else _steps if steps else _say
    if directory is None and (tag or dockerfile or build_args):
        raise click.UsageError("-t, -f and --build-arg are for your own image: give its DIRECTORY")
    if directory is not None:
        from generator.images import user

        args = {}
        for item in build_args:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise click.BadParameter(f"{item!r}: write KEY=VALUE", param_hint="--build-arg")
            args[key] = value
        ref, built = user.build(directory, tag, dockerfile, args, say=_say, show=show)
        click.echo(f"{'built' if built else 'up to date'}: {ref}")
        return
    from generator.images import trainer

    ref, built = trainer.build(variant, say=_say, show=show)
    click.echo(f"{'built' if built else 'up to date'}: {ref}")


@command.group("registry")
def registry_group() -> None:
    """The OCI registry on this machine (loopback, mutual TLS) that holds the trainer's image, every image the charts name, and the charts."""


@registry_group.command("up")
@click.option("--variant", type=click.Choice(VARIANTS), default="auto", show_default=True,
              help="Which build of the trainer's image it holds (see `image build`).")
@click.option("--quiet", is_flag=True, help="Leave the engines' build output out.")
def registry_up(variant: str, quiet: bool) -> None:
    """Start the registry (unless it runs), build what it lacks once per machine, push it; list what it holds."""
    from generator.controlplane import chart_images, oci_charts, registry

    reg = registry.start(say=_say)
    for name in [*chart_images.seed(reg, say=_say, show=None if quiet else _say, variant=variant), *oci_charts.names()]:
        click.echo(f"holds {reg.address}/{name}")
    click.echo(f"registry: {reg.address} (client certificate folder: {reg.certs})")


@registry_group.command("status")
def registry_status() -> None:
    """Where the registry listens and what it holds."""
    from generator.controlplane import registry

    reg = registry.default()
    if not reg.address:
        click.echo(f"registry in {reg.root}: stopped")
        return
    click.echo(f"registry in {reg.root}: serving on {reg.address} (pid {reg.pid()}), client certificate folder {reg.certs}")
    pulls = reg.readonly
    if pulls.address:
        click.echo(f"read-only registry (the nodes' pulls): serving on {pulls.address} (pid {pulls.pid()}), client "
                   f"certificate folder {pulls.certs}")
    else:
        click.echo("read-only registry (the nodes' pulls): stopped (`image registry up` starts it)")
    for name in reg.catalog():
        click.echo(f"holds {reg.address}/{name}")


@registry_group.command("down")
def registry_down() -> None:
    """Stop the registry and its read-only twin; what they hold stays for their next start."""
    from generator.controlplane import registry

    pids = registry.stop()
    click.echo(f"stopped: registry (pids {', '.join(map(str, pids))})" if pids else "the registry was not running")


@command.command("load")
@click.argument("image")
@click.option("--as", "name", metavar="REPOSITORY:TAG", help="The name the registry holds it under (default: its own; "
              "required for an archive).")
def load(image: str, name: str | None) -> None:
    """Put IMAGE, from the local store or an image archive (OCI, or `docker save`'s), into the registry
    on this machine, starting it if needed: what `kind load` does for a kind cluster."""
    from pathlib import Path

    from generator.controlplane import registry
    from generator.errors import UserError
    from generator.images import archive, engine

    path = Path(image)
    if path.is_file():
        if not name:
            raise UserError(f"{image}: an archive names no image the registry could hold it as; add --as "
                            "REPOSITORY:TAG (for example --as registry.example.com/ml/trainer:1.0)")
        # Checked (and an OCI one unpacked) before anything starts: a hostile archive starts nothing.
        with archive.source(path) as source:
            engine.install(["skopeo"], _say)
            reg = registry.start(say=_say)
            click.echo(f"holds {reg.address}/{registry.load_archive(reg, path, source, name, say=_say)}")
        return
    eng = engine.get(_say)
    engine.install(["skopeo"], _say)
    reg = registry.start(say=_say)
    click.echo(f"holds {reg.address}/{registry.load(reg, eng, image, name, say=_say)}")
