"""The two readers that quit early, for the pipe tests of every command (tests/generator/cli/)
and of `cluster up` on a real cluster (tests/e2e/): one takes the first line and closes, as
`head -1` does; the other is gone before anything arrives."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

OUTPUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports of `cmd | head` when cmd is cut short
COMPLAINTS = ("error", "Traceback", "Exception", "Broken pipe", "BrokenPipe")


def launch(args: list[str], cwd: Path, stdout, stderr) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "generator", *args], cwd=cwd, stdout=stdout, stderr=stderr,
                            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})


def read_one_line_then_close(args: list[str], cwd: Path, timeout: float = 60) -> tuple[int, str, str]:
    """As `cmd | head -1`: (exit status, the line read, stderr)."""
    with open(cwd / "stderr.txt", "w+") as err:
        proc = launch(args, cwd, subprocess.PIPE, err)
        try:
            first = proc.stdout.readline().decode()
            proc.stdout.close()
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.seek(0)
        return code, first, err.read()


def into_a_closed_pipe(args: list[str], cwd: Path, timeout: float = 60) -> tuple[int, str]:
    """As `cmd | true` once `true` has exited: (exit status, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(cwd / "stderr.txt", "w+") as err:
        try:
            proc = launch(args, cwd, write_end, err)
        finally:
            os.close(write_end)
        try:
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.seek(0)
        return code, err.read()


def quiet(stderr: str) -> bool:
    return not any(word in stderr for word in COMPLAINTS)
