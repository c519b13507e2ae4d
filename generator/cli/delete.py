"""`delete`: a job, its pods through garbage collection, and optionally its output PVC."""
from __future__ import annotations

import click

from generator.cli.common import cluster_options, connect


@click.command("delete")
@click.argument("name")
@click.option("--with-pvc", is_flag=True, help="Also delete the output PVC the chart created for this job.")
@cluster_options
def command(name, with_pvc, context, namespace, kubeconfig, request_timeout) -> None:
    """Delete a job (its pods go with it) and, if asked, its chart-created output PVC."""
    from generator.cluster import ops

    for line in ops.delete(connect(context, namespace, kubeconfig, request_timeout), name, with_pvc):
        click.echo(line)
