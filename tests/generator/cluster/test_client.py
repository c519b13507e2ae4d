"""One API call: a write refused only because an admission webhook's server is (re)starting is
asked again, for no longer than the request timeout; any other refusal is told at once."""
from __future__ import annotations

import pytest

from generator.cluster import client as api
from tests.generator.cluster.test_apierrors import URL, refused


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
