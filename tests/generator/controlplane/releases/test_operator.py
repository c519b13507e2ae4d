"""charts/pytorch-operator as `cluster up` installs it: the release goes where the user's values
put the operator's Deployment, which is what its readiness wait then looks for."""
from __future__ import annotations

from generator.controlplane.releases import operator


def test_the_release_is_where_the_chart_renders_the_operator_with_the_defaults():
    release, create_namespace = operator.release({})
    assert (release.name, release.namespace, release.deployments) == (
        "training-operator", "kubeflow", ("training-operator-pytorch-operator",))
    assert create_namespace  # the chart makes no Namespace: helm does
    assert release.installed().deployment == "training-operator-pytorch-operator"


def test_the_users_values_move_the_deployment_and_a_namespace_the_chart_makes_is_not_made_twice():
    release, create_namespace = operator.release({"fullnameOverride": "ops", "namespace": {"create": True, "name": "ml"}})
    assert (release.namespace, release.deployments) == ("ml", ("ops",))
    assert not create_namespace
    assert release.probes == operator.RELEASE.probes and release.values_file == "operator-values.yaml"
