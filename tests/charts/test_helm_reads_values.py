"""`generator validate` and the helm CLI read the same values file the same way: where one
refuses the other does, where both accept they render the same objects, and where Helm would
quietly misread a file (a key given twice, a key it takes for a boolean) the generator refuses it
and says why, which this shows Helm doing."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support import ROOT

pytestmark = pytest.mark.e2e  # needs the Go-built helm, as the rest of `make e2e`

CHART = str(ROOT / "charts" / "pytorchjob")


def both(helm: str, tmp_path, text: str):
    path = tmp_path / "values.yaml"
    path.write_text(text)
    ours = subprocess.run([sys.executable, "-m", "generator", "render", str(path), "--release", "r", "-o",
                           str(tmp_path / "ours.yaml")], cwd=ROOT, capture_output=True, text=True)
    theirs = subprocess.run([helm, "template", "r", CHART, "-f", str(path)], capture_output=True, text=True)
    return ours, theirs


def objects(text: str) -> list[dict]:
    return sorted((d for d in yaml.safe_load_all(text) if d), key=lambda o: (o["kind"], o["metadata"]["name"]))


def job(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "PyTorchJob")


@pytest.mark.parametrize(("text", "check"), [
    ("topology:\n  workers: 010\n", lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 8),
    ("topology:\n  workers: 0x2\n", lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2),
    ("output:\n  enabled: y\n", lambda j: "volumes" in j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]),
    ("port: 2_3456\n", lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
     ["ports"][0]["containerPort"] == 23456),
])
def test_what_both_accept_renders_the_same(helm, tmp_path, text, check):
    ours, theirs = both(helm, tmp_path, text)
    assert ours.returncode == 0, ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    rendered = objects((tmp_path / "ours.yaml").read_text())
    assert rendered == objects(theirs.stdout)
    assert check(job(rendered))


def test_what_helm_refuses_validate_refuses(helm, tmp_path):
    ours, theirs = both(helm, tmp_path, "topology:\n  workers: 1:30\n")  # YAML 1.1 would make it 90 Workers
    assert theirs.returncode != 0 and "/topology/workers" in theirs.stderr
    assert ours.returncode == 1 and "topology.workers: must be an integer (got '1:30')" in ours.stderr


def test_a_key_given_twice_helm_resolves_in_silence_and_validate_refuses(helm, tmp_path):
    ours, theirs = both(helm, tmp_path, "job:\n  name: first\ntopology:\n  workers: 1\njob:\n  name: second\n")
    assert theirs.returncode == 0 and job(objects(theirs.stdout))["metadata"]["name"] == "second"
    assert ours.returncode == 1 and "key 'job' is given twice, on lines 1 and 5" in ours.stderr


def test_a_key_helm_takes_for_a_boolean_validate_refuses(helm, tmp_path):
    ours, theirs = both(helm, tmp_path, "nodeSelector:\n  n: gpu\n")
    selector = job(objects(theirs.stdout))["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"]
    assert selector == {"false": "gpu"}
    assert ours.returncode == 1 and 'quote it: "n":' in ours.stderr
