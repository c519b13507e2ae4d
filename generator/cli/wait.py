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
    """Exit 0 when the job reaches the condition, 1 when it ends otherwise, 2 on timeout. The job's
    progress goes to stderr as it moves on."""
    sys.exit(follow(connect(context, namespace, kubeconfig, request_timeout), name, target, timeout))


def follow(c, name: str, target: str, timeout: int, progress: bool = False, told: bool = True) -> int:
    """`progress`: tell each state as it is reached; `told`: tell the job's progress while waiting."""
    from generator.cluster import ops
    from generator.diagnose import hint

    def say(state: str, cond: dict) -> None:
        reason = f" ({cond.get('reason')})" if cond.get("reason") else ""
        click.echo(f"{name}: {state}{reason}", err=True)

    stuck = hint.Stuck(c, name, lambda text: click.echo(text, err=True))
    teller = Told(c, name, lambda text: click.echo(text, err=True)) if told else None
    result = ops.wait_for(c, name, target, timeout, on_state=say if progress else None, tick=stuck.check,
                          on_job=teller.check if teller else None, window=Told.WINDOW if teller else 30)
    click.echo(result.message, err=result.code != ops.REACHED)
    return result.code


class Told:
    """Prints the job's progress when it moves on: a TrainJob's with each status update the watch
    brings, a PyTorchJob's from rank 0's log at most every WINDOW seconds."""
    WINDOW = 10

    def __init__(self, c, name: str, echo):
        self.c, self.name, self.echo = c, name, echo
        self.last: tuple | None = None
        self.read_at = float("-inf")

    def check(self, kind, job: dict) -> None:
        import time

        from generator.cluster import progress

        if not kind.progress_in_status:  # a log is read at most once a window
            if time.monotonic() - self.read_at < self.WINDOW:
                return
            self.read_at = time.monotonic()
        found = progress.read(self.c, kind, job)
        key = found and (found["percent"], found["remainingSeconds"], found["loss"], found["testAccuracy"])
        if found and key != self.last:
            self.last = key
            self.echo(f"{self.name}: {progress.one_line(found)}")
