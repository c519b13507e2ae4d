"""Runs a Plan as its kind's controller would (the plan's policy: the training operator's restart
policies per role and backoffLimit, or JobSet's node Job and whole-set restarts; its success
rule): activeDeadlineSeconds, the other replicas stopped on failure, and no process left behind."""
from __future__ import annotations

import collections
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from generator.container.process import Process, backoff, stop_together
from generator.local.plan import Plan, Replica

GRACE_SECONDS = 10.0  # SIGTERM to SIGKILL, as a pod's terminationGracePeriod
TAIL_LINES = 15
COLOURS = ["36", "33", "35", "32", "34", "31"]


@dataclass
class State:
    replica: Replica
    proc: Process | None = None
    status: str = "Pending"  # Pending, Running, Succeeded, Failed, Stopped
    restarts: int = 0
    exit_code: int | None = None
    wall: float = 0.0
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    delay: float = 0.0  # the crash-loop back-off before its next start
    next_start: float | None = None  # set while it waits out the back-off
    same: int = 0  # failures in a row that ended alike
    last_failure: tuple = ()


@dataclass
class Outcome:
    succeeded: bool
    reason: str
    states: list[State]


class Runner:
    def __init__(self, plan: Plan, out=None, colour: bool | None = None):
        self.plan = plan
        self.out = out or sys.stdout
        self.colour = self.out.isatty() if colour is None else colour
        self.states = [State(r) for r in plan.replicas]
        self.lock = threading.Lock()
        self.stop_requested: str | None = None
        self.output_closed: BrokenPipeError | None = None  # the reader of `out` went away (`| head`)
        self.counts: collections.Counter = collections.Counter()  # the policy's tallies: restarts, failures
        width = max(len(r.name) for r in plan.replicas)
        self.prefix = {r.name: r.name.ljust(width) for r in plan.replicas}

    # -- output ---------------------------------------------------------------------------
    def _emit(self, state: State, line: str) -> None:
        prefix = self.prefix[state.replica.name]
        if self.colour:
            colour = COLOURS[self.states.index(state) % len(COLOURS)]
            prefix = f"\033[{colour}m{prefix}\033[0m"
        with self.lock:
            if self.output_closed:
                return  # the readers keep draining the replicas' pipes while they stop
            try:
                self.out.write(f"{prefix} | {line}\n")
                self.out.flush()
            except BrokenPipeError as exc:
                # Nobody reads any more: stop the replicas as Ctrl-C does, and let the caller end quietly.
                self.output_closed = exc
                self.stop_requested = self.stop_requested or "the output was closed"

    # -- replicas, as the plan's backend starts them --------------------------------------
    def _start(self, state: State) -> None:
        r = state.replica
        try:
            self.plan.backend.prepare(r)
        except OSError as exc:  # as a kubelet's FailedMount: the job stops through the usual path
            state.proc, state.status, state.exit_code = None, "Failed", None
            state.tail.append(f"cannot make its volume folder: {exc}")
            return

        def line(text: str) -> None:
            state.tail.append(text)
            self._emit(state, text)

        try:
            state.proc = self.plan.backend.launch(self.plan, r, line)
        except OSError as exc:
            # proc None marks "could not start", also for a restart after an earlier life
            state.proc, state.status, state.exit_code = None, "Failed", 127
            state.tail.append(f"cannot start {exc.filename or r.argv[0]}: {exc}")
            return
        state.status = "Running"

    def _stop_all(self, status: str = "Stopped", settle: float = 0.0) -> None:
        """SIGTERM, the grace period, SIGKILL. With `settle`, replicas first get that long to end by themselves."""
        end = time.monotonic() + settle
        while settle and time.monotonic() < end and any(s.proc and s.proc.poll() is None for s in self.states):
            time.sleep(0.05)
        running = [s for s in self.states if s.proc and s.status == "Running"]
        stop_together([s.proc for s in running], GRACE_SECONDS)
        for s in running:
            self._finish(s, "Succeeded" if s.proc.poll() == 0 else status)
        for s in self.states:
            if s.proc:
                s.proc.reap()

    def _finish(self, state: State, status: str) -> None:
        if state.proc:
            state.proc.reader.join(timeout=5)
            state.exit_code = state.proc.poll()
            state.wall += time.monotonic() - state.proc.started
        state.status = status

    # -- the operator's loop --------------------------------------------------------------
    def request_stop(self, why: str, now: bool = False) -> None:
        """Stop the replicas with their grace period, or `now` without it (a second Ctrl-C)."""
        self.stop_requested = self.stop_requested or why
        if now:
            for state in self.states:
                if state.proc:
                    state.proc.kill_group()

    def fresh_disks(self) -> Path | None:
        """As a new pod starts with empty disks: the last run's pod folders move to pods.previous
        (one run kept, for a look back); claims' folders stay, as claims do."""
        disks = self.plan.disks
        if not disks.exists() and not disks.is_symlink():
            return None
        previous = disks.with_name(disks.name + ".previous")
        if previous.is_symlink() or previous.is_file():
            previous.unlink()
        elif previous.exists():
            shutil.rmtree(previous)
        disks.rename(previous)
        return previous

    def run(self) -> Outcome:
        job_start = time.monotonic()
        for state in self.states:
            self._start(state)
        while True:
            if self.stop_requested:
                self._stop_all()
                return Outcome(False, self.stop_requested, self.states)
            deadline = self.plan.active_deadline
            if deadline is not None and time.monotonic() - job_start > deadline:
                self._stop_all()
                return Outcome(False, f"DeadlineExceeded: the job ran longer than activeDeadlineSeconds={deadline}",
                               self.states)
            for state in self.states:
                if state.next_start is not None and time.monotonic() >= state.next_start:
                    state.next_start = None
                    self._start(state)
                if state.status != "Running" or state.proc.poll() is None:
                    if state.status == "Failed" and state.proc is None:
                        return self.fail(state, "could not start")
                    continue
                code = state.proc.poll()
                ran = time.monotonic() - state.proc.started
                self._finish(state, "Succeeded" if code == 0 else "Failed")
                code = state.exit_code
                if code != 0:
                    ended = self.plan.policy.failed(self, state, code, ran)
                    if ended:
                        return ended
            done = self.plan.policy.succeeded(self.states)
            if done:
                # The job is Succeeded; replicas still finishing get a moment before they are stopped.
                self._stop_all(settle=GRACE_SECONDS)
                return Outcome(True, done, self.states)
            time.sleep(0.05)

    # -- what a policy does with a failed replica ---------------------------------------------
    def restart(self, state: State, ran: float, said: str) -> None:
        """Start it again after its crash-loop back-off, saying `said` and the back-off."""
        state.restarts += 1
        state.delay = backoff(state.delay, state.restarts - 1, ran)
        self._emit(state, said + (f", back-off {state.delay:g}s)" if state.delay else ")"))
        state.status, state.next_start = "BackOff", time.monotonic() + state.delay

    def restart_all(self, state: State, said: str) -> None:
        """Stop every replica and start them all again on fresh disks (claims stay), as new pods."""
        self._emit(state, said)
        self._stop_all()
        self.fresh_disks()
        for s in self.states:
            s.next_start, s.delay, s.same = None, 0.0, 0
            s.restarts += 1
            self._start(s)

    def fail(self, state: State, why: str) -> Outcome:
        """Stop every replica: the job failed, because of `state`'s replica."""
        state.status = "Failed"
        self._stop_all()
        state.status = "Failed"
        tail = "\n".join(f"    {line}" for line in state.tail) or "    (no output)"
        code = f" with exit code {state.exit_code}" if state.exit_code is not None else ""
        reason = f"{state.replica.name} failed{code} ({why}); its last lines:\n{tail}"
        return Outcome(False, reason, self.states)


def summary(outcome: Outcome, plan: Plan) -> str:
    lines = [f"{'replica':<12}{'status':<11}{'restarts':>9}{'exit':>6}{'wall s':>9}"]
    for s in outcome.states:
        code = "-" if s.exit_code is None else str(s.exit_code)
        lines.append(f"{s.replica.name:<12}{s.status:<11}{s.restarts:>9}{code:>6}{s.wall:>9.1f}")
    lines.append(("job succeeded: " if outcome.succeeded else "job failed: ") + outcome.reason)
    folders = sorted({f for r in plan.replicas for f in plan.backend.folders(r)})
    for folder in folders:
        if os.path.isdir(folder) and os.listdir(folder):
            lines.append(f"outputs in {folder}: {', '.join(sorted(os.listdir(folder)))}")
    return "\n".join(lines)
