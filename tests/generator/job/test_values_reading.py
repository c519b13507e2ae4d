"""Values and manifests are read as Helm, kubectl and the API server read them (go-yaml v2 under
sigs.k8s.io/yaml), not by PyYAML's YAML 1.1 rules, and what Helm would misread in silence is
refused with the line and the fix. tests/charts/test_helm_reads_values.py runs the same cases
through the helm CLI."""
from __future__ import annotations

import pytest

from generator.errors import UserError
from generator.job import values_io
from tests.support.cli_helpers import run


@pytest.mark.parametrize(("plain", "read"), [
    ("1:30", "1:30"),  # YAML 1.1 base 60 would make it 90
    ("3:25:45", "3:25:45"),
    ("010", 8), ("0o10", 8), ("08", 8), ("0x1F", 31), ("0b101", 5), ("-0b11", -3), ("+12", 12), ("1_000", 1000),
    ("1e3", 1000.0), ("1.5", 1.5), (".5", 0.5), ("0", 0), ("-7", -7),
    ("y", True), ("Y", True), ("yes", True), ("on", True), ("n", False), ("off", False), ("NO", False),
    ("true", True), ("False", False),
    ("~", None), ("null", None), ("", None),
    ("2001-12-14", "2001-12-14"),  # a date stays text
    ('"010"', "010"), ("'y'", "y"), ("inf", "inf"), (".", "."), ("1.2.3", "1.2.3"), ("0x", "0x"),
])
def test_a_plain_scalar_is_read_as_helm_reads_it(plain, read):
    value = values_io.load_yaml(f"key: {plain}\n")["key"]
    assert value == read and type(value) is type(read)


def test_merge_keys_still_merge():
    assert values_io.load_yaml("base: &b {x: 1, y2: 2}\nd:\n  <<: *b\n  x: 3\n")["d"] == {"x": 3, "y2": 2}


def _refusal(tmp_path, text: str) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        values_io.load_mapping(str(path))
    return str(caught.value)


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    message = _refusal(tmp_path, "job:\n  name: a\ntopology:\n  workers: 2\njob:\n  name: b\n")
    assert "line 5: key 'job' is given twice, on lines 1 and 5" in message
    assert "keep one of them" in message


def test_a_key_helm_reads_as_a_boolean_is_refused_with_the_quoted_form(tmp_path):
    message = _refusal(tmp_path, "nodeSelector:\n  n: gpu\n")
    assert "line 2: key 'n' is read by Helm as the boolean false, not as the text 'n'" in message
    assert 'quote it: "n":' in message
    assert values_io.load_yaml('nodeSelector:\n  "n": gpu\n') == {"nodeSelector": {"n": "gpu"}}


def test_an_infinite_number_is_refused(tmp_path):
    assert "line 1: .inf is not a number JSON can hold" in _refusal(tmp_path, "port: .inf\n")


def test_a_file_larger_than_the_api_server_takes_is_refused_before_it_is_parsed(tmp_path):
    message = _refusal(tmp_path, "# " + "x" * values_io.MAX_BYTES + "\n")
    assert f"more than the {values_io.MAX_BYTES} the Kubernetes API server takes in one request" in message


def test_validate_names_the_field_when_helm_would_read_text(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("topology:\n  workers: 1:30\n")
    code, out, err = run("validate", str(path))
    assert code == 1
    assert "topology.workers" in out + err and "1:30" in out + err
