"""`diagnose`: why a job is not progressing, ranked, each finding with a fix in the chart's values."""
from __future__ import annotations

import sys

import click

from generator.cli.common import cluster_options, connect, emit, format_option


@click.command("diagnose")
@click.argument("name")
@format_option
@click.option("--save", metavar="FILE", help="Also write what was read (job, pods, events ...) to FILE, for a bug report.")
@click.option("--from", "from_file", metavar="FILE", help="Diagnose a snapshot written by --save instead of a cluster.")
@cluster_options
def command(name, fmt, save, from_file, context, namespace, kubeconfig, request_timeout) -> None:
    """Read a job, its pods, events, PodGroup or Kueue Workload, claims and Secrets; print findings.

    Exit status: 0 nothing wrong, 1 findings, 2 the job could not be read."""
    from generator.diagnose import report, rules, snapshot
    from generator.errors import UserError

    try:
        if from_file:
            shot = snapshot.load(from_file)
            if shot.name != name:
                raise UserError(f"{from_file} holds {shot.kind} {shot.name}, not {name}")
        else:
            shot = snapshot.collect(connect(context, namespace, kubeconfig, request_timeout), name)
    except UserError as exc:
        click.echo(f"error: {exc.describe()}", err=True)
        sys.exit(report.UNREADABLE)
    if save:
        snapshot.save(shot, save)
    findings = rules.diagnose(shot)
    emit(report.as_json(findings) if fmt == "json" else report.as_table(shot, findings), None)
    sys.exit(report.exit_code(findings))
