"""Kubernetes resource quantities (500m, 1.5Gi, 1e3), parsed exactly so they can be compared."""
from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

HINT = "write a Kubernetes quantity such as 500m, 2, 1.5Gi or 1e3"
_NEAR_MISS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KkMmGgTtPpEe])(i?)[Bb]?$")


def hint_for(value: object) -> str:
    """The fix for a quantity that looks like another unit system's (4GB, 512mb, 2gi)."""
    match = _NEAR_MISS.match(str(value).strip()) if isinstance(value, str) else None
    if match:
        number, letter = match.group(1), match.group(2).upper()
        letter = "k" if letter == "K" else letter
        binary = "Ki" if letter == "k" else f"{letter}i"
        return f"write {number}{binary} (powers of 1024) or {number}{letter} (powers of 1000)"
    return HINT


def parse(value: object) -> Decimal:
    """The quantity's exact value; ValueError for anything Kubernetes would not parse."""
    if isinstance(value, bool):
        raise ValueError("not a quantity")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError("not a quantity")
    match = _QUANTITY.match(value.strip()) if value == value.strip() else None
    if not match:
        raise ValueError("not a quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
        return Decimal(number) * _SUFFIX[suffix]
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError("not a quantity") from exc


def write(value: Decimal, binary: bool = False) -> str:
    """`value` as Kubernetes writes a quantity in canonical form: whole numbers plain or with the
    largest suffix that divides them (Ki, Mi, ... first with `binary`, as for memory; k, M, ...),
    fractions in the largest of m, u, n that makes them whole (500m, not 0.5), rounded up to a
    whole n as Kubernetes rounds."""
    if value == value.to_integral_value():
        units = (("Ei", "Pi", "Ti", "Gi", "Mi", "Ki") if binary else ()) + ("E", "P", "T", "G", "M", "k")
        for suffix in units:
            if value and value % _SUFFIX[suffix] == 0:
                return f"{int(value / _SUFFIX[suffix])}{suffix}"
        return str(int(value))
    for suffix in ("m", "u"):
        scaled = value / _SUFFIX[suffix]
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int((value / _SUFFIX['n']).to_integral_value(rounding=ROUND_CEILING))}n"
