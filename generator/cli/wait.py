"""`wait`: block until a job reaches a state; the exit status says how it went."""
from __future__ import annotations

import sys

import click

from generator.cli.common import cluster_options, connect


@click.command("wait")
@click.argument("name")
@click.option("--for", "target", type=click.Choice(["Succeeded", "Failed", "Running"]), default="Succeeded",
              show_default=True)
@click.option("--timeout", type=click.IntRange(min=1), default=3600, show_default=True, help="Seconds.")
@cluster_options
def command(name, target, timeout, context, namespace, kubeconfig, request_timeout) -> None:
    """Exit 0 when the job reaches the condition, 1 when it ends otherwise, 2 on timeout."""
    sys.exit(follow(connect(context, namespace, kubeconfig, request_timeout), name, target, timeout))


def follow(c, name: str, target: str, timeout: int, progress: bool = False) -> int:
    from generator.cluster import ops
    from generator.diagnose import hint

    def say(state: str, cond: dict) -> None:
        reason = f" ({cond.get('reason')})" if cond.get("reason") else ""
        click.echo(f"{name}: {state}{reason}", err=True)

    stuck = hint.Stuck(c, name, lambda text: click.echo(text, err=True))
    result = ops.wait_for(c, name, target, timeout, on_state=say if progress else None, tick=stuck.check)
    click.echo(result.message, err=result.code != ops.REACHED)
    return result.code
