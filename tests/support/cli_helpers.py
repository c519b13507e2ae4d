"""Running the generator CLI in-process, as a user would from the shell."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from click.testing import CliRunner

from generator.cli import cli


def run(*args: str, input: str | None = None):
    """(exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


class _Runner(CliRunner):
    """A CliRunner whose output streams can be read while the command runs."""

    def __init__(self):
        super().__init__()
        self.streams = None
        self.started = threading.Event()
        self.ended = threading.Event()

    @contextlib.contextmanager
    def isolation(self, *args, **kwargs):
        with super().isolation(*args, **kwargs) as streams:
            self.streams = streams
            self.started.set()
            yield streams


class Printed:
    """What the running command has printed so far, stdout and stderr together."""

    def __init__(self, runner: _Runner):
        self.runner = runner

    def text(self) -> str:
        return self.runner.streams[2].getvalue().decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = 20) -> None:
        """Until the command has printed `text`."""
        end = time.monotonic() + timeout
        while text not in self.text():
            ended = self.runner.ended.is_set()
            if ended and text in self.text():
                break
            assert not ended and time.monotonic() < end, (
                f"the command {'ended' if ended else f'ran {timeout:g}s'} without printing {text!r}; it printed:\n"
                f"{self.text()}")
            time.sleep(0.02)


def run_beside(actor: Callable[[Printed], None], *args: str, abort: Callable[[], None] | None = None):
    """`run(*args)`, with `actor` in a thread beside it, handed what the command prints: it plays
    the rest of the world (an operator, a kubelet) in step with what the command has told the
    user, instead of after fixed sleeps. A failure of `actor` fails the test; `abort` then ends
    the command (the API double's give_up, say) rather than leaving it waiting."""
    runner = _Runner()
    failure: list[BaseException] = []

    def act() -> None:
        try:
            assert runner.started.wait(20), "the command never started"
            actor(Printed(runner))
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            failure.append(exc)
            if abort:
                abort()

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    try:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
    finally:
        runner.ended.set()
        thread.join(30)
    if failure:
        raise failure[0]
    assert not thread.is_alive(), "the actor is still acting after the command ended"
    return result.exit_code, result.stdout, result.stderr
