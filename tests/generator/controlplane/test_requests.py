"""`cluster node kill|start` reach the supervisor through request files in the cluster's folder;
what it cannot do is refused with the reason and the way out, and the asking command says it."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from generator.controlplane import requests
from generator.controlplane.layout import Layout
from generator.controlplane.state import ClusterState, NodeOptions, NodeState
from generator.errors import UserError


def supervisor(tmp_path, phases: dict[str, str]):
    state = ClusterState(nodes={n: NodeState(p, "2026-12-02T10:00:00Z") for n, p in phases.items()})
    return SimpleNamespace(layout=Layout(tmp_path), state=state, real_nodes=dict.fromkeys(phases), node=NodeOptions())


@pytest.mark.parametrize("asked, said", [
    ({"action": "kill", "node": "box-node9"}, "node 'box-node9': the cluster's nodes are box, box-node2; "
                                              "`python -m generator cluster node list` lists them"),
    ({"action": "kill", "node": "box-node2"}, "node box-node2 is killed already; `cluster node start box-node2` "
                                              "boots it again"),
    ({"action": "start", "node": "box"}, "node box is ready; only a killed node is started (`cluster node kill box` "
                                         "first)"),
    ({"action": "reboot", "node": "box"}, "unknown request 'reboot'; the supervisor serves kill, start"),
])
def test_what_the_supervisor_cannot_do_is_refused_naming_the_way_out(tmp_path, asked, said):
    with pytest.raises(UserError) as refused:
        requests.handle_one(supervisor(tmp_path, {"box": "ready", "box-node2": "killed"}), asked)
    assert str(refused.value) == said


def test_a_refusal_travels_back_to_the_command_that_asked(tmp_path):
    sup = supervisor(tmp_path, {"box": "ready"})
    stop = threading.Event()

    def serving():
        while not stop.wait(0.05):
            requests.serve(sup)

    server = threading.Thread(target=serving)
    server.start()
    try:
        with pytest.raises(UserError, match="node 'nope': the cluster's nodes are box;"):
            requests.ask(sup.layout, "kill", "nope", 5)
    finally:
        stop.set()
        server.join()
    assert sorted(p.name for p in requests.folder(sup.layout).iterdir()) == []  # request and answer both gone
    assert oct(requests.folder(sup.layout).stat().st_mode & 0o777) == "0o700"


def test_a_supervisor_that_never_answers_is_named_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(requests, "ANSWER_SECONDS", 0.2)
    with pytest.raises(UserError, match=r"did not answer `kill box` within 0.4s; its log is .*supervisor.log"):
        requests.ask(Layout(tmp_path), "kill", "box", 0.2)
    assert list(requests.folder(Layout(tmp_path)).iterdir()) == []  # the request withdrawn
