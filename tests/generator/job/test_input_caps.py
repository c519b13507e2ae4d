"""Each cap on hostile YAML, tested on both sides of its bound: a cap moved a thousand-fold, or
switched off, fails here whatever its message says."""
import os
import subprocess
import sys

import pytest

from generator.errors import UserError
from generator.job import input_caps, values_io
from tests.support import ROOT
from tests.support.cli_helpers import run


def _nested(depth: int) -> str:
    """A mapping whose innermost value sits `depth` mappings and sequences deep."""
    return "a: " + "[" * (depth - 1) + "x" + "]" * (depth - 1) + "\n"


def _aliases(nodes: int) -> str:
    """A document that expands to exactly `nodes` YAML nodes, almost all of them through aliases:
    9 nodes of frame, 5 per alias of the 4-item anchored list, 1 per plain item."""
    aliases, plain = divmod(nodes - 9, 5)
    return f"base: &b [x, x, x, x]\nmany: [{', '.join(['*b'] * aliases + ['y'] * plain)}]\n"


def _load(tmp_path, text: str):
    path = tmp_path / "values.yaml"
    path.write_text(text)
    return values_io.load_mapping(str(path))


def test_nesting_at_the_cap_loads_and_one_level_more_is_refused(tmp_path):
    assert _load(tmp_path, _nested(input_caps.MAX_DEPTH))
    with pytest.raises(UserError, match=f"nests more than {input_caps.MAX_DEPTH} levels deep"):
        _load(tmp_path, _nested(input_caps.MAX_DEPTH + 1))


def test_far_deeper_nesting_than_the_parser_allows_gets_the_same_refusal(tmp_path):
    with pytest.raises(UserError, match=f"nests more than {input_caps.MAX_DEPTH} levels deep \\(line 1\\)"):
        _load(tmp_path, _nested(30_000))


def test_aliases_expanding_to_the_cap_load_and_one_node_more_is_refused(tmp_path):
    assert _load(tmp_path, _aliases(input_caps.MAX_NODES))
    with pytest.raises(UserError, match=f"expands to more than {input_caps.MAX_NODES} YAML nodes"):
        _load(tmp_path, _aliases(input_caps.MAX_NODES + 1))


def _sized(size: int, filler: str = "x") -> str:
    """A comment line of exactly `size` bytes of UTF-8, filled with `filler` (one character)."""
    width = len(filler.encode())
    count, rest = divmod(size - 3, width)
    return "# " + filler * count + "x" * rest + "\n"


def test_a_file_of_the_api_servers_size_loads_and_one_byte_more_is_refused(tmp_path):
    assert _load(tmp_path, _sized(input_caps.MAX_BYTES)) == {}
    with pytest.raises(UserError, match=f"is {input_caps.MAX_BYTES + 1} bytes, more than the {input_caps.MAX_BYTES} "
                                        "the Kubernetes API server takes in one request"):
        _load(tmp_path, _sized(input_caps.MAX_BYTES + 1))


def test_the_size_is_counted_in_bytes_not_characters(tmp_path):
    text = _sized(input_caps.MAX_BYTES + 2, "é")  # two bytes each: about half the cap in characters
    assert len(text) < input_caps.MAX_BYTES < len(text.encode())
    with pytest.raises(UserError, match=f"is {input_caps.MAX_BYTES + 2} bytes, more than the {input_caps.MAX_BYTES}"):
        _load(tmp_path, text)


def test_an_endless_stream_is_refused_at_the_cap():
    with pytest.raises(UserError, match=f"/dev/zero: is larger than the {input_caps.MAX_BYTES} bytes the Kubernetes API server"):
        values_io.load_mapping("/dev/zero")


def test_stdin_is_read_no_further_than_the_cap():
    code, _, err = run("validate", "-", input=_sized(input_caps.MAX_BYTES + 1) + "topology: {workers: 1}\n")
    assert code == 1 and f"-: is larger than the {input_caps.MAX_BYTES} bytes the Kubernetes API server" in err


def test_a_huge_file_is_refused_without_being_read_into_memory(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as handle:
        handle.truncate(200 * 1024 * 1024)  # sparse: 200 MB that take no disk
    # A fresh interpreter, so the peak is this read's alone (the pytest worker's may be far higher).
    # VmHWM, not getrusage's maxrss: Linux carries maxrss over from the forking parent across exec.
    probe = ("import re, sys; from generator.job import values_io; from generator.errors import UserError\n"
             "try:\n    values_io.load_mapping(sys.argv[1])\nexcept UserError as exc:\n    print(exc)\n"
             "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)")
    proc = subprocess.run([sys.executable, "-c", probe, str(huge)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    message, peak_mib = proc.stdout.rsplit("\n", 2)[:2]
    assert f"is {200 * 1024 * 1024} bytes, more than the {input_caps.MAX_BYTES}" in message, proc.stderr
    assert int(peak_mib) < 150  # the interpreter and the cap; reading it whole took over 400
