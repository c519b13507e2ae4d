"""`image build`: real images built on this machine (Docker, else podman), once per machine."""
from __future__ import annotations

import click


def _say(line: str) -> None:
    click.echo(line, err=True)


@click.group("image")
def command() -> None:
    """Real OCI images built here: Docker where its engine answers, else podman (installed from Debian's packages when missing)."""


@command.command("build")
@click.option("--variant", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="The trainer's torch: cpu from PyTorch's CPU wheel index (tag <version>), gpu the CUDA build from "
                   "PyPI (tag <version>-cuda); auto is cpu where that index answers, else gpu.")
@click.option("--quiet", is_flag=True, help="Leave the engine's build output out.")
def build(variant: str, quiet: bool) -> None:
    """Build the trainer's image (trainer/Dockerfile) into the engine's local store, once per machine;
    later calls find it up to date until the Dockerfile, the files it copies or its base change."""
    from generator.images import trainer

    ref, built = trainer.build(variant, say=_say, show=None if quiet else _say)
    click.echo(f"{'built' if built else 'up to date'}: {ref}")


@command.group("registry")
def registry_group() -> None:
    """The OCI registry on this machine (loopback, mutual TLS) that holds the trainer's image and every image the charts name."""


@registry_group.command("up")
@click.option("--variant", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Which build of the trainer's image it holds (see `image build`).")
@click.option("--quiet", is_flag=True, help="Leave the engines' build output out.")
def registry_up(variant: str, quiet: bool) -> None:
    """Start the registry (unless it runs), build what it lacks once per machine, push it; list what it holds."""
    from generator.controlplane import chart_images, registry

    reg = registry.start(say=_say)
    for name in chart_images.seed(reg, say=_say, show=None if quiet else _say, variant=variant):
        click.echo(f"holds {name}")
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
    for name in reg.catalog():
        click.echo(f"holds {reg.address}/{name}")


@registry_group.command("down")
def registry_down() -> None:
    """Stop the registry; what it holds stays for its next start."""
    from generator.controlplane import registry

    pid = registry.stop()
    click.echo(f"stopped: registry (pid {pid})" if pid else "the registry was not running")
