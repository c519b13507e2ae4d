"""`import`: an existing PyTorchJob manifest to values that render it back."""
from __future__ import annotations

import click

from generator.cli.common import emit, output_option


@click.command("import")
@click.argument("manifest", metavar="MANIFEST")
@output_option
def command(manifest, output) -> None:
    """Turn an existing PyTorchJob manifest into values that render it back."""
    from generator.job import importer, source, values_io

    job = source.pick(values_io.load_documents(manifest), manifest)
    values, notes = importer.to_values(job, source=manifest)
    emit(values_io.dump(values), output)
    for note in notes:
        click.echo(f"note: {note}", err=True)
