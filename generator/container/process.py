"""One container's processes on this machine, for `generator run`:
started in a process group of its own (torchrun's workers included), output read line by line,
stopped with SIGTERM, the grace period, then SIGKILL, and exit codes read as a container runtime
reports them (killed by signal N is 128+N). With `isolate`, the program runs under init.py in a
PID namespace of its own, so it and everything it starts die with the caller, even on `kill -9`."""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

INIT = Path(__file__).with_name("init.py")

BACKOFF_START, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0  # the kubelet's crash-loop back-off


def backoff(previous: float, restarts: int, ran: float) -> float:
    """Seconds before the next restart, as the kubelet waits: the first restart at once, then
    10 s doubling up to 5 minutes; a run that lasted 10 minutes starts the count again."""
    if ran > BACKOFF_RESET or restarts == 0:
        return 0.0
    return max(BACKOFF_START, min(BACKOFF_MAX, previous * 2 or BACKOFF_START))

def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _init(argv: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", str(INIT), str(os.getpid()), "--", *argv]


@functools.cache
def pid_namespaces() -> bool:
    """Whether this machine lets us make PID namespaces (as root, or unprivileged through a user
    namespace); where it does not, a program runs in a process group alone, as before."""
    try:
        done = subprocess.run(_init(["true"]), stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and not done.stderr


def _findable(argv: list[str], env: dict[str, str], cwd: Path | None) -> None:
    """Raise as Popen would for a program that is not there, before init.py hides it behind exit 127."""
    name = argv[0]
    if "/" in name:
        path = Path(cwd or ".") / name
        if not path.exists():
            raise FileNotFoundError(2, "No such file or directory", name)
        if not os.access(path, os.X_OK) or path.is_dir():
            raise PermissionError(13, "Permission denied", name)
    elif shutil.which(name, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "No such file or directory", name)


class Process:
    """A started container process. `on_line` gets each line of its merged stdout and stderr."""

    def __init__(self, argv: list[str], env: dict[str, str], on_line: Callable[[str], None], cwd: Path | None = None,
                 preexec_fn: Callable[[], None] | None = None, isolate: bool = False, pass_fds: tuple[int, ...] = ()):
        # OSError (no such program, ...) reaches the caller: it decides what "could not start" means.
        self.isolated = isolate and pid_namespaces()
        if self.isolated:
            _findable(argv, env, cwd)
            argv = _init(argv)
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1, errors="replace",
                                     start_new_session=True, preexec_fn=preexec_fn, pass_fds=pass_fds)
        self.env, self.cwd = env, cwd  # what it runs with, for commands run beside it (exec probes)
        self.started = time.monotonic()
        self.reader = threading.Thread(target=self._read, args=(on_line,), daemon=True)
        self.reader.start()

    def _read(self, on_line: Callable[[str], None]) -> None:
        for raw in self.proc.stdout:
            on_line(raw.rstrip("\n").split("\r")[-1])  # a progress bar's last state, not its every frame

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        return None if code is None else exit_code(code)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            try:
                if self.isolated:
                    os.kill(self.proc.pid, sig)  # init.py passes it to every process in the namespace, once
                else:
                    os.killpg(self.proc.pid, sig)  # the whole group: torchrun's children too
            except ProcessLookupError:
                pass

    def kill_group(self) -> None:
        """SIGKILL to every member, the leader alive or not: a second Ctrl-C."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return exit_code(self.proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float) -> int:
        """SIGTERM, up to `grace` seconds, SIGKILL; then whatever of its group is left. The exit code."""
        self.signal(signal.SIGTERM)
        return self.end_by(time.monotonic() + grace)

    def end_by(self, end: float) -> int:
        """After SIGTERM: wait until the monotonic time `end`, then SIGKILL. The exit code."""
        code = self.wait(max(0.0, end - time.monotonic()))
        if code is None:
            self.signal(signal.SIGKILL)
            code = exit_code(self.proc.wait())
        # A shell leader dies of SIGTERM at once; the trainer it started still gets the grace period.
        # (Under init.py that wait is PID 1's: when it ends, its namespace is empty. Its killed group
        # may linger as zombies of a subreaper, which must not read as alive.)
        while not self.isolated and self._group_alive() and time.monotonic() < end:
            time.sleep(0.05)
        self.reap()
        return code

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def reap(self) -> None:
        """Stray members of an exited leader's group (a trainer's DataLoader workers, ...)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.reader.join(timeout=5)


def stop_together(procs: list[Process], grace: float) -> None:
    """Stop several processes as a kubelet stops a pod's containers: SIGTERM to all at once, one
    grace period shared by them, then SIGKILL to whichever is left. Stopping them one after
    another would give the last one N times the grace period, and the first ones a head start."""
    for proc in procs:
        proc.signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for proc in procs:
        proc.end_by(end)

