"""Which node `cluster up` starts: the one --node names, else the real node where it can run and the
options allow, else the process node with the reason; a running cluster keeps the node it runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from generator.controlplane import lifecycle
from generator.controlplane.state import ClusterState, NodeOptions, Process
from generator.errors import UserError

WHERE = Path("/tmp/c")
NO_ROOT = "the real node needs root (...), and this runs as uid 1000: run it as root"


def can(install):
    return None


def cannot(install):
    return NO_ROOT


def test_the_real_node_is_the_default_where_it_can_run():
    assert lifecycle.choose_node(None, cannot=can) == (
        "real", "node: real (kubelet, containerd, runc; --node process runs pods as processes of this machine)")


def test_the_default_falls_back_to_the_process_node_saying_why():
    assert lifecycle.choose_node(None, cannot=cannot) == (
        "process", f"node: process ({NO_ROOT}; --node process chooses it without this line)")


def test_an_option_only_the_process_node_takes_chooses_it_saying_which():
    flag = "--cpu sizes the process node"
    assert lifecycle.choose_node(None, process_only=flag, cannot=can) == (
        "process", f"node: process ({flag}; --node process chooses it without this line)")


def test_the_default_may_install_what_the_real_node_lacks_and_an_explicit_real_leaves_that_to_its_start():
    asked = []
    lifecycle.choose_node(None, cannot=lambda install: asked.append(install))
    lifecycle.choose_node("real", cannot=lambda install: asked.append(install))
    assert asked == [True, False]


def test_a_named_node_is_chosen_without_a_line():
    assert lifecycle.choose_node("process", cannot=cannot) == ("process", None)
    assert lifecycle.choose_node("real", cannot=can) == ("real", None)


def test_a_named_real_node_that_cannot_run_is_refused_with_the_reason():
    with pytest.raises(UserError) as refused:
        lifecycle.choose_node("real", cannot=cannot)
    assert str(refused.value) == f"--node real: {NO_ROOT}, or use `--node process`"


@pytest.mark.parametrize("running", ["real", "process"])
def test_a_running_cluster_keeps_its_node(running):
    assert lifecycle.choose_node(None, running, WHERE, cannot=cannot) == (
        running, f"node: {running} (the node of the cluster running in {WHERE})")
    assert lifecycle.choose_node(running, running, WHERE, cannot=cannot) == (running, None)


def test_another_node_than_the_running_clusters_is_refused_with_the_way_to_it():
    with pytest.raises(UserError) as refused:
        lifecycle.choose_node("process", "real", WHERE, cannot=can)
    assert str(refused.value) == (f"the cluster in {WHERE} runs the real node; run `python -m generator cluster down "
                                  f"--dir {WHERE}` first for the process node")
    with pytest.raises(UserError, match="runs the process node; .* first for the real node"):
        lifecycle.choose_node("real", "process", WHERE, cannot=can)


def test_a_process_node_option_on_a_running_real_node_is_refused():
    with pytest.raises(UserError) as refused:
        lifecycle.choose_node(None, "real", WHERE, process_only="--cpu sizes the process node", cannot=can)
    assert str(refused.value).startswith(f"--cpu sizes the process node, and the cluster in {WHERE} runs the real node")
    assert lifecycle.choose_node(None, "process", WHERE, process_only="--cpu sizes the process node")[0] == "process"


@pytest.mark.parametrize(("current", "kind"), [
    (None, None),
    (ClusterState(processes={"etcd": Process(1, "")}), None),
    (ClusterState(processes={"kubelet": Process(1, "")}), "process"),
    (ClusterState(processes={"kubelet": Process(1, ""), "containerd": Process(2, "")}), "real"),
    (ClusterState(node_options=NodeOptions(kind="real")), "real"),
    (ClusterState(node_options=NodeOptions(kind="process"), processes={"kubelet": Process(1, "")}), "process"),
])
def test_the_node_a_cluster_runs_is_read_from_its_state(current, kind):
    assert lifecycle.node_kind(current) == kind
