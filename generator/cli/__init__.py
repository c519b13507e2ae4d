"""`python -m generator`: job descriptions to validated values, manifests, local runs and cluster jobs.

Exit status: 0 success, 1 invalid input or a failed job, 2 usage. Errors name the field, the
value and a fix, without a traceback unless --debug is given. A reader that stops early
(`| head`, `| grep -m1`, quitting `less`) ends any command quietly with status 141, as it ends
Unix tools. Each command lives in a module of its own and is imported only when it runs, so
start-up stays fast."""
from __future__ import annotations

import importlib
import os
import select
import signal
import sys

import click

from generator.errors import UserError

# name -> module under generator.cli holding `command`; listed in the order `--help` shows them.
COMMANDS = {
    "values": "values", "validate": "validate", "import": "import_", "convert": "convert", "render": "render", "run": "run",
    "submit": "submit", "status": "status", "diagnose": "diagnose", "logs": "logs", "wait": "wait", "delete": "delete",
    "cluster": "cluster", "image": "image",
}

# The status a shell reports for a command that SIGPIPE ended: what `cmd | head` gives of Unix tools.
OUTPUT_CLOSED = 128 + signal.SIGPIPE


def _streams() -> list[int]:
    fds = []
    for stream in (sys.stdout, sys.stderr):
        try:
            fds.append(stream.fileno())
        except (AttributeError, ValueError, OSError):  # no descriptor (a test's capture); io.UnsupportedOperation
            continue
    return fds


def output_closed() -> bool:
    """Whether the reader of stdout or stderr has gone: a pipe's write end then polls as an error.
    A BrokenPipeError from anything else (a socket, a child's stdin) is a fault to report."""
    if not hasattr(select, "poll"):  # no way to tell here (Windows): a closed pipe is by far the likeliest
        return True
    poller = select.poll()
    for fd in _streams():
        poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def discard_output() -> None:
    """The reader of our output has gone: point stdout and stderr at /dev/null, so that what is
    still buffered, and the interpreter's last flush at exit, meet no closed pipe and print no
    complaint. Streams without a file descriptor (a test's capture) are left alone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in _streams():
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class LazyGroup(click.Group):
    """Loads a command's module on first use, and turns errors into one line on stderr."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"generator.cli.{module}").command

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:  # `--help` and `--version` print while the arguments are parsed
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            if not output_closed():
                raise
            discard_output()
            raise click.exceptions.Exit(OUTPUT_CLOSED) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            if output_closed():  # the reader quit early (`| head`): not an error, and nothing to say
                discard_output()
                ctx.exit(OUTPUT_CLOSED)
            internal_error(ctx, exc)  # some other pipe: a fault like any other
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
            internal_error(ctx, exc)


def internal_error(ctx: click.Context, exc: Exception) -> None:
    if ctx.params.get("debug"):
        raise exc
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
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    else:
        code = 0
    try:  # what is still buffered goes out now, while a closed pipe can still be told apart
        sys.stdout.flush()
    except BrokenPipeError:
        discard_output()
        code = OUTPUT_CLOSED
    if code == OUTPUT_CLOSED:
        # Nobody reads any more and the command has finished its work. Threads that followed pods
        # may still be in a write, and the interpreter's shutdown would then abort on stdout's
        # lock (SIGABRT instead of 141): leave without it.
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os._exit(code)
    return code
