"""`convert`: PyTorchJobs (or v1 values) to Kubeflow Trainer v2 TrainJobs, with every change in meaning."""
from __future__ import annotations

import json
import sys

import click

from generator.cli.common import cluster_options, format_option, output_option, registry_config_option, release_option


@click.command("convert")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--to", "to", type=click.Choice(["v2"]), required=True,
              help="What to convert to: v2, a Kubeflow Trainer v2.3 TrainJob (with its TrainingRuntime where it needs one).")
@click.option("--accept", is_flag=True, help="Write the TrainJobs even where their meaning changes (the report lists how).")
@click.option("--server", is_flag=True,
              help="Also have the cluster's API server and Trainer's webhooks check each TrainJob (--dry-run=server).")
@output_option
@format_option
@release_option
@registry_config_option
@cluster_options
def command(files, to, accept, server, output, fmt, release, reader, context, namespace, kubeconfig,
            request_timeout) -> None:
    """Convert PyTorchJob manifests (several per file) or v1 values to Trainer v2 TrainJobs.

    Each job is reported with every change in meaning: the field, what v1 did, what v2 will do and
    what to change. The TrainJobs (each TrainingRuntime before its TrainJob) go to stdout, or to -o;
    the report then goes to stderr, or to stdout with -o. With --format json the report is always
    stdout's, and the TrainJobs are written only to -o. Nothing is written while any job is refused,
    or while changes wait for --accept. Exit status: 0 written (or, as JSON without -o, writable),
    1 changes to accept or a job refused, 2 usage."""
    from generator.cli.common import emit
    from generator.convert import jobs, report
    from generator.job import values_io

    conversions = [c for path in files for c in jobs.convert_file(path, release, namespace, reader)]
    if server:
        from generator.cli.common import connect
        from generator.convert import server as on_server

        cluster = connect(context, namespace, kubeconfig, request_timeout)
        for conversion in conversions:
            on_server.check(cluster, conversion)
    refused = any(c.outcome == report.REFUSED for c in conversions)
    changed = any(c.outcome == report.CHANGES for c in conversions)
    writable = not refused and (accept or not changed)
    write = writable and (fmt != "json" or bool(output))  # data asked for as JSON is stdout's alone
    if write:
        emit(values_io.dump_all([o for c in conversions for o in c.objects]), output)
    if fmt == "json":
        text = json.dumps({"jobs": [c.as_dict() for c in conversions], "written": write}, indent=2, default=str) + "\n"
    else:
        text = "".join(report.describe(c) + "\n" for c in conversions)
        text += report.summary(conversions, accept, write, output or "stdout")
    click.echo(text, nl=False, err=not output and fmt != "json")
    if not writable:
        sys.exit(1)
