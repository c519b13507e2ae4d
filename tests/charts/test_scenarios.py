"""Every scenario of both charts renders objects Kubernetes and training-operator v1.9 would
admit, and matches its reviewed golden snapshot."""
import pytest

from tests.support import kube, scenarios

CASES = scenarios.all_cases()
IDS = [f"{c}/{n}" for c, n in CASES]


def test_every_documented_scenario_exists():
    assert {"cpu-default", "gpu-nccl", "master-only", "elastic", "pvc-created", "pvc-existing",
            "per-role", "secret-env", "kueue"} <= set(scenarios.names("pytorchjob"))
    assert {"defaults", "tencent", "existing-namespace", "ha", "watched-namespace", "gang",
            "no-crds"} <= set(scenarios.names("pytorch-operator"))


@pytest.mark.parametrize("chart, name", CASES, ids=IDS)
def test_scenario_objects_are_admitted(chart, name):
    objects = scenarios.render_objects(chart, name)
    assert objects
    for obj in objects:
        assert kube.problems(obj) == [], f"{chart}/{name}: {obj['kind']} would be rejected"


@pytest.mark.parametrize("chart, name", CASES, ids=IDS)
def test_scenario_matches_golden_snapshot(chart, name):
    golden = scenarios.golden_path(chart, name)
    assert golden.exists(), f"no snapshot for {chart}/{name}: run `make golden` and review it"
    assert scenarios.render_stream(chart, name) == golden.read_text(), \
        f"{chart}/{name} renders differently from {golden.name}: run `make golden` and review the diff"


def test_no_stale_golden_snapshots():
    on_disk = sorted((p.parent.name, p.stem) for p in scenarios.GOLDEN.glob("*/*.yaml"))
    assert on_disk == sorted(CASES)


YAMLLINT = ("{extends: default, rules: {line-length: {max: 160}, document-start: disable, "
            "indentation: {indent-sequences: whatever}, truthy: {check-keys: false}}}")


def test_values_files_and_rendered_manifests_are_clean_yaml():
    import subprocess
    import sys
    from pathlib import Path

    from generator import paths

    targets = [str(p) for p in (paths.JOB_CHART / "values.yaml", paths.OPERATOR_CHART / "values.yaml")]
    targets.append(str(scenarios.GOLDEN))
    yamllint = Path(sys.executable).parent / "yamllint"
    proc = subprocess.run([str(yamllint), "-f", "parsable", "-d", YAMLLINT, *targets], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    bad = subprocess.run([str(yamllint), "-d", YAMLLINT, "-"], input="a: 1\na: 2\n", capture_output=True, text=True)
    assert bad.returncode != 0 and "duplication of key" in bad.stdout  # the linter does catch problems
