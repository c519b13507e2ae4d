"""SIGTERM before the training loop takes it over (stopping.Stop): the process ends at once with
143, since nothing is written yet. It imports nothing heavy, so it is in place before torch loads.

In a container the trainer is PID 1, and the kernel discards any signal PID 1 has no handler for.
Without this, a pod deleted while torch loads or while the ranks gather would wait out its whole
grace period and then be killed. A Python handler runs only between the main thread's bytecodes,
and a rank waiting for its peers is inside one long C++ call, so a thread woken through the
signal wake-up fd ends the process as well."""
from __future__ import annotations

import os
import signal
import threading

EXIT = 143  # 128 + SIGTERM, which restartPolicy ExitCode retries
_message = b""


def exit_until_the_loop() -> None:
    """Call once, first thing, in the main thread of `python -m trainer`."""
    global _message
    rank = os.environ.get("RANK", "0")
    _message = f"trainer (rank {rank}): SIGTERM before training began; exiting {EXIT} with nothing to save\n".encode()
    read, write = os.pipe()
    os.set_blocking(write, False)  # the C handler must never block on it
    signal.signal(signal.SIGTERM, _exit)
    signal.set_wakeup_fd(write)
    threading.Thread(target=_watch, args=(read,), name="sigterm-before-training", daemon=True).start()


def _exit(signum: int | None = None, frame=None) -> None:
    os.write(2, _message)
    os._exit(EXIT)


def _watch(fd: int) -> None:
    """The wake-up fd carries the number of each signal that landed; once a Trainer's handler has
    replaced ours, SIGTERM is the loop's to act on."""
    while data := os.read(fd, 64):
        if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) is _exit:
            _exit()
