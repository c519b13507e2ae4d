"""`import`: an existing PyTorchJob manifest to values that render it back."""
from __future__ import annotations

import click

from generator.cli.common import emit, output_option


@click.command("import")
@click.argument("manifest", metavar="MANIFEST")
@output_option
def command(manifest, output) -> None:
    """Turn an existing PyTorchJob manifest (or a Trainer v2 TrainJob, with its TrainingRuntime
    in the same file) into values that render it back."""
    from generator.job import importer, source, trainjob, values_io

    documents = values_io.load_documents(manifest)
    if trainjob.is_trainjob(documents):
        values, notes = trainjob.to_values(documents, source=manifest)
    else:
        values, notes = importer.to_values(source.pick(documents, manifest), source=manifest)
    emit(values_io.dump(values), output)
    for note in notes:
        click.echo(f"note: {note}", err=True)
