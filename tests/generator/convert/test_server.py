"""`convert --server`: the cluster's admission (a server-side dry run) refuses a conversion by object;
a TrainJob whose own runtime the dry run could not create is told, not refused."""
import pytest

from generator.cluster import client as api
from generator.convert import server
from generator.errors import UserError
from tests.support import MANIFESTS, conversions

CLUSTER = api.Cluster(None, None, "ml", "https://cluster.example")


@pytest.fixture
def calls(monkeypatch):
    """The API calls server.check makes, answered as each test says."""
    made = {"applied": [], "runtimes": set(), "deny": {}}

    def get_custom(cluster, group, version, plural, name):
        return {"metadata": {"name": name}} if name in made["runtimes"] else None

    def apply_custom(cluster, obj, plural, dry_run=False):
        assert dry_run, "a conversion is only ever dry-run"
        made["applied"].append((cluster.namespace, obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] in made["deny"]:
            raise UserError(made["deny"][obj["kind"]])
        return obj

    monkeypatch.setattr(api, "get_custom", get_custom)
    monkeypatch.setattr(api, "apply_custom", apply_custom)
    monkeypatch.setattr(api, "apply_job", lambda c, job, dry_run, kind: apply_custom(c, job, kind.plural, dry_run))
    return made


def converted():
    (done,) = conversions.converted(MANIFESTS / "tencent-nccl.yaml")
    return done


def test_an_admitted_conversion_is_kept_and_applied_runtime_first_in_its_own_namespace(calls):
    calls["runtimes"].add("tke-nccl-resnet")
    done = converted()
    server.check(CLUSTER, done)
    assert done.objects and calls["applied"] == [("ai-training", "TrainingRuntime", "tke-nccl-resnet"),
                                                 ("ai-training", "TrainJob", "tke-nccl-resnet")]
    assert "admitted it in a dry run" in done.notes[-1]


def test_a_webhook_refusal_refuses_the_conversion_by_object(calls):
    calls["deny"]["TrainJob"] = "the API server rejected TrainJob tke-nccl-resnet: spec.trainer.numNodes: Invalid value"
    done = converted()
    server.check(CLUSTER, done)
    assert done.objects == [] and done.problems[0].path == "TrainJob/tke-nccl-resnet"
    assert "numNodes" in done.problems[0].message


def test_a_runtime_the_dry_run_could_not_create_is_a_note_not_a_refusal(calls):
    calls["deny"]["TrainJob"] = ("the API server rejected TrainJob tke-nccl-resnet: spec.runtimeRef: Invalid value: "
                                 "specified trainingRuntime must be created before the TrainJob is created")
    done = converted()
    server.check(CLUSTER, done)
    assert done.objects and "a dry run does not create" in done.notes[-1]
