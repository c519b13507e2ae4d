"""Following one pod's log: what is transient (a dropped stream, a server hiccup, a pod still
starting) is retried; anything else is said once and ends following that pod, never a silent
retry for ever."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from generator.cluster import logs


def running_pod():
    state = SimpleNamespace(waiting=None)
    status = SimpleNamespace(name="pytorch", state=state, restart_count=0)
    return SimpleNamespace(status=SimpleNamespace(phase="Running", container_statuses=[status]))


def finished_pod():
    pod = running_pod()
    pod.status.phase = "Succeeded"
    return pod


class Stream:
    def __init__(self, *lines: str):
        self.data = "".join(f"2026-11-23T10:00:0{i}Z {line}\n" for i, line in enumerate(lines)).encode()

    def stream(self, _size):
        yield self.data

    def release_conn(self):
        pass


class Core:
    """read_namespaced_pod_log answers each call with the next of `answers` (raised if an error)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.log_reads = 0
        self.pod_reads = 0

    def read_namespaced_pod(self, name, namespace):
        self.pod_reads += 1
        return finished_pod() if self.pod_reads > 1 and not self.answers else running_pod()

    def read_namespaced_pod_log(self, *args, **kwargs):
        self.log_reads += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def follow(core: Core) -> list[tuple[str, bool]]:
    said: list[tuple[str, bool]] = []
    c = SimpleNamespace(core=core, namespace="ml", server="https://cluster.test")
    stop = threading.Event()
    worker = threading.Thread(target=logs._follow_pod, args=(
        c, "mnist-master-0", "master-0", lambda name, text, err=False: said.append((text, err)), stop, "pytorch"),
        daemon=True)
    worker.start()
    worker.join(timeout=20)
    stop.set()
    assert not worker.is_alive(), f"still following after {core.log_reads} log reads: {said}"
    return said


def test_a_dropped_stream_and_a_server_hiccup_are_retried_and_the_log_goes_on(monkeypatch):
    monkeypatch.setattr(logs, "POLL_SECONDS", 0.01)
    core = Core(ProtocolError("Connection broken"), ApiException(status=503, reason="Service Unavailable"),
                Stream("epoch 1", "epoch 2"))
    said = follow(core)
    assert said == [("epoch 1", False), ("epoch 2", False)] and core.log_reads == 3


@pytest.mark.parametrize("error, told", [
    (ApiException(status=422, reason="Unprocessable Entity"), "the API server rejected pod mnist-master-0"),
    (ValueError("a chunk that is not a log line"), "a chunk that is not a log line"),
], ids=["refusal", "bug"])
def test_an_unexpected_error_is_said_once_and_ends_following_the_pod(monkeypatch, error, told):
    monkeypatch.setattr(logs, "POLL_SECONDS", 0.01)
    core = Core(error, *[Stream("never read")] * 5)
    said = follow(core)
    assert core.log_reads == 1
    assert len(said) == 1 and said[0][1] and said[0][0].startswith("stopped following: ") and told in said[0][0]
