"""`validate`: every problem of values files or jobs' manifests (PyTorchJob, TrainJob), at once."""
from __future__ import annotations

import json
import sys

import click

from generator.cli.common import chart_option, format_option, legacy_output_format, registry_config_option, release_option, target_option
from generator.errors import UserError


@click.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@release_option
@chart_option
@target_option
@format_option
@click.option("-o", "--output", metavar="FILE", help="Write the report to this file (atomically) instead of stdout.")
@registry_config_option
def command(files, release, chart, target, fmt, output, reader) -> None:
    """Check values files (or PyTorchJob and TrainJob manifests): the schema and every rule the operator, Trainer and Kubernetes apply.

    A pod that leaves its command to its image and sets runAsUser is checked against the image's USER
    and WORKDIR, read from a registry (a warning where runAsUser may not enter the WORKDIR).

    With --chart pytorch-operator, check values for the operator chart instead."""
    from generator.cli.common import emit
    from generator.kinds import source

    output, fmt = legacy_output_format(output, fmt)
    report, lines = [], []
    for path in files:
        try:
            checked = source.check_file(path, release, chart, target, reader)
            findings, warnings = checked.findings, checked.warnings
        except UserError as exc:  # the file could not be read as YAML: its error names the file already
            findings, warnings = exc.findings, []
        report.append({"file": path, "valid": not findings, "findings": [f.as_dict() for f in findings],
                       "warnings": [f.as_dict() for f in warnings]})
        for warning in warnings:  # valid all the same: the exit status stays 0
            click.echo(f"{path}: warning: {warning.render()}", err=True)
        if findings:
            click.echo(UserError(findings, source=path).describe(), err=True)
        else:
            lines.append(f"{path}: valid\n")
    text = json.dumps(report, indent=2, default=str) + "\n" if fmt == "json" else "".join(lines)
    if text:
        emit(text, output)
    if not all(r["valid"] for r in report):
        sys.exit(1)
