"""YAML read as Helm reads a values file (sigs.k8s.io/yaml over go-yaml v2), not as PyYAML's YAML
1.1 rules would: plain scalars resolved Go's way, tags and `<<` merges taken as go-yaml takes them,
and what it would read otherwise than the file seems to say refused with its line (Refused)."""
from __future__ import annotations

import base64
import binascii
import math
import re

import yaml


class Refused(yaml.YAMLError):
    """What Helm would read differently from what the file seems to say, with where it is."""

    def __init__(self, problem: str, line: int, hint: str):
        super().__init__(problem)
        self.problem, self.line, self.hint = problem, line, hint


# Helm (sigs.k8s.io/yaml over go-yaml v2), kubectl and the API server read a plain scalar by these
# rules, not by PyYAML's YAML 1.1 ones: `1:30` stays a string (not 90), `010` and `0o10` are 8,
# `y`/`n` are booleans, `1e3` is a number, dates stay strings, and what Go cannot parse into an
# int64, a uint64 or a finite float64 (`0o`, `1e999`, a 17-digit hex) stays a string. Values are
# read their way so that what validate accepts is what `helm install -f` renders.
_BOOLS = {**dict.fromkeys("y Y yes Yes YES on On ON true True TRUE".split(), True),
          **dict.fromkeys("n N no No NO off Off OFF false False FALSE".split(), False)}
_NULLS = {"", "~", "null", "Null", "NULL"}
GO_PLAIN = "tag:pytorchjob-kit,2026:plain"  # a plain scalar, left for go_scalar to read
_INFINITE = {f"{sign}.{word}" for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")} | {".nan", ".NaN", ".NAN"}
_GO_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")  # go-yaml's yamlStyleFloat
# Go's ParseFloat on text that starts with ".": underscores only between digits, none removed first.
_GO_DOT_FLOAT = re.compile(r"^\.[0-9]+(_[0-9]+)*([eE][-+]?[0-9]+(_[0-9]+)*)?$")
# Go's ParseInt with base 0 (underscores already removed): 0x, 0o, 0b, a leading 0 for octal.
_GO_INT = re.compile(r"^([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
_GO_TIMESTAMP = re.compile(r"^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})"
                           r"(?:(?:[Tt]([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2}))"
                           r"|(?: +([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:\.[0-9]+)?))?$")
_TAG = "tag:yaml.org,2002:"


def _go_int(plain: str) -> int | None:
    """Go's ParseInt(plain, 0, 64), then ParseUint(plain, 0, 64): None where both fail."""
    match = _GO_INT.match(plain)
    if not match:
        return None
    sign, digits = match.groups()
    base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 8 if digits[0] == "0" else 10)
    if base == 10 and len(digits) > 20:  # past uint64, and past Python's own 4,300-digit cap on int()
        return None
    body = digits[2:] if base != 10 and digits[1:2].isalpha() else digits
    value = int(body or "0", base) * (-1 if sign == "-" else 1)
    if -(2 ** 63) <= value < 2 ** 63 or (not sign and value < 2 ** 64):
        return value
    return None


def _go_timestamp(text: str) -> bool:
    """Whether go-yaml v2's parseTimestamp takes the text (its four layouts, with Go's range checks;
    a space of the layout matches one or more)."""
    match = _GO_TIMESTAMP.match(text)
    if not match:
        return False
    year, month, day = (int(part) for part in match.groups()[:3])
    hour, minute, second = (int(part) for part in [part for part in match.groups()[3:] if part is not None] or [0, 0, 0])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)  # Go's calendar has a year 0, a leap year
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= month <= 12 and 1 <= day <= days[month - 1] and hour < 24 and minute < 60 and second < 60


def resolve(text: str) -> tuple[str, object]:
    """go-yaml v2's resolve() for a plain scalar: the tag it finds ("str", "int", "float", "bool",
    "null", "timestamp") and the value. A timestamp is kept as its text, as Helm keeps it."""
    if text in _BOOLS:
        return "bool", _BOOLS[text]
    if text in _NULLS:
        return "null", None
    if text in _INFINITE:
        return "float", float(text.lstrip("+").lower().replace(".", ""))
    if text[:1] == ".":
        if _GO_DOT_FLOAT.match(text):
            number = float(text)
            if math.isfinite(number):
                return "float", number
        return "str", text
    if text[:1] in "+-0123456789":
        if _go_timestamp(text):
            return "timestamp", text
        plain = text.replace("_", "")
        integer = _go_int(plain)
        if integer is not None:
            return "int", integer
        if _GO_FLOAT.match(plain):
            number = float(plain)  # out of float64's range Go fails and the text stays a string
            if math.isfinite(number):
                keep_int = number.is_integer() and "." not in plain and "e" not in plain.lower()
                return "float", int(number) if keep_int else number
    return "str", text


def go_scalar(text: str, line: int):
    """A plain (unquoted) scalar as go-yaml v2 resolves it."""
    _tag, value = resolve(text)
    if isinstance(value, float) and not math.isfinite(value):
        raise Refused(f"{text} is not a number JSON can hold, and Helm refuses it", line,
                      "write a finite number, or quote it to mean the string")
    return value


