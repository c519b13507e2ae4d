"""Child processes of the local control plane: started with their logs in files, tied to the
supervisor's life (they get SIGTERM if it dies), and stopped in order."""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Linux: the kernel sends SIGTERM to the child when the supervisor exits, however it exits.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# The kernel sends a child its parent-death signal when the *thread* that forked it ends: children
# started from a short-lived thread (nodes booting side by side) are forked by this one, which lives
# as long as the supervisor.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")


def start(name: str, argv: list[str], logs: Path, env: dict | None = None, cwd: Path | None = None) -> Child:
    if threading.current_thread() is not threading.main_thread():
        return _SPAWNER.submit(_start, name, argv, logs, env, cwd).result()
    return _start(name, argv, logs, env, cwd)


def _start(name: str, argv: list[str], logs: Path, env: dict | None, cwd: Path | None) -> Child:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with open(log, "ab") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True, preexec_fn=_die_with_parent)
    return Child(name, proc, log)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def left(end: float) -> float:
    """Seconds until the monotonic deadline `end` (at least one, so a late step still gets one look):
    a step's wait takes what its caller's timeout has left, never a fixed minute of its own."""
    return max(1.0, end - time.monotonic())


def wait_until(check, timeout: float, what: str, child: Child | None = None, interval: float = 0.25):
    """Poll check() until it returns a true value; fail naming what never happened."""
    end = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < end:
        if child is not None and not child.alive():
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode} before {what}; its log "
                               f"({child.log}) ends:\n{child.tail()}")
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # not up yet
            last_error = exc
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
                       + (f"; {child.name}'s log ({child.log}) ends:\n{child.tail()}" if child else ""))
