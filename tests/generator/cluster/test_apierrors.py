"""What the user reads when the API server could not call an admission webhook, for the failures the
local cluster cannot be made to show (a bad certificate, a slow webhook); the unreachable Service is
shown on the real API server in tests/e2e/test_cluster_commands.py."""
from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from generator.cluster import apierrors
from generator.cluster.client import Cluster

CLUSTER = Cluster(None, None, "ml", "https://cluster.example")
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
    down = apierrors.webhook_down(exc)
    assert down == apierrors.WebhookDown("validator.pytorchjob.training-operator.kubeflow.org", reason,
                                   "training-operator", "kubeflow")
    assert down.transient is transient
    text = apierrors.explain(exc, CLUSTER, "apply", "pytorchjobs", "mnist").describe()
    assert text.startswith("the API server could not call the admission webhook "
                           f"validator.pytorchjob.training-operator.kubeflow.org for PyTorchJob mnist ({reason}): ")
    assert text.endswith("check the operator that serves it (kubectl get pods,endpoints -n kubeflow), then run the "
                         "command again")


def test_a_webhook_given_by_url_is_named_without_a_service():
    exc = refused('failed calling webhook "policy.example.com": failed to call webhook: '
                  'Post "https://policy.example.com/validate?timeout=10s": dial tcp: lookup policy.example.com: no such host')
    assert apierrors.webhook_down(exc) == apierrors.WebhookDown("policy.example.com", "dial tcp: lookup policy.example.com: no such host")
    text = apierrors.explain(exc, CLUSTER, "apply", "pytorchjobs", "mnist").describe()
    assert "the API server cannot reach the server it names" in text


def test_a_webhook_that_answered_no_is_a_refusal_not_an_outage():
    exc = ApiException(status=400, reason="Bad Request")
    exc.body = json.dumps({"message": 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied '
                                      "the request: spec.pytorchReplicaSpecs: Forbidden: bad"})
    assert apierrors.webhook_down(exc) is None
    assert "rejected PyTorchJob mnist: spec.pytorchReplicaSpecs" in apierrors.explain(exc, CLUSTER, "apply", "pytorchjobs",
                                                                                 "mnist").describe()


@pytest.mark.parametrize(("resource", "said"), [
    ("pytorchjobs", "PyTorchJob mnist not found"), ("trainjobs", "TrainJob mnist not found"),
    ("trainingruntimes", "TrainingRuntime mnist not found"), ("clustertrainingruntimes", "ClusterTrainingRuntime mnist not found"),
    ("pods", "pod mnist not found"),
])
def test_an_object_that_is_not_there_is_named_by_its_kind(resource, said):
    exc = ApiException(status=404, reason="Not Found")
    exc.body = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound", "details": {"name": "mnist"}})
    assert apierrors.explain(exc, CLUSTER, "get", resource, "mnist").describe().startswith(said + " in namespace ml")
