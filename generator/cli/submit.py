"""`submit`: validate, then server-side apply; optionally follow the job to its end."""
from __future__ import annotations

import sys

import click

from generator.cli.common import cluster_options, connect, release_option, target_option


@click.command("submit")
@click.argument("file", metavar="VALUES|MANIFEST")
@release_option
@click.option("--dry-run", is_flag=True, help="Have the server validate without persisting anything.")
@click.option("--wait", "wait_", is_flag=True, help="Follow the job to its end; exit 1 if it fails.")
@click.option("--replace", is_flag=True, help="Delete a finished job of the same name first.")
@click.option("--timeout", type=click.IntRange(min=1), default=86400, show_default=True, help="Seconds --wait waits.")
@target_option
@cluster_options
def command(file, release, dry_run, wait_, replace, timeout, target, context, namespace, kubeconfig,
            request_timeout) -> None:
    """Validate a job and apply it (server-side apply): the output PVC, then the PyTorchJob, or
    for a Trainer v2 TrainJob its TrainingRuntime, then the TrainJob."""
    from generator.cli.wait import follow
    from generator.cluster import ops

    c = connect(context, namespace, kubeconfig, request_timeout)
    done = ops.submit(c, file, release, namespace, dry_run, replace, target)
    for note in done.notes:
        click.echo(note, err=True)
    click.echo(f"{done.kind.lower()} {done.name} {done.verdict}{' (dry run: nothing was persisted)' if dry_run else ''}")
    if done.helm:
        click.echo(f"the same with helm, which takes the release over: {done.helm}", err=True)
    if wait_ and not dry_run:
        # Its states alone, as before: `wait` and `status` tell the progress.
        sys.exit(follow(c, done.name, "Succeeded", timeout, progress=True, told=False))
