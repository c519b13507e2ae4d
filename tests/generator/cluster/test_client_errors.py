"""What the user reads when the API server could not call an admission webhook, for the failures the
local cluster cannot be made to show (a bad certificate, a slow webhook); the unreachable Service is
shown on the real API server in tests/e2e/test_cluster_commands.py."""
from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from generator.cluster import client as api

CLUSTER = api.Cluster(None, None, "ml", "https://cluster.example")
URL = 'Post "https://training-operator.kubeflow.svc:443/validate-kubeflow-org-v1-pytorchjob?timeout=10s": '


def refused(message: str) -> ApiException:
    exc = ApiException(status=500, reason="Internal Server Error")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "InternalError", "code": 500,
                           "message": f"Internal error occurred: {message}"})
    return exc


@pytest.mark.parametrize(("said", "reason", "transient"), [
    ("x509: certificate signed by unknown authority", "x509: certificate signed by unknown authority", False),
    ("context deadline exceeded", "context deadline exceeded", False),
    ("dial tcp 10.96.0.12:443: connect: connection refused", "dial tcp 10.96.0.12:443: connect: connection refused", True),
])
def test_a_webhook_the_server_could_not_call_is_named_with_its_service_and_reason(said, reason, transient):
    exc = refused(f'failed calling webhook "validator.pytorchjob.training-operator.kubeflow.org": '
                  f"failed to call webhook: {URL}{said}")
    down = api.webhook_down(exc)
    assert down == api.WebhookDown("validator.pytorchjob.training-operator.kubeflow.org", reason,
                                   "training-operator", "kubeflow")
    assert down.transient is transient
    text = api.explain(exc, CLUSTER, "apply", "pytorchjobs", "mnist").describe()
    assert text.startswith("the API server could not call the admission webhook "
                           f"validator.pytorchjob.training-operator.kubeflow.org for PyTorchJob mnist ({reason}): ")
    assert text.endswith("check the operator that serves it (kubectl get pods,endpoints -n kubeflow), then run the "
                         "command again")


def test_a_webhook_given_by_url_is_named_without_a_service():
    exc = refused('failed calling webhook "policy.example.com": failed to call webhook: '
                  'Post "https://policy.example.com/validate?timeout=10s": dial tcp: lookup policy.example.com: no such host')
    assert api.webhook_down(exc) == api.WebhookDown("policy.example.com", "dial tcp: lookup policy.example.com: no such host")
    text = api.explain(exc, CLUSTER, "apply", "pytorchjobs", "mnist").describe()
    assert "the API server cannot reach the server it names" in text


def test_a_webhook_that_answered_no_is_a_refusal_not_an_outage():
    exc = ApiException(status=400, reason="Bad Request")
    exc.body = json.dumps({"message": 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied '
                                      "the request: spec.pytorchReplicaSpecs: Forbidden: bad"})
    assert api.webhook_down(exc) is None
    assert "rejected PyTorchJob mnist: spec.pytorchReplicaSpecs" in api.explain(exc, CLUSTER, "apply", "pytorchjobs",
                                                                                 "mnist").describe()


def test_only_an_outage_is_asked_again_and_for_no_longer_than_the_request_timeout(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(api.time, "sleep", slept.append)
    clock = iter(range(0, 1000))
    monkeypatch.setattr(api.time, "monotonic", lambda: next(clock) * 0.1)
    told: list[str] = []
    cluster = api.Cluster(None, None, "ml", "https://cluster.example", request_timeout=3, on_wait=told.append)
    calls = []

    def down(**_):
        calls.append(1)
        raise refused(f'failed calling webhook "w.example": failed to call webhook: {URL}no endpoints available for '
                      'service "training-operator"')

    with pytest.raises(api.UserError, match=r"still after \ds\): its Service training-operator in namespace kubeflow"):
        api.call(cluster, "apply", "pytorchjobs", "mnist", down)
    assert told == ['waiting up to 3s for the admission webhook w.example (no endpoints available for service '
                    '"training-operator")']
    assert 3 < len(calls) < 15 and all(s <= 2.0 for s in slept)

    denied = []

    def no(**_):
        denied.append(1)
        raise refused('failed calling webhook "w.example": failed to call webhook: x509: certificate has expired')

    with pytest.raises(api.UserError, match=r"x509: certificate has expired\): "):
        api.call(cluster, "apply", "pytorchjobs", "mnist", no)
    assert denied == [1]
