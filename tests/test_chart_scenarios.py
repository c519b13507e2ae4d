"""Every scenario renders objects Kubernetes and training-operator v1.9 would admit,
and matches its reviewed golden snapshot."""
import pytest

from tests import kube, scenarios

NAMES = scenarios.names()


def test_every_documented_scenario_exists():
    assert {"cpu-default", "gpu-nccl", "master-only", "elastic", "pvc-created", "pvc-existing",
            "per-role", "secret-env", "kueue"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_objects_are_admitted(name):
    objects = scenarios.render_objects(name)
    assert any(o["kind"] == "PyTorchJob" for o in objects)
    for obj in objects:
        assert kube.problems(obj) == [], f"{name}: {obj['kind']} would be rejected"


@pytest.mark.parametrize("name", NAMES)
def test_scenario_matches_golden_snapshot(name):
    golden = scenarios.GOLDEN / f"{name}.yaml"
    assert golden.exists(), f"no snapshot for {name}: run `make golden` and review it"
    assert scenarios.render_stream(name) == golden.read_text(), \
        f"{name} renders differently from tests/golden/{name}.yaml: run `make golden` and review the diff"


def test_no_stale_golden_snapshots():
    assert sorted(p.stem for p in scenarios.GOLDEN.glob("*.yaml")) == NAMES
