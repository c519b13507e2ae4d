"""Rank 0's progress: a redrawn bar on a terminal, plain lines in container logs."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool, steps: int, interval: int, stream=None):
        self.enabled = enabled
        self.steps = steps
        self.interval = interval
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()

    def epoch_start(self) -> None:
        self.start = time.perf_counter()

    def due(self, step: int) -> bool:
        """Whether step (0-based) gets a line: every step on a terminal, every interval in logs."""
        done = step + 1
        return self.enabled and (self.tty or done % self.interval == 0 or done == self.steps)

    def step(self, epoch: int, step: int, loss: float, samples: int) -> None:
        if not self.due(step):
            return
        done = step + 1
        rate = samples / max(time.perf_counter() - self.start, 1e-9)
        if self.tty:
            filled = int(30 * done / self.steps)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\repoch {epoch + 1} [{bar}] {done}/{self.steps} loss {loss:.4f} {rate:,.0f} samples/s")
            if done == self.steps:
                self.stream.write("\n")
        else:
            self.stream.write(f"epoch {epoch + 1} step {done}/{self.steps} loss {loss:.4f} {rate:.0f} samples/s\n")
        self.stream.flush()

    def line(self, text: str) -> None:
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()
