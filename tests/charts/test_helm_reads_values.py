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


def _node(node):
    if isinstance(node, yaml.ScalarNode):
        return node.tag, node.value
    if isinstance(node, yaml.SequenceNode):
        return [_node(child) for child in node.value]
    return {key.value: _node(value) for key, value in node.value}


def nodes(text: str) -> list:
    """The rendered documents as YAML nodes, each scalar as (tag, text): composed, never built, so
    no reader's rules (ours included) stand between the two texts compared."""
    docs = [_node(d) for d in yaml.compose_all(text, Loader=yaml.SafeLoader) if d is not None]
    return sorted(docs, key=lambda d: (d["kind"][1], d["metadata"]["name"][1]))


def master(docs: list) -> dict:
    spec = next(d for d in docs if d["kind"][1] == "PyTorchJob")["spec"]
    return spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


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


@pytest.mark.parametrize(("value", "text"), [
    ("0o", "0o"), ("-0O", "-0O"), ("9" * 5000, "9" * 5000), ("1e999", "1e999"), ("0x" + "f" * 17, "0x" + "f" * 17),
    ("2001-12-14 21:59:43.10 -5", "2001-12-14 21:59:43.10 -5"), ("=", "="),
    ("!!binary aGVsbG8=", "hello"), ("!!timestamp 2001-12-14", "2001-12-14"), ("!!str 010", "010"),
])
def test_text_helm_keeps_as_a_string_renders_the_same(helm, tmp_path, value, text):
    ours, theirs = both(helm, tmp_path, f"env:\n  - name: X\n    value: {value}\n")
    assert ours.returncode == 0, ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    rendered = nodes((tmp_path / "ours.yaml").read_text())
    assert rendered == nodes(theirs.stdout)
    assert master(rendered)["env"][-1]["value"][1] == text


def test_args_of_an_equals_sign_render_the_same(helm, tmp_path):
    ours, theirs = both(helm, tmp_path, 'args: ["=", "a=b"]\n')
    assert ours.returncode == 0, ours.stderr
    rendered = nodes((tmp_path / "ours.yaml").read_text())
    assert rendered == nodes(theirs.stdout)
    assert [text for _tag, text in master(rendered)["args"]][-2:] == ["=", "a=b"]


@pytest.mark.parametrize("text", [
    "image:\n  <<: {repository: example.com/other, pullPolicy: Always}\n  repository: example.com/mine\n",
    "image:\n  <<: [{repository: example.com/mine}, {repository: example.com/other, pullPolicy: Always}]\n",
    "image:\n  <<: &m {repository: example.com/mine}\n  <<: {pullPolicy: Always}\n",
])
def test_merges_helm_and_validate_read_alike_render_the_same(helm, tmp_path, text):
    ours, theirs = both(helm, tmp_path, text)
    assert ours.returncode == 0, ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    rendered = nodes((tmp_path / "ours.yaml").read_text())
    assert rendered == nodes(theirs.stdout)
    assert master(rendered)["image"][1].startswith("example.com/mine:")
    assert master(rendered)["imagePullPolicy"][1] == "Always"


def test_a_merge_helm_lets_override_a_key_set_before_it_validate_refuses(helm, tmp_path):
    ours, theirs = both(helm, tmp_path, "image:\n  repository: ghcr.io/pytorchjob-kit/trainer\n"
                                        "  <<: {repository: example.com/other}\n")
    assert theirs.returncode == 0 and master(nodes(theirs.stdout))["image"][1].startswith("example.com/other:")
    assert ours.returncode == 1
    assert "line 3: the `<<` merge on line 3 would override key 'repository', set before it on line 2" in ours.stderr


@pytest.mark.parametrize(("text", "helm_says", "we_say"), [
    ("podLabels: &l {a: *l}\n", "anchor 'l' value contains itself",
     "line 1: the anchor on line 1 is used inside its own value"),
    ("env:\n  - name: X\n    value: !!int 0o\n", "cannot decode !!str `0o` as a !!int",
     "line 3: '0o' is not a !!int (Helm reads it as !!str and refuses the tag)"),
    ("nodeSelector: !!set {a, b}\n", "at '/nodeSelector/a': got null, want string",
     "nodeSelector.a: got null, want string"),
])
def test_what_helm_refuses_validate_refuses_with_the_line(helm, tmp_path, text, helm_says, we_say):
    ours, theirs = both(helm, tmp_path, text)
    assert theirs.returncode != 0 and helm_says in theirs.stderr
    assert ours.returncode == 1 and we_say in ours.stderr and "internal error" not in ours.stderr
