"""What a container's env becomes under `generator run`, by Kubernetes' rules."""
from __future__ import annotations

import pytest

from generator.container.env import ConfigError, ShellSources, container_env, expand, field, resource

POD = {"metadata": {"name": "job-worker-0", "namespace": "team", "uid": "u-1", "labels": {"app": "x", "tier": "db"},
                    "annotations": {"note": "hi"}},
       "spec": {"nodeName": "vm", "serviceAccountName": "trainer", "containers": [
           {"name": "pytorch", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
       "status": {"podIP": "192.0.2.2", "hostIP": "192.0.2.2", "podIPs": [{"ip": "192.0.2.2"}]}}


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)", "1"),
    ("x-$(A)-$(B)", "x-1-two"),
    ("$(MISSING)", "$(MISSING)"),  # undefined stays as written
    ("$$(A)", "$(A)"),  # escaped
    ("$$$(A)", "$1"),
    ("cost $5", "cost $5"),
    ("$(A", "$(A"),
    ("$(my.var):$(a-b):$(_c)", "dot:dash:under"),  # Kubernetes allows '.', '-' and '_' in env names
])
def test_expand_follows_kubernetes(text, expected):
    assert expand(text, {"A": "1", "B": "two", "my.var": "dot", "a-b": "dash", "_c": "under"}) == expected


def test_downward_api_fields():
    assert field(POD, "metadata.name") == "job-worker-0"
    assert field(POD, "metadata.namespace") == "team"
    assert field(POD, "spec.nodeName") == "vm"
    assert field(POD, "spec.serviceAccountName") == "trainer"
    assert field(POD, "status.podIP") == "192.0.2.2"
    assert field(POD, "status.podIPs") == "192.0.2.2"
    assert field(POD, "metadata.labels['tier']") == "db"
    assert field(POD, "metadata.labels") == 'app="x"\ntier="db"'
    with pytest.raises(ConfigError, match='fieldRef "spec.bogus" is not a field the downward API offers'):
        field(POD, "spec.bogus")


def test_resource_fields_in_the_divisors_units_rounded_up():
    ref = {"containerName": "pytorch"}
    assert resource(POD, {**ref, "resource": "requests.cpu", "divisor": "1m"}, {}) == "250"
    assert resource(POD, {**ref, "resource": "requests.cpu"}, {}) == "1"  # 0.25 core rounds up to 1
    assert resource(POD, {**ref, "resource": "limits.memory", "divisor": "1Mi"}, {}) == "2048"
    # No CPU limit: the node's allocatable stands in, as the kubelet does.
    assert resource(POD, {**ref, "resource": "limits.cpu"}, {"cpu": "8"}) == "8"


def test_env_in_order_each_value_expanded_against_what_came_before():
    container = {"name": "pytorch", "env": [
        {"name": "B", "value": "$(A)-b"},  # A comes later: not expanded
        {"name": "A", "value": "a"},
        {"name": "C", "value": "$(A)-$(BASE)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    env = container_env(POD, container, {"BASE": "base"}, sources=None, node_allocatable={})
    assert env == {"BASE": "base", "B": "$(A)-b", "A": "a", "C": "a-base", "POD": "job-worker-0"}


def test_under_run_secret_and_config_map_keys_come_from_the_shell_and_every_missing_one_is_told():


    sources = ShellSources("spec.x.containers[pytorch]", environ={"TOKEN": "from-shell"})
    container = {"name": "pytorch", "env": [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "AUTH", "value": "Bearer $(TOKEN)"},
        {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "site", "key": "region"}}},
        {"name": "SALT", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "salt"}}},
        {"name": "EXTRA", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "extra", "optional": True}}}]}
    env = container_env(POD, container, {}, sources, {})
    assert env == {"TOKEN": "from-shell", "AUTH": "Bearer from-shell"}
    assert [(f.path, f.value, f.hint) for f in sources.problems] == [
        ("spec.x.containers[pytorch].env[2]", "REGION", "export REGION=... in this shell to run locally"),
        ("spec.x.containers[pytorch].env[3]", "SALT", "export SALT=... in this shell to run locally")]
    assert "comes from ConfigMap site/region, which only a cluster has" in sources.problems[0].render()
