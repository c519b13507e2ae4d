"""How a job's controller treats its pods, as `generator run` plays it: what a failed pod
restarts (the pod, or every pod), when the job has succeeded, and what `run --dry-run` shows of
each pod's env. Each kind of job brings its own (generator/kinds); the runner executes it."""
from __future__ import annotations

from abc import ABC, abstractmethod


class Policy(ABC):
    shown_env: tuple[str, ...]  # the launch contract `run --dry-run --env` shows, in this order

    @abstractmethod
    def headline(self, plan) -> str:
        """The plan's first line: what runs, how it succeeds and restarts, where its outputs go."""

    @abstractmethod
    def succeeded(self, states: list) -> str:
        """Why the job has succeeded, from its pods' states (runner.State); "" while it has not."""

    @abstractmethod
    def failed(self, runner, state, code: int, ran: float):
        """A pod exited with `code` != 0 after `ran` seconds: restart it (runner.restart), or every
        pod (runner.restart_all), and return None; or return runner.fail(...)'s Outcome."""
