"""Rank 0's progress: a redrawn bar on a terminal, plain lines in container logs, and the run's
share done with the time left (RunProgress), as a `progress ...` line and a report to Kubeflow
Trainer's status server when one is injected."""
from __future__ import annotations

import sys
import time

from .reporting import Reporter, payload


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

    def step(self, epoch: int, step: int, loss: float, samples: int) -> float:
        """Prints the step's line; returns the epoch's samples/s so far."""
        done = step + 1
        rate = samples / max(time.perf_counter() - self.start, 1e-9)
        if not self.due(step):
            return rate
        if self.tty:
            filled = int(30 * done / self.steps)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\repoch {epoch + 1} [{bar}] {done}/{self.steps} loss {loss:.4f} {rate:,.0f} samples/s")
            if done == self.steps:
                self.stream.write("\n")
        else:
            self.stream.write(f"epoch {epoch + 1} step {done}/{self.steps} loss {loss:.4f} {rate:.0f} samples/s\n")
        self.stream.flush()
        return rate

    def line(self, text: str) -> None:
        if self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()


class RunProgress:
    """The run's progress in steps over every epoch; a resumed run starts where it resumed and
    estimates the time left from its own pace. At most every `interval` seconds rank 0 prints a
    `progress ...` line (which `generator status` reads from a PyTorchJob's log) and hands the same
    figures to the reporter. The run's last step and epoch print none, and its end (100 %) goes to
    the reporter alone: a finished run's log ends as it always has, with the last epoch's accuracy
    and the files written."""

    def __init__(self, lines: Progress, epochs: int, steps: int, start: int, reporter: Reporter | None,
                 interval: float = 5.0):
        self.lines, self.epochs, self.steps, self.reporter, self.interval = lines, epochs, steps, reporter, interval
        self.total = epochs * steps
        self.start_done = self.done = start
        self.began, self.last = time.monotonic(), float("-inf")
        self.loss: float | None = None
        self.accuracy: float | None = None
        self.rate: float | None = None

    def step(self, epoch: int, done_in_epoch: int, loss: float, rate: float) -> None:
        self.done, self.loss, self.rate = epoch * self.steps + done_in_epoch, loss, rate
        self._maybe()

    def epoch_end(self, epoch: int, accuracy: float) -> None:
        self.done, self.accuracy = (epoch + 1) * self.steps, accuracy
        self._maybe()

    def finish(self) -> None:
        """The run is done (all epochs, or the target accuracy reached early): 100 %."""
        self.done = self.total
        if self.reporter is not None:
            self.reporter.finish(self._figures(100, 0)[1])

    def _maybe(self) -> None:
        now = time.monotonic()
        if not self.lines.enabled or now - self.last < self.interval or self.done >= self.total:
            return
        self.last = now
        percent = min(99, 100 * self.done // max(self.total, 1))  # 100 only once finished
        ran, elapsed = self.done - self.start_done, now - self.began
        remaining = round((self.total - self.done) * elapsed / ran) if ran > 0 else None
        line, report = self._figures(percent, remaining)
        self.lines.line(line)
        if self.reporter is not None:
            self.reporter.offer(report)

    def _figures(self, percent: int, remaining: int | None) -> tuple[str, dict]:
        epoch = min(self.epochs, self.done // max(self.steps, 1) + (self.done % max(self.steps, 1) > 0))
        metrics = {"epoch": f"{epoch}/{self.epochs}", "step": f"{self.done}/{self.total}"}
        parts = [f"progress {percent}%", f"epoch {epoch}/{self.epochs}", f"step {self.done}/{self.total}"]
        if self.loss is not None:
            metrics["loss"] = f"{self.loss:.4f}"
            parts.append(f"loss {self.loss:.4f}")
        if self.accuracy is not None:
            metrics["test_accuracy"] = f"{self.accuracy:.4f}"
            parts.append(f"test accuracy {self.accuracy:.4f}")
        if self.rate is not None:
            metrics["samples_per_second"] = f"{self.rate:.0f}"
            parts.append(f"{self.rate:.0f} samples/s")
        if remaining is not None:
            parts.append(f"{remaining} s left")
        return ", ".join(parts), payload(percent, remaining, metrics)
