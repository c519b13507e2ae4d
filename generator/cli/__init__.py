"""`python -m generator`: job descriptions to validated values, manifests, local runs and cluster jobs.

Exit status: 0 success, 1 invalid input or a failed job, 2 usage. Errors name the field, the
value and a fix, without a traceback unless --debug is given. Each command lives in a module of
its own and is imported only when it runs, so start-up stays fast."""
from __future__ import annotations

import importlib
import os
import sys

import click

from generator.errors import UserError

# name -> module under generator.cli holding `command`; listed in the order `--help` shows them.
COMMANDS = {
    "values": "values", "validate": "validate", "import": "import_", "render": "render", "run": "run",
    "submit": "submit", "status": "status", "diagnose": "diagnose", "logs": "logs", "wait": "wait", "delete": "delete",
    "cluster": "cluster",
}


class LazyGroup(click.Group):
    """Loads a command's module on first use, and turns errors into one line on stderr."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"generator.cli.{module}").command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {exc.describe()}", err=True)
            ctx.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except ModuleNotFoundError as exc:  # run outside the venv, or a partial install
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: the Python package {exc.name!r} is missing from {sys.executable}; run `make venv` and use "
                       ".venv/bin/python -m generator (or .venv/bin/pytorchjob-kit), or install the tool with "
                       "pip install -e '.[generator,cluster]'", err=True)
            ctx.exit(1)
        except Exception as exc:  # a bug: still no traceback for the user
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: internal error ({type(exc).__name__}: {exc}); rerun with --debug and report it", err=True)
            ctx.exit(1)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of short error messages.")
@click.version_option(package_name="pytorchjob-kit")
def cli(debug: bool) -> None:
    """Validated PyTorchJobs for the Kubeflow training operator, from a short description to a running job."""


def main(argv: list[str] | None = None) -> int:
    # The console script is named for itself; `python -m generator` says so.
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    prog = invoked if invoked and not invoked.endswith(".py") and invoked != "-c" else "python -m generator"
    try:
        cli.main(args=argv, prog_name=prog, standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
