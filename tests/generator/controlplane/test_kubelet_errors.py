"""What the process node does when something goes wrong that is not the pod's doing: a bug in the
node fails that pod once, visibly, instead of retrying it five times a second for ever; and an API
server that cannot list Services leaves every pod's resolver as it was, instead of emptying it."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from kubernetes.client import ApiException

from generator.controlplane import kubelet as kubelets
from generator.controlplane.kubelet import pod as pods
from tests.support.kubelet_node import Node

UID = "8d6f0c1e-0000-4000-8000-000000000002"


def pod() -> dict:
    return {"metadata": {"name": "web", "namespace": "default", "uid": UID},
            "spec": {"containers": [{"name": "app", "image": "busybox", "command": ["true"]}]}}


def worker(tmp_path, step) -> tuple[pods.PodWorker, Node, list[int]]:
    node = Node(tmp_path)
    w = pods.PodWorker(node, pod())
    calls: list[int] = []

    def counted() -> None:
        calls.append(1)
        step()

    w._step = counted
    w._remove_sandbox = lambda: None
    return w, node, calls


def run_for(w: pods.PodWorker, seconds: float) -> None:
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    w.stopping.wait(seconds)
    w.stopping.set()
    thread.join(10)


def test_a_bug_in_the_node_fails_the_pod_once_with_a_reason_and_is_not_retried(tmp_path):
    def bug() -> None:
        raise KeyError("containerStatuses")

    w, node, calls = worker(tmp_path, bug)
    run_for(w, 1.0)  # five steps' worth
    assert calls == [1]
    assert [e[:2] for e in node.events] == [("Warning", pods.NODE_ERROR)]
    assert "KeyError: 'containerStatuses'" in node.events[0][2] and "report the bug" in node.events[0][2]
    told = [line for line in node.lines if "failed on a bug" in line]
    assert len(told) == 1 and "Traceback" in told[0]
    status = node.reports[-1]["status"]
    assert status["phase"] == "Failed" and status["reason"] == pods.NODE_ERROR


def test_an_api_server_away_is_retried_every_step_without_failing_the_pod(tmp_path):
    def away() -> None:
        raise ApiException(status=503, reason="Service Unavailable")

    w, node, calls = worker(tmp_path, away)
    run_for(w, 1.0)
    assert len(calls) >= 3
    assert node.events == [] and node.reports[-1]["status"]["phase"] == "Pending"


class Reports:
    """Status reports as an API server takes them: refused with what it is told to raise, else kept."""

    def __init__(self, *failures: Exception) -> None:
        self.failures, self.kept = list(failures), []

    def patch_namespaced_pod_status(self, name, namespace, body, **_):
        if self.failures:
            raise self.failures.pop(0)
        self.kept.append(body)


def test_a_status_report_the_api_server_missed_is_sent_again_at_the_next_step(tmp_path):
    core = Reports(ConnectionRefusedError(111, "Connection refused"), ApiException(status=503))
    w = pods.PodWorker(Node(tmp_path, core=core), pod())
    w._report()
    w._report()
    assert core.kept == [] and not w.gone
    w._report()
    assert [body["status"]["phase"] for body in core.kept] == ["Pending"]


def test_a_pod_deleted_under_its_report_is_let_go(tmp_path):
    core = Reports(ApiException(status=404, reason="Not Found"))
    w = pods.PodWorker(Node(tmp_path, core=core), pod())
    w._report()
    assert w.gone and core.kept == []


def test_a_bug_in_reporting_a_status_surfaces_instead_of_the_status_never_changing(tmp_path):
    core = Reports(TypeError("Object of type Path is not JSON serializable"))
    w = pods.PodWorker(Node(tmp_path, core=core), pod())
    with pytest.raises(TypeError, match="not JSON serializable"):
        w._report()


class Core:
    """Lists Services as told: an item list, or an exception to raise."""

    def __init__(self) -> None:
        self.answers: list = []

    def list_service_for_all_namespaces(self):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(items=answer)


def service(name: str) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(name=name, namespace="default"),
                           spec=SimpleNamespace(selector={"app": name}, cluster_ip="10.96.0.9"))


def test_a_failed_service_listing_keeps_the_last_one_and_is_told_once_until_it_works_again():
    kubelet = kubelets.Kubelet.__new__(kubelets.Kubelet)  # no API server: only the listing is under test
    kubelet.core, kubelet.services, kubelet.services_failing = Core(), [], False
    lines: list[str] = []
    kubelet.log = lines.append
    web = service("web")
    kubelet.core.answers = [[web], ConnectionRefusedError(111, "Connection refused"),
                            ApiException(status=500), [web, service("db")]]
    assert kubelet._services() == [web]
    assert kubelet._services() == [web]  # not "no Services": pods keep resolving web
    assert kubelet._services() == [web]
    assert len([line for line in lines if line.startswith("listing Services failed")]) == 1
    assert [s.metadata.name for s in kubelet._services()] == ["web", "db"]
    assert lines[-1] == "listing Services works again"
