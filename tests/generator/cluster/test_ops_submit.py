"""`submit` of a TrainJob right after its own TrainingRuntime: Trainer's webhook reads runtimes from
its informer cache, so for a moment it can refuse the TrainJob as one whose runtime does not exist
(seen in CI), and in a dry run, which creates no runtime, it always does. The refusal the webhook
sends is replayed here through the client's own translation; tests/e2e/test_cluster_commands.py
shows the dry run on a real cluster."""
from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from generator import kinds
from generator.cluster import client as api
from generator.cluster import ops
from generator.errors import UserError

JOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "mnist"},
       "spec": {"runtimeRef": {"name": "mnist", "kind": "TrainingRuntime"}}}


def denied(message: str) -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                           "message": f'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the '
                                      f'request: {message}'})
    return exc


UNSEEN = ('spec.runtimeRef: Invalid value: {"name":"mnist"}: TrainingRuntime.trainer.kubeflow.org "mnist" not '
          'found: specified trainingRuntime must be created before the TrainJob is created')


class Custom:
    """The API server's answers to the TrainJob's apply, one per call."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), 0

    def patch_namespaced_custom_object(self, *args, **kwargs):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(ops.time, "sleep", lambda seconds: None)


def cluster(custom: Custom) -> api.Cluster:
    return api.Cluster(None, custom, "ml", "https://cluster.example")


def test_a_runtime_just_applied_but_not_yet_seen_by_the_webhook_is_waited_for():
    custom = Custom(denied(UNSEEN), denied(UNSEEN), {"metadata": {"name": "mnist", "resourceVersion": "7"}})
    applied = ops._apply_job(cluster(custom), JOB, False, kinds.TRAINJOB, True, [])
    assert (applied["metadata"]["resourceVersion"], custom.calls) == ("7", 3)


def test_a_runtime_this_submit_did_not_apply_is_reported_at_once():
    custom = Custom(denied(UNSEEN))
    with pytest.raises(UserError, match="specified trainingRuntime must be created before the TrainJob"):
        ops._apply_job(cluster(custom), JOB, False, kinds.TRAINJOB, False, [])
    assert custom.calls == 1


def test_any_other_refusal_is_reported_at_once():
    custom = Custom(denied("spec.trainer.numNodes: Invalid value: 0"))
    with pytest.raises(UserError, match="numNodes: Invalid value: 0"):
        ops._apply_job(cluster(custom), JOB, False, kinds.TRAINJOB, True, [])
    assert custom.calls == 1


def test_a_runtime_never_seen_is_reported_after_the_wait(monkeypatch):
    monkeypatch.setattr(ops, "RUNTIME_CACHE_SECONDS", 0.0)
    custom = Custom(denied(UNSEEN), denied(UNSEEN))
    with pytest.raises(UserError, match="must be created before the TrainJob is created"):
        ops._apply_job(cluster(custom), JOB, False, kinds.TRAINJOB, True, [])
    assert custom.calls == 1


def test_a_dry_run_says_what_the_webhook_could_not_check_and_asks_once():
    custom, notes = Custom(denied(UNSEEN)), []
    assert ops._apply_job(cluster(custom), JOB, True, kinds.TRAINJOB, True, notes) == {}
    assert notes == ["trainjob mnist: the API server accepted its schema; Trainer's webhook, which judges a TrainJob "
                     "against its runtime, could not, as a dry run creates no runtime (a real submit asks it)"]
    assert custom.calls == 1


def test_a_dry_run_of_a_job_without_a_runtime_of_its_own_is_refused():
    custom = Custom(denied(UNSEEN))
    with pytest.raises(UserError, match="must be created before the TrainJob is created"):
        ops._apply_job(cluster(custom), JOB, True, kinds.TRAINJOB, False, [])


class Server(Custom):
    """The API server as `submit` of a values file for --target v2 meets it: no job yet, the
    runtime applied, then the TrainJob's answers one per apply."""

    def __init__(self, *answers):
        super().__init__(*answers)
        self.applied: list[str] = []

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        exc = ApiException(status=404, reason="Not Found")
        exc.body = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound",
                               "details": {"name": name, "kind": plural}, "message": f'{plural} "{name}" not found'})
        raise exc

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, **kwargs):
        self.applied.append(plural)
        if plural != "trainjobs":
            return body
        return super().patch_namespaced_custom_object()


def test_submit_itself_waits_for_the_webhook_to_see_the_runtime_it_just_applied(tmp_path):
    """Not only its helper: `submit` of a TrainJob with its own runtime asks again while Trainer's
    webhook has not seen that runtime, and reports the job created."""
    values = tmp_path / "values.yaml"
    values.write_text("target: v2\njob:\n  name: mnist\n")
    server = Server(denied(UNSEEN), denied(UNSEEN), {"metadata": {"name": "mnist", "resourceVersion": "7"}})
    submitted = ops.submit(cluster(server), str(values), "mnist", None, False, False)
    assert (submitted.kind, submitted.verdict, submitted.name) == ("TrainJob", "created", "mnist")
    assert server.applied == ["trainingruntimes", "trainjobs", "trainjobs", "trainjobs"]
    assert "trainingruntime mnist applied" in submitted.notes
