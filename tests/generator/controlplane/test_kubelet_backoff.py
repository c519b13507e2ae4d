"""The process node's crash-loop back-off, on a clock the test moves: a failing container is
restarted at once, then after 10, 20, 40 ... seconds up to five minutes, its status saying
CrashLoopBackOff with the current delay, and a run of more than ten minutes starts the count
again, as the kubelet's back-off (initial 10 s, max 300 s, reset after twice the max) does."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from generator.controlplane.kubelet import pod as pods
from generator.controlplane.kubelet import runtime
from tests.support.kubelet_node import Node, ready

UID = "8d6f0c1e-0000-4000-8000-000000000001"


class Clock:
    def __init__(self) -> None:
        self.now = 1024.0

    def __call__(self) -> float:
        return self.now


class FakeProcess:
    """A container process that runs until the test says how it exits."""

    def __init__(self, pid: int) -> None:
        self.pid, self.code = pid, None

    def poll(self) -> int | None:
        return self.code

    def reap(self) -> None:
        pass


@pytest.fixture
def crasher(tmp_path, monkeypatch):
    """A pod whose container the test makes exit; runtime.start hands out fake processes."""
    started: list[FakeProcess] = []

    def start(*args, **kwargs):
        started.append(FakeProcess(4000 + len(started)))
        return started[-1]

    monkeypatch.setattr(runtime, "start", start)
    pod = {"metadata": {"name": "crasher", "namespace": "default", "uid": UID},
           "spec": {"restartPolicy": "Always", "containers": [{"name": "app", "image": "busybox", "command": ["false"]}]}}
    node = Node(tmp_path)
    worker = pods.PodWorker(node, pod)
    worker.clock = clock = Clock()
    ready(worker, clock.now)
    worker._step()  # the first start
    assert len(started) == 1 and worker.main[0].running
    return SimpleNamespace(worker=worker, clock=clock, started=started, node=node)


def status(worker) -> dict:
    (container,) = worker.status()["containerStatuses"]
    return container


def crash(pod, after: float = 1.0, code: int = 1) -> None:
    """The running container exits `after` seconds into its run, and the node sees it."""
    pod.clock.now += after
    pod.started[-1].code = code
    pod.worker._step()


def waited(pod) -> float:
    """Steps the clock an eighth of a second at a time (exact in binary, so no rounding drifts)
    until the container runs again: the delay."""
    before, waiting = len(pod.started), 0.0
    while len(pod.started) == before:
        assert waiting <= 400, "never restarted"
        pod.clock.now += 0.125
        waiting += 0.125
        pod.worker._step()
    return waiting


def test_restarts_wait_10_20_40_seconds_doubling_to_five_minutes_and_the_status_says_each_delay(crasher):
    crash(crasher)
    assert len(crasher.started) == 2 and status(crasher.worker)["restartCount"] == 1  # the first restart at once
    assert "running" in status(crasher.worker)["state"]
    delays = []
    for restart in range(2, 10):
        crash(crasher, code=3)
        shown = status(crasher.worker)
        expected = min(10 * 2 ** (restart - 2), 300)
        assert shown["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": (
            f"back-off {expected}s restarting failed container=app pod=crasher_default({UID})")}}
        assert shown["lastState"]["terminated"]["exitCode"] == 3 and shown["restartCount"] == restart - 1
        assert not shown["ready"] and crasher.worker.phase == "Running"
        delays.append(waited(crasher))
        assert status(crasher.worker)["restartCount"] == restart and "running" in status(crasher.worker)["state"]
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]
    assert ("Warning", "BackOff", f"Back-off restarting failed container app in pod crasher_default({UID})") in crasher.node.events


def test_a_run_of_more_than_ten_minutes_starts_the_back_off_again(crasher):
    crash(crasher)  # at once
    crash(crasher)
    assert waited(crasher) == 10
    crash(crasher, after=599)  # a long run, but not ten minutes: the count goes on
    assert waited(crasher) == 20
    crash(crasher, after=601)  # ten minutes and more: restarted at once, as a first crash is
    assert len(crasher.started) == 5 and "running" in status(crasher.worker)["state"]
    crash(crasher)
    assert status(crasher.worker)["state"]["waiting"]["message"].startswith("back-off 10s ")
    assert waited(crasher) == 10
    crash(crasher)
    assert waited(crasher) == 20


def test_a_container_that_succeeds_under_on_failure_is_not_restarted(crasher):
    crasher.worker.pod["spec"]["restartPolicy"] = "OnFailure"
    crash(crasher, code=0)
    crasher.clock.now += 600
    crasher.worker._step()
    assert len(crasher.started) == 1 and crasher.worker.phase == "Succeeded"
    assert status(crasher.worker)["state"]["terminated"]["reason"] == "Completed"
