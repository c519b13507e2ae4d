"""Stopping a pod's containers together: every one is sent SIGTERM before any is killed, and one
that ignores it is killed once the shared grace period is over."""
from __future__ import annotations

import os
import signal
import sys

from generator.container.process import Process, stop_together
from tests.support.waiting import wait_for

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_every_container_gets_sigterm_before_any_is_killed_and_the_stubborn_are_killed(monkeypatch):
    sent: list[tuple[str, int]] = []
    real = Process.signal

    def recorded(self, sig):  # the real signal, and the order it went in
        sent.append((signal.Signals(sig).name, self.pid))
        real(self, sig)

    monkeypatch.setattr(Process, "signal", recorded)
    lines: list[list[str]] = [[], [], []]
    procs = [Process([sys.executable, "-c", STUBBORN], dict(os.environ), lines[i].append) for i in range(3)]
    wait_for(lambda: all("ready" in out for out in lines), 30, "the three processes to start")

    stop_together(procs, grace=0.3)

    pids = [p.pid for p in procs]
    # One after another, the second would be told only once the first was killed.
    assert sent == [("SIGTERM", pid) for pid in pids] + [("SIGKILL", pid) for pid in pids]
    assert [p.poll() for p in procs] == [137] * 3  # SIGKILL, as a runtime reports it
