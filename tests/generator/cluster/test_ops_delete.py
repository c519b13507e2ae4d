"""`delete` of a TrainJob: its own TrainingRuntime goes only once the TrainJob has, since Trainer's
webhook refuses every update of a TrainJob whose runtime is gone (the garbage collector's removal
of its foreground-deletion finalizer among them), which would leave it being deleted for good."""
from __future__ import annotations

import pytest

from generator import kinds
from generator.cluster import client as api
from generator.cluster import ops
from generator.errors import UserError

JOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "mnist"},
       "spec": {"runtimeRef": {"name": "mnist", "kind": "TrainingRuntime"}}}
RUNTIME = {"kind": "TrainingRuntime", "metadata": {"name": "mnist", "labels": {"helm.sh/chart": "pytorchjob-0.1.0"}}}


class Cluster:
    """What delete asks of a cluster where the TrainJob lingers for `polls` reads after its delete."""

    def __init__(self, polls: int):
        self.namespace, self.polls, self.said = "default", polls, []
        self.custom = self

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.said.append(f"delete {plural}/{name}")


@pytest.fixture
def cluster(monkeypatch):
    c = Cluster(polls=3)
    monkeypatch.setattr(api, "find", lambda cl, name: (kinds.TRAINJOB, JOB))
    monkeypatch.setattr(api, "delete_job", lambda cl, name, kind: cl.said.append(f"delete trainjobs/{name}"))
    monkeypatch.setattr(api, "call", lambda cl, verb, plural, name, fn, *args, **kw: fn(*args, **kw))

    def get_custom(cl, group, version, plural, name):
        if plural == "trainjobs":
            cl.said.append("get trainjobs/mnist")
            cl.polls -= 1
            return JOB if cl.polls >= 0 else None
        return RUNTIME

    monkeypatch.setattr(api, "get_custom", get_custom)
    monkeypatch.setattr(ops.time, "sleep", lambda seconds: None)
    return c


def test_the_runtime_goes_only_after_the_trainjob_is_gone(cluster):
    assert list(ops.delete(cluster, "mnist", with_pvc=False)) == ["trainjob mnist deleted",
                                                                   "trainingruntime mnist deleted"]
    assert cluster.said == ["delete trainjobs/mnist", *["get trainjobs/mnist"] * 4, "delete trainingruntimes/mnist"]


def test_a_trainjob_that_does_not_go_keeps_its_runtime_and_says_what_to_do(cluster, monkeypatch):
    cluster.polls = 10 ** 6
    monkeypatch.setattr(ops, "GONE_TIMEOUT", 0.0)
    with pytest.raises(UserError, match=r"TrainJob mnist is still being deleted .* its own runtime was kept; run "
                                        r"`python -m generator delete mnist -n default` again"):
        list(ops.delete(cluster, "mnist", with_pvc=False))
    assert "delete trainingruntimes/mnist" not in cluster.said