def _tagged_scalar(node, line: int):
    """A scalar with an explicit tag, as go-yaml v2 reads it: !!str as written, !!int, !!float,
    !!bool, !!null and !!timestamp only where the text is one, !!binary decoded, any other tag
    (!!set, !foo) ignored and the text kept."""
    tag, text = node.tag, node.value
    if tag == _TAG + "str":
        return text
    if tag == _TAG + "binary":
        try:
            data = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
            return data.decode("utf-8")
        except binascii.Error:
            raise Refused("the !!binary value is not valid base64, which Helm refuses", line,
                          "fix the base64 text, or drop !!binary to mean the text as written") from None
        except UnicodeDecodeError:
            raise Refused("the !!binary value decodes to bytes that are not UTF-8 text; Helm would put "
                          "U+FFFD in place of each bad byte", line,
                          "give the text itself, not binary data: values and manifests carry text") from None
    wanted = tag[len(_TAG):] if tag.startswith(_TAG) else ""
    if wanted not in ("int", "float", "bool", "null", "timestamp"):
        return text
    found, value = resolve(text)
    if found == wanted or (wanted == "float" and found == "int"):
        if wanted == "float":
            value = float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise Refused(f"{text} is not a number JSON can hold, and Helm refuses it", line,
                          "write a finite number, or quote it to mean the string")
        return value
    raise Refused(f"{text!r} is not a !!{wanted} (Helm reads it as !!{found} and refuses the tag)", line,
                  f"drop the !!{wanted} tag, or write a {wanted} value")


class _Resolver(yaml.resolver.BaseResolver):
    """Plain scalars get a tag of their own, resolved by go_scalar; quoted ones stay strings."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return _TAG + "merge" if value == "<<" else GO_PLAIN
        return super().resolve(kind, value, implicit)


def _is_merge(key_node) -> bool:
    """go-yaml v2's isMerge: the scalar `<<`, plain or tagged !!merge (a quoted "<<" is a key)."""
    return isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" and key_node.tag == _TAG + "merge"


class _Constructor(yaml.constructor.SafeConstructor):
    def construct_go_plain(self, node):
        return go_scalar(node.value, node.start_mark.line + 1)

    def construct_tagged(self, node):
        """Any explicit tag: go-yaml v2 builds a mapping or a sequence by its shape whatever the tag
        (!!set, !!omap), and reads a tagged scalar by _tagged_scalar."""
        if isinstance(node, yaml.MappingNode):
            return self.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return [self.construct_object(child) for child in node.value]
        return _tagged_scalar(node, node.start_mark.line + 1)

    def construct_object(self, node, deep=False):
        """Each value is built whole before it is used (deep), so a value that contains itself is
        met here rather than built as a cycle that JSON and the checks never finish."""
        if node in self.recursive_objects:
            raise Refused(f"the anchor on line {node.start_mark.line + 1} is used inside its own value, "
                          "which never ends; Helm refuses it ('value contains itself')", node.start_mark.line + 1,
                          "point the alias at an anchor defined outside the value, or write the value out")
        return super().construct_object(node, deep=True)

    def construct_mapping(self, node, deep=False):
        """Keys in document order, as go-yaml v2 (Helm) applies them: a `<<` merge sets the keys of
        its mapping (of a list of mappings, the earlier one winning), a key written out sets its own.
        Refused where Helm would quietly read something else than the file seems to say: a key
        given twice (Helm keeps the last), a `<<` after a key it would override (Helm takes the
        merged value, YAML's merge rule and every other reader the written one), and a key that is
        not a string (Helm turns `n:` into "false", `1:` into "1")."""
        out: dict = {}
        written: dict = {}  # key -> line it is written on
        set_on: dict = {}  # key -> line of what set it (written or merged)
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if _is_merge(key_node):
                for key, value in self._merged(value_node, line).items():
                    if key in set_on:
                        raise Refused(f"the `<<` merge on line {line} would override key {key!r}, set before it "
                                      f"on line {set_on[key]}: Helm takes the merged value, YAML's merge rule "
                                      "(and the file as it reads) the one set first", line,
                                      "move `<<:` above the keys written beside it, so both read the written "
                                      "keys as overriding the merged ones")
                    out[key], set_on[key] = value, line
                continue
            key = self.construct_object(key_node)
            if not isinstance(key, str):
                read_as = "null" if key is None else f"the {'boolean' if isinstance(key, bool) else type(key).__name__} {str(key).lower()}"
                raise Refused(f"key {key_node.value!r} is read by Helm as {read_as}, not as the text {key_node.value!r}",
                              line, f'quote it: "{key_node.value}":')
            if key in written:
                raise Refused(f"key {key!r} is given twice, on lines {written[key]} and {line}; Helm would keep the "
                              "second and drop the first in silence", line, "keep one of them")
            out[key] = self.construct_object(value_node)
            written[key] = set_on[key] = line
        return out

    def _merged(self, value_node, line: int) -> dict:
        """What a `<<` brings in: a mapping, or a list of mappings where an earlier one wins."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        merged: dict = {}
        for source in reversed(sources):
            if not isinstance(source, yaml.MappingNode):
                raise Refused("`<<` needs a mapping or a list of mappings as its value, and Helm refuses "
                              "anything else", line, "merge an anchored mapping (`<<: *name`), or remove the `<<` line")
            merged.update(self.construct_object(source))
        return merged


_Constructor.yaml_constructors = {}  # nothing of YAML 1.1's: each tag is read here as go-yaml v2 reads it
_Constructor.add_constructor(GO_PLAIN, _Constructor.construct_go_plain)
_Constructor.add_constructor(None, _Constructor.construct_tagged)  # quoted scalars, mappings, sequences, any tag

# libyaml's C parser when present (ten times faster), with the resolution above. PyYAML exports it
# from yaml.cyaml alone: `yaml.CParser` does not exist, and reading it there fell back in silence.
try:
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _Parser = None
if _Parser is not None:
    class Loader(_Parser, _Constructor, _Resolver):
        def __init__(self, stream):
            _Parser.__init__(self, stream)
            _Constructor.__init__(self)
            _Resolver.__init__(self)
else:  # pragma: no cover - PyYAML built without libyaml
    class Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                 _Constructor, _Resolver):
        def __init__(self, stream):
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            _Resolver.__init__(self)


def load_yaml(text):
    return yaml.load(text, Loader=Loader)
