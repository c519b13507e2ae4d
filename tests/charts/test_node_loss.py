"""nodeLossTolerationSeconds: how long every pod of the job stays bound to a node that stops
answering, as the two NoExecute tolerations Kubernetes would otherwise add with 300 s, for a
PyTorchJob's Master and Workers and a TrainJob's nodes alike; refused beside a toleration of the
user's own for either key."""
import pytest

from generator import helm, paths
from generator.errors import UserError
from tests.support import kube

NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}


def node_loss(seconds):
    return [{**NOT_READY, "tolerationSeconds": seconds}, {**UNREACHABLE, "tolerationSeconds": seconds}]


def objects(values):
    return {o["kind"]: o for o in helm.render_objects(paths.JOB_CHART, values, "demo", "ml")}


def pods(values):
    """Role (or "node" for a TrainJob) to its pod spec."""
    out = objects(values)
    if "PyTorchJob" in out:
        return {r: s["template"]["spec"] for r, s in out["PyTorchJob"]["spec"]["pytorchReplicaSpecs"].items()}
    (node,) = out["TrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"]
    return {"node": node["template"]["spec"]["template"]["spec"]}


def test_unset_leaves_the_tolerations_to_kubernetes():
    assert all("tolerations" not in p for p in pods({}).values())
    assert all("tolerations" not in p for p in pods({"nodeLossTolerationSeconds": None}).values())


@pytest.mark.parametrize("seconds", [0, 30, 86400])
def test_master_and_workers_get_both_tolerations_with_the_seconds(seconds):
    rendered = pods({"nodeLossTolerationSeconds": seconds})
    assert set(rendered) == {"Master", "Worker"}
    for pod in rendered.values():
        assert pod["tolerations"] == node_loss(seconds)
    assert kube.problems(objects({"nodeLossTolerationSeconds": seconds})["PyTorchJob"]) == []


def test_they_come_after_the_users_own_and_the_gpu_toleration():
    rendered = pods({"nodeLossTolerationSeconds": 45, "resources": {"gpus": 1},
                     "tolerations": [{"key": "pool", "operator": "Exists"}],
                     "worker": {"tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}})
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert rendered["Master"]["tolerations"] == [{"key": "pool", "operator": "Exists"}, gpu, *node_loss(45)]
    assert rendered["Worker"]["tolerations"] == [{"key": "pool", "operator": "Exists"},
                                                 {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                                                 gpu, *node_loss(45)]


def test_a_worker_only_and_a_master_only_job_carry_them_too():
    assert pods({"nodeLossTolerationSeconds": 5, "topology": {"master": False}})["Worker"]["tolerations"] == node_loss(5)
    assert pods({"nodeLossTolerationSeconds": 5, "topology": {"workers": 0}})["Master"]["tolerations"] == node_loss(5)


def test_a_trainjobs_nodes_carry_them_through_its_own_runtime():
    values = {"target": "v2", "nodeLossTolerationSeconds": 60, "topology": {"workers": 1},
              "tolerations": [{"key": "pool", "operator": "Exists"}]}
    out = objects(values)
    assert out["TrainJob"]["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert pods(values)["node"]["tolerations"] == [{"key": "pool", "operator": "Exists"}, *node_loss(60)]
    assert all(kube.trainer_problems(o) == [] for o in out.values() if o["kind"] in kube.TRAINER_KINDS)


def test_a_trainjob_that_needs_nothing_else_gets_a_runtime_for_them():
    """Without the value the TrainJob uses upstream's torch-distributed; the tolerations alone need a
    TrainingRuntime, since a TrainJob's trainer holds no pod fields."""
    base = {"target": "v2", "shm": {"enabled": False}, "disableIstioSidecar": False, "podSecurityContext": None,
            "securityContext": None, "automountServiceAccountToken": None, "image": {"pullPolicy": ""}}
    assert objects(base)["TrainJob"]["spec"]["runtimeRef"]["name"] == "torch-distributed"
    with_value = {**base, "nodeLossTolerationSeconds": 10}
    assert objects(with_value)["TrainJob"]["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "demo-pytorchjob"}
    assert pods(with_value)["node"]["tolerations"] == node_loss(10)


@pytest.mark.parametrize("values, field, key", [
    ({"tolerations": [{"key": "a", "operator": "Exists"}, {**UNREACHABLE, "tolerationSeconds": 600}]},
     "tolerations[1]", "node.kubernetes.io/unreachable"),
    ({"master": {"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]}},
     "master.tolerations[0]", "node.kubernetes.io/not-ready"),
    ({"worker": {"tolerations": [NOT_READY]}}, "worker.tolerations[0]", "node.kubernetes.io/not-ready"),
    ({"target": "v2", "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Equal", "value": "",
                                       "effect": "NoExecute"}]}, "tolerations[0]", "node.kubernetes.io/unreachable"),
])
def test_a_toleration_of_ones_own_for_either_key_is_refused_naming_it(values, field, key):
    """Kubernetes would take the shorter of the two deadlines, so neither would say what happens."""
    with pytest.raises(UserError) as refused:
        objects({"nodeLossTolerationSeconds": 30, **values})
    (finding,) = refused.value.findings
    assert finding.path == field
    assert f"tolerates {key}, whose NoExecute deadline nodeLossTolerationSeconds (30) sets" in finding.message
    assert "drop this toleration, or leave nodeLossTolerationSeconds unset" in finding.message


def test_the_same_tolerations_without_the_value_are_the_users_own():
    mine = [{**UNREACHABLE, "tolerationSeconds": 600}]
    assert pods({"tolerations": mine})["Master"]["tolerations"] == mine


@pytest.mark.parametrize("toleration", [
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"},  # another effect
    {"operator": "Exists"},  # every taint: Kubernetes still evicts at the shortest tolerationSeconds
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoExecute"},
])
def test_tolerations_of_other_taints_stay_beside_the_value(toleration):
    assert pods({"nodeLossTolerationSeconds": 30, "tolerations": [toleration]})["Master"]["tolerations"] == [
        toleration, *node_loss(30)]


@pytest.mark.parametrize("value, message", [
    (-1, "must be at least 0"),
    ("300", "must be an integer or null"),
    (1.5, "must be an integer or null"),
])
def test_a_bad_value_is_refused_by_the_schema_naming_the_field(value, message):
    from generator import kinds
    from generator.job import validation

    checked = validation.check_values({"nodeLossTolerationSeconds": value}, kinds.PYTORCHJOB)
    (finding,) = checked.findings
    assert finding.path == "nodeLossTolerationSeconds" and finding.value == value
    assert message in finding.message and finding.hint
    with pytest.raises(UserError) as refused:  # and Helm's own schema check, for helm install
        objects({"nodeLossTolerationSeconds": value})
    assert refused.value.findings[0].path == "nodeLossTolerationSeconds"
