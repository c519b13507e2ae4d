"""`render`: the job's manifests, through the real Helm engine, after validation."""
from __future__ import annotations

import click

from generator.cli.common import emit, fail_if, output_option, release_option


@click.command("render")
@click.argument("values_file", metavar="VALUES")
@release_option
@click.option("--namespace", default="default", show_default=True)
@output_option
def command(values_file, release, namespace, output) -> None:
    """Render the job's manifests with the real Helm engine."""
    from generator import helm, paths
    from generator.job import validation, values_io

    checked = validation.check_values(values_io.load_mapping(values_file), release, namespace)
    fail_if(checked.findings, values_file)
    emit(helm.stream(checked.rendered), output)
    if values_file != "-":
        click.echo(f"# the same with helm: {helm.equivalent('template', paths.JOB_CHART, release, values_file, namespace)}",
                   err=True)
