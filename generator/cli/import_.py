"""`import`: an existing PyTorchJob manifest to values that render it back."""
from __future__ import annotations

import click

from generator.cli.common import emit, output_option, registry_config_option


def _reader():
    from generator.images import distribution

    return distribution.Reader()


@click.command("import")
@click.argument("manifest", metavar="MANIFEST")
@output_option
@registry_config_option
def command(manifest, output, reader) -> None:
    """Turn an existing PyTorchJob manifest (or a Trainer v2 TrainJob, with its TrainingRuntime
    in the same file) into values that render it back. A PyTorchJob that leaves `command` to its
    image gets the image's ENTRYPOINT (and CMD) written out, read from a registry."""
    from generator import kinds
    from generator.job import values_io

    documents = values_io.load_documents(manifest)
    values, notes = kinds.for_objects(documents).to_values(documents, manifest, reader or _reader())
    emit(values_io.dump(values), output)
    for note in notes:
        click.echo(f"note: {note}", err=True)
