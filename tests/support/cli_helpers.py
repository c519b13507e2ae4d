"""Running the generator CLI in-process, as a user would from the shell."""
from __future__ import annotations

from click.testing import CliRunner

from generator.cli import cli


def run(*args: str, input: str | None = None):
    """(exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr
