"""Values and manifests are read as Helm, kubectl and the API server read them (go-yaml v2 under
sigs.k8s.io/yaml), not by PyYAML's YAML 1.1 rules, and what Helm would misread in silence is
refused with the line and the fix. tests/charts/test_helm_reads_values.py runs the same cases
through the helm CLI."""
from __future__ import annotations

import pytest

from generator.errors import UserError
from generator.job import goyaml, values_io
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
    # what Go cannot parse into an int64, a uint64 or a finite float64 stays the text, as in Helm
    ("0o", "0o"), ("-0O", "-0O"), ("0b2", "0b2"), ("1e999", "1e999"), ("9" * 5000, "9" * 5000),
    ("0x" + "f" * 16, 2 ** 64 - 1), ("0x" + "f" * 17, "0x" + "f" * 17), ("-9223372036854775809", -(2 ** 63)),
    ("1_0.5", 10.5), (".5_0", 0.5), (".5__0", ".5__0"),  # Go's ParseFloat takes `_` between digits after a "."
    ("=", "="), ("2001-12-14 21:59:43.10 -5", "2001-12-14 21:59:43.10 -5"), ("2001-12-14t21:59:43.10-05:00",
                                                                            "2001-12-14t21:59:43.10-05:00"),
])
def test_a_plain_scalar_is_read_as_helm_reads_it(plain, read):
    value = goyaml.load_yaml(f"key: {plain}\n")["key"]
    assert value == read and type(value) is type(read)
    assert _alike(value, _helm_reads(f"key: {plain}\n")["key"])


def _helm_reads(text: str):
    """Helm's own reading of a values file (`helm template -f`), by the Helm SDK in-process."""
    import helm_python

    return helm_python.values_from_yaml(text)


def _alike(ours, helms) -> bool:
    """The same value, where Helm holds every number as a float64 (so a large int differs in its
    last digits), nothing else."""
    if type(helms) in (int, float) and type(ours) in (int, float):
        return float(ours) == float(helms)
    if isinstance(helms, dict) and isinstance(ours, dict):
        return helms.keys() == ours.keys() and all(_alike(ours[k], helms[k]) for k in helms)
    if isinstance(helms, list) and isinstance(ours, list):
        return len(helms) == len(ours) and all(map(_alike, ours, helms))
    return type(ours) is type(helms) and ours == helms


@pytest.mark.parametrize(("tagged", "read"), [
    ("!!timestamp 2001-12-14", "2001-12-14"), ("!!timestamp 0000-2-29  1:2:3.5", "0000-2-29  1:2:3.5"),  # Go's year 0
    ("!!binary aGVsbG8=", "hello"), ("!!binary |\n  aGVs\n  bG8=", "hello"),
    ("!!set {a, b}", {"a": None, "b": None}), ("!!omap [{a: 1}, {b: 2}]", [{"a": 1}, {"b": 2}]),
    ("!!str 3", "3"), ("!!str", ""), ("!!int 0x10", 16), ("!!float 3", 3.0), ("!!bool yes", True), ("!!null ~", None),
    ("!foo bar", "bar"), ("!!map text", "text"), ("!!str {a: 1}", {"a": 1}),
])
def test_a_tagged_value_is_read_as_helm_reads_it(tagged, read):
    value = goyaml.load_yaml(f"key: {tagged}\n")["key"]
    assert value == read and type(value) is type(read)
    assert _alike(value, _helm_reads(f"key: {tagged}\n")["key"])


def test_merge_keys_still_merge():
    assert goyaml.load_yaml("base: &b {x: 1, y2: 2}\nd:\n  <<: *b\n  x: 3\n")["d"] == {"x": 3, "y2": 2}


@pytest.mark.parametrize(("text", "read"), [
    ("d:\n  <<: [{x: 1, w: 1}, {x: 2, z: 2}]\n  w: 3\n", {"x": 1, "w": 3, "z": 2}),  # of a list the earlier wins
    ("d:\n  <<: [{x: 1}, {x: 2, z: 2}]\n  <<: {w: 4}\n", {"x": 1, "w": 4, "z": 2}),
    ('d: {"<<": {x: 1}}\n', {"<<": {"x": 1}}),  # quoted, a key like any other
    ("d: {!!merge <<: {x: 1}}\n", {"x": 1}),
])
def test_merges_apply_in_order_as_helm_applies_them(text, read):
    assert goyaml.load_yaml(text)["d"] == read == _helm_reads(text)["d"]


def test_a_merge_after_a_key_it_would_override_is_refused_with_its_line(tmp_path):
    message = _refusal(tmp_path, "image:\n  repository: ghcr.io/pytorchjob-kit/trainer\n"
                                 "  <<: {repository: example.com/other}\n")
    assert ("line 3: the `<<` merge on line 3 would override key 'repository', set before it on line 2: Helm takes "
            "the merged value, YAML's merge rule (and the file as it reads) the one set first") in message
    assert "move `<<:` above the keys written beside it" in message
    message = _refusal(tmp_path, "d:\n  <<: {x: 1}\n  <<: {x: 2}\n")
    assert "line 3: the `<<` merge on line 3 would override key 'x', set before it on line 2" in message
    assert _helm_reads("d:\n  x: 1\n  <<: {x: 2}\n")["d"] == {"x": 2}  # what it would have become


REFUSED = object()  # Helm refuses the file too


