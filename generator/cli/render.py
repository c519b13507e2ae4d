"""`render`: the job's manifests, through the real Helm engine, after validation."""
from __future__ import annotations

import click

from generator.cli.common import chart_option, emit, fail_if, namespace_option, output_option, release_option, target_option, with_target


@click.command("render")
@click.argument("values_file", metavar="VALUES")
@release_option
@namespace_option("Namespace the manifests are rendered for.")
@chart_option
@target_option
@output_option
def command(values_file, release, namespace, chart, target, output) -> None:
    """Render the job's manifests (or the operator's, with --chart pytorch-operator) with the real Helm engine."""
    from generator import helm, kinds, paths
    from generator.job import validation, values_io

    values = values_io.load_mapping(values_file)
    if chart == "pytorch-operator":
        checked, where = validation.check_operator_values(values, release, namespace), paths.OPERATOR_CHART
    else:
        values = with_target(values, target)
        checked, where = validation.check_values(values, kinds.for_values(values), release, namespace), paths.JOB_CHART
    fail_if(checked.findings, values_file)
    emit(helm.stream(checked.rendered), output)
    if values_file != "-":
        same = helm.equivalent("template", where, release, values_file, namespace)
        click.echo(f"# the same with helm: {same}{' --set target=' + target if target else ''}", err=True)
