"""Each cap on hostile YAML, tested on both sides of its bound: a cap moved a thousand-fold, or
switched off, fails here whatever its message says."""
import pytest

from generator.errors import UserError
from generator.job import values_io


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
    assert _load(tmp_path, _nested(values_io.MAX_DEPTH))
    with pytest.raises(UserError, match=f"nests more than {values_io.MAX_DEPTH} levels deep"):
        _load(tmp_path, _nested(values_io.MAX_DEPTH + 1))


def test_far_deeper_nesting_than_the_parser_allows_gets_the_same_refusal(tmp_path):
    with pytest.raises(UserError, match=f"nests more than {values_io.MAX_DEPTH} levels deep \\(line 1\\)"):
        _load(tmp_path, _nested(30_000))


def test_aliases_expanding_to_the_cap_load_and_one_node_more_is_refused(tmp_path):
    assert _load(tmp_path, _aliases(values_io.MAX_NODES))
    with pytest.raises(UserError, match=f"expands to more than {values_io.MAX_NODES} YAML nodes"):
        _load(tmp_path, _aliases(values_io.MAX_NODES + 1))
