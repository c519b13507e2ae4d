"""`logs`: every pod's log, prefixed by replica, or one replica's."""
from __future__ import annotations

import click

from generator.cli.common import cluster_options, connect


@click.command("logs")
@click.argument("name")
@click.option("--replica", metavar="ROLE-INDEX", help="One replica, e.g. master-0 or worker-1 (node-0-1 of a TrainJob).")
@click.option("-f", "--follow", is_flag=True, help="Stream, waiting through Pending pods and container restarts.")
@click.option("--previous", is_flag=True, help="The log of the container before its last restart.")
@cluster_options
def command(name, replica, follow, previous, context, namespace, kubeconfig, request_timeout) -> None:
    """Logs of every pod of a job, prefixed master-0 / worker-1 (node-0-0 / node-0-1 for a
    TrainJob), or of one replica."""
    from generator.cluster import client, logs

    c = connect(context, namespace, kubeconfig, request_timeout)
    kind, _ = client.find(c, name)
    if follow:
        from generator.diagnose import hint

        logs.follow(c, name, replica, click.echo, hint.Stuck(c, name, lambda text: click.echo(text, err=True)).check,
                    kind=kind)
    else:
        logs.dump(c, name, replica, previous, click.echo, kind=kind)
