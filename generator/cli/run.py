"""`run`: a job on this machine, as the operator would run its pods."""
from __future__ import annotations

import itertools
import signal
import sys
from pathlib import Path

import click

from generator.cli.common import image_option, namespace_option, release_option, target_option


@click.command("run")
@click.argument("file", metavar="VALUES|MANIFEST")
@release_option
@namespace_option("Namespace the pods would see.")
@click.option("--run-dir", metavar="DIR", help="Where volumes map to (default: runs/<job>).")
@click.option("--dry-run", is_flag=True, help="Print each replica's command and env on stdout without starting them.")
@image_option
@target_option
@click.option("--container", is_flag=True,
              help="Run each replica as a container of its image (podman, else Docker; from the local image store), on "
                   "a network of the job's own where the pods reach each other by the names a cluster gives them.")
def command(file, release, namespace, run_dir, dry_run, aliases, target, container) -> None:
    """Run a job on this machine exactly as the operator would run it on a cluster (a TrainJob, or
    values with --target v2: as Kubeflow Trainer v2 runs it)."""
    from generator.container.programs import by_repository
    from generator.kinds import source
    from generator.local import plan as local_plan
    from generator.local import runner as local_runner

    def say(line: str) -> None:
        click.echo(line, err=True)

    aliases = by_repository(aliases)  # this machine's programs stand for every tag of REPO
    loaded = source.read(file, release, namespace, target)
    objects, kind = loaded.objects, loaded.kind
    name = loaded.job["metadata"]["name"]
    # The one choice of how the pods run; the plan and the runner ask the backend for the rest.
    if container:
        from generator.local.backends.containers.backend import Containers

        backend = Containers.for_job(name, aliases, say)
    else:
        from generator.local.backends.processes.backend import Processes

        backend = Processes(aliases)
    plan = kind.plan(objects, Path(run_dir or Path("runs") / name), namespace, backend)
    # The plan is the output of a dry run, and a header on stderr before a real one.
    click.echo(local_plan.describe(plan, env=dry_run), err=not dry_run)
    for note in plan.notes:
        say(f"note: {note}")
    shown = backend.ready(plan, say, dry_run)
    if dry_run:
        if shown:
            click.echo(shown)
        return
    runner = local_runner.Runner(plan)
    previous = runner.fresh_disks()
    if previous:
        click.echo(f"note: pods start with fresh disks: the last run's pod folders are now in {previous}", err=True)
    signals: list[int] = []
    count = itertools.count()

    def stop(signum, _frame) -> None:
        # A second Ctrl-C may land inside this handler; next() on the counter cannot be split by
        # it, so exactly one of the two calls is the second, whichever order they run in.
        again = next(count) > 0
        signals.append(signum)
        runner.request_stop(f"stopped by {signal.Signals(signum).name}", now=again)
        try:
            click.echo("killing the replicas now" if again else
                       f"stopping the replicas ({local_runner.GRACE_SECONDS:g}s to finish; Ctrl-C again kills them now)",
                       err=True)
        except BrokenPipeError:  # nobody reads stderr any more: the replicas stop all the same
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    with backend.around(plan, say):
        outcome = runner.run()
    if runner.output_closed:  # `| head` has what it wanted: the replicas are stopped, nothing more to say
        raise runner.output_closed
    click.echo(local_runner.summary(outcome, plan), err=True)
    if signals:  # as a shell reports a command a signal ended: 130 for Ctrl-C
        sys.exit(128 + signals[0])
    if not outcome.succeeded:
        sys.exit(1)