@pytest.mark.parametrize(("text", "problem", "helm_reads"), [
    ("a: &a [1, *a]\n", "line 1: the anchor on line 1 is used inside its own value, which never ends", REFUSED),
    ("a:\n  b: &b\n    <<: *b\n", "line 2: the anchor on line 2 is used inside its own value", REFUSED),
    ("a: {<<: 1}\n", "line 1: `<<` needs a mapping or a list of mappings as its value", REFUSED),
    ("a: !!int x\n", "line 1: 'x' is not a !!int (Helm reads it as !!str and refuses the tag)", REFUSED),
    ("a: !!timestamp 2001-02-29\n", "line 1: '2001-02-29' is not a !!timestamp (Helm reads it as !!str", REFUSED),
    ("a: !!float 1e999\n", "line 1: '1e999' is not a !!float (Helm reads it as !!str and refuses the tag)", REFUSED),
    ("a:\n  - !!binary '@@'\n", "line 2: the !!binary value is not valid base64, which Helm refuses", REFUSED),
    ("a: !!binary //79\n", "line 1: the !!binary value decodes to bytes that are not UTF-8 text", "\ufffd" * 3),
    ("a: ! 3\n", "line 1: the tag `!` makes Helm read '3' as text, where other readers take it as written plain", "3"),
])
def test_what_helm_refuses_or_would_misread_is_refused_with_its_line(tmp_path, problem, text, helm_reads):
    import helm_python

    assert problem in _refusal(tmp_path, text)
    if helm_reads is REFUSED:
        with pytest.raises(helm_python.HelmError):
            _helm_reads(text)
    else:
        assert _helm_reads(text)["a"] == helm_reads


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
    assert goyaml.load_yaml('nodeSelector:\n  "n": gpu\n') == {"nodeSelector": {"n": "gpu"}}


def test_an_infinite_number_is_refused(tmp_path):
    assert "line 1: .inf is not a number JSON can hold" in _refusal(tmp_path, "port: .inf\n")


def test_validate_names_the_field_when_helm_would_read_text(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("topology:\n  workers: 1:30\n")
    code, out, err = run("validate", str(path))
    assert code == 1
    assert "topology.workers" in out + err and "1:30" in out + err


def _validated_env(tmp_path, value: str) -> str:
    """The env value `validate` passes and `run` and `submit` hand on: values rendered by the chart,
    the output read back."""
    from generator.kinds import source

    path = tmp_path / "values.yaml"
    path.write_text(f"env:\n  - name: X\n    value: {value}\n")
    code, out, err = run("validate", str(path))
    assert code == 0, out + err
    job = next(o for o in source.read(str(path), "r", "default").objects if o["kind"] == "PyTorchJob")
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"][-1]["value"]


@pytest.mark.parametrize("plain", ["0o", "-0O", "9" * 5000, "1e999", "0x" + "f" * 17, "=", "2001-12-14 21:59:43.10 -5"])
def test_text_helm_keeps_as_a_string_passes_validate_and_comes_back_from_the_chart_the_same(tmp_path, plain):
    assert _validated_env(tmp_path, plain) == plain


def test_a_tagged_value_passes_validate_as_helm_reads_it(tmp_path):
    assert _validated_env(tmp_path, "!!binary aGVsbG8=") == "hello"
    assert _validated_env(tmp_path, "!!timestamp 2001-12-14") == "2001-12-14"


def test_a_value_yaml_1_1_would_misread_reaches_the_process_as_written(tmp_path):
    """The chart renders these plain (`value: 2001-12-14 21:59:43.10 -5`, `- =`); read back by YAML
    1.1 they were a datetime and its value tag."""
    path = tmp_path / "values.yaml"
    path.write_text("topology:\n  workers: 0\n"
                    "command: [python, -c, 'import os, sys; print(repr(os.environ[\"WHEN\"]), sys.argv[1:])']\n"
                    "args: ['=']\nenv:\n  - name: WHEN\n    value: 2001-12-14 21:59:43.10 -5\n")
    code, out, err = run("run", str(path), "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    assert "master-0 | '2001-12-14 21:59:43.10 -5' ['--backend', 'gloo', '=']" in out


def test_a_file_that_is_not_utf8_is_refused_with_the_byte(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_bytes("env: [{name: X, value: café}]\n".encode("latin-1"))
    code, _, err = run("validate", str(path))
    assert code == 1 and "is not UTF-8 text (byte 26: b'\\xe9'); save it as UTF-8" in err


def test_what_the_generator_writes_helm_reads_back_as_the_same_text():
    """`generator values`, `import` and `convert` write with dump: a string go-yaml v2 would take for
    a boolean or a number (keys too) is quoted, as PyYAML already quotes YAML 1.1's."""
    import helm_python

    texts = ["y", "N", "0o10", "08", "1e3", "0x1F", "1_0.5", "<<", "=", "~", "", "1:30", "2001-12-14", "0o", "1e999"]
    data = {"env": [{"name": "X", "value": text} for text in texts], "nodeSelector": dict.fromkeys(texts, "k")}
    written = values_io.dump(data)
    assert goyaml.load_yaml(written) == data
    assert helm_python.values_from_yaml(written) == data


@pytest.mark.skipif(not __import__("yaml").__with_libyaml__, reason="this PyYAML was built without libyaml")
def test_values_are_parsed_by_libyaml_where_pyyaml_has_it():
    """The C parser reads a chart's values in a millisecond where PyYAML's own takes ten; every
    command reads several files, so missing it costs each command tens of milliseconds."""
    import yaml.cyaml

    assert issubclass(goyaml.Loader, yaml.cyaml.CParser)
