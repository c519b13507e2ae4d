"""The bring-up's order, derived from what each step declares it comes after: the steps a user
reads in `cluster up`'s log, and the processes `cluster down` stops, last started first. A bad
declaration (a step nobody is called, a circle) is named, not half-run."""
from __future__ import annotations

import pytest

from generator.controlplane import bringup, components
from generator.controlplane.bringup import OrderError, Step
from generator.controlplane.layout import Layout
from generator.controlplane.state import NodeOptions
from generator.controlplane.supervisor import Supervisor


def test_the_bring_up_runs_in_dependency_order_and_leaves_the_release_out_without_an_operator():
    names = [s.name for s in bringup.steps(with_operator=True)]
    assert names == ["image registry", "pod network", "certificates", "etcd", "kube-apiserver", "kube-controller-manager",
                     "kube-scheduler", "node", "default service account", "default storage", "operator release",
                     "releases ready"]
    assert [s.name for s in bringup.steps(with_operator=False)] == names[:-2]


def test_trainer_is_installed_only_when_asked_and_both_releases_start_before_either_is_waited_for():
    names = [s.name for s in bringup.steps(with_operator=True, with_trainer=True)]
    assert names[-3:] == ["operator release", "trainer release", "releases ready"]
    assert [s.name for s in bringup.steps(with_operator=False, with_trainer=True)][-2:] == ["trainer release",
                                                                                          "releases ready"]


def test_kueue_is_installed_only_when_asked_after_trainer_and_its_queues_once_its_webhooks_answer():
    names = [s.name for s in bringup.steps(with_operator=True, with_trainer=True, with_kueue=True)]
    assert names[-5:] == ["operator release", "trainer release", "kueue release", "releases ready", "kueue queues"]
    assert [s.name for s in bringup.steps(with_operator=False, with_kueue=True)][-3:] == [
        "kueue release", "releases ready", "kueue queues"]
    assert "kueue release" not in [s.name for s in bringup.steps(with_operator=True, with_trainer=True)]


def test_the_order_comes_from_the_declarations_not_from_where_the_steps_are_written():
    every = {"with_operator": True, "with_trainer": True, "with_kueue": True, "nodes": 2}
    assert bringup.ordered(reversed(bringup.STEPS)) == bringup.steps(**every)
    assert [s.name for s in bringup.steps(**every)][:8] == [
        "image registry", "pod network", "certificates", "etcd", "kube-apiserver", "kube-controller-manager",
        "kube-scheduler", "node"]


def test_processes_stop_in_the_reverse_of_their_start_the_api_server_after_the_controllers_and_etcd_last():
    assert bringup.stop_order() == ["kube-proxy", "kubelet", "containerd", "coredns", "kube-scheduler",
                                    "kube-controller-manager", "kube-apiserver", "etcd"]


def test_the_other_nodes_join_once_the_releases_run_on_the_first_and_the_queues_count_them():
    names = [s.name for s in bringup.steps(with_operator=True, with_kueue=True, nodes=3)]
    assert names[-3:] == ["releases ready", "more nodes", "kueue queues"]
    assert "more nodes" not in [s.name for s in bringup.steps(with_operator=True, with_kueue=True)]
    assert [s.name for s in bringup.steps(with_operator=False, nodes=2)][-1] == "more nodes"


def run(_sup) -> None:
    pass


def test_a_step_that_comes_after_one_nobody_is_called_is_named():
    planted = [*bringup.STEPS, Step("gpu plugin", run, after=("nodes",))]
    with pytest.raises(OrderError) as refused:
        bringup.ordered(planted, planted)
    assert str(refused.value).startswith("bring-up step 'gpu plugin' comes after 'nodes', which no step is called; "
                                         "the steps are certificates, default service account, default storage, etcd, gpu plugin, ")


def test_two_steps_of_one_name_are_named():
    planted = [*bringup.STEPS, Step("etcd", run)]
    with pytest.raises(OrderError, match="more than one bring-up step is called 'etcd'; name each once"):
        bringup.ordered(planted, planted)


def test_steps_that_wait_for_each_other_in_a_circle_are_named_with_the_circle():
    planted = [Step("etcd", run, after=("kube-apiserver",)), Step("kube-apiserver", run, after=("certificates",)),
               Step("certificates", run, after=("etcd",)), Step("pod network", run)]
    with pytest.raises(OrderError) as refused:
        bringup.ordered(planted, planted)
    assert str(refused.value) == ("bring-up steps wait for each other in a circle: 'etcd' after 'kube-apiserver' after "
                                  "'certificates' after 'etcd'; drop one of those `after` names")


def test_a_process_its_step_does_not_declare_is_refused_before_it_starts(tmp_path):
    sup = Supervisor(Layout(tmp_path), None, NodeOptions())
    sup.step = next(s for s in bringup.STEPS if s.name == "kube-scheduler")
    with pytest.raises(RuntimeError, match="bring-up step 'kube-scheduler' starts 'kubelet', which it does not "
                                           "declare in its `starts`"):
        sup.start(components.Component("kubelet", ["true"]))
    assert sup.children == {} and not (tmp_path / "logs").exists()
