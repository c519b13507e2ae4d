"""The chart's defaults and Helm's way of laying user values over them."""
from __future__ import annotations

import copy
import functools

from generator import paths
from generator.job.goyaml import load_yaml as _load


@functools.cache
def _chart_defaults() -> dict:
    return _load((paths.JOB_CHART / "values.yaml").read_text())


def chart_defaults() -> dict:
    return copy.deepcopy(_chart_defaults())


def coalesce(user: dict, base: dict | None = None) -> dict:
    """What Helm renders with: maps merge key by key, anything else replaces, and a null
    removes the key, whether the user or the chart wrote it (tests/generator/job/test_defaults.py
    holds this against Helm itself)."""
    return _without_nulls(_coalesce(user, chart_defaults() if base is None else copy.deepcopy(base)))


def _coalesce(user: dict, out: dict) -> dict:
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _coalesce(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _without_nulls(values: dict) -> dict:
    return {k: _without_nulls(v) if isinstance(v, dict) else v for k, v in values.items() if v is not None}


def merge(base: dict, over: dict) -> dict:
    """Layer one values file over another, keeping nulls (they mean "remove" to Helm)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def overlay(desired: dict, base: dict | None = None) -> dict:
    """The smallest values file that coalesces to `desired`: only what differs from the
    defaults, with nulls for default keys `desired` lacks."""
    base = chart_defaults() if base is None else base
    out: dict = {}
    for key, value in desired.items():
        if key not in base:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(base[key], dict) and value and base[key]:
            sub = overlay(value, base[key])
            if sub:
                out[key] = sub
        elif isinstance(value, dict) and not value and isinstance(base[key], dict) and base[key]:
            out[key] = {k: None for k in base[key]}
        elif value != base[key]:
            out[key] = copy.deepcopy(value)
    for key in base:
        if key not in desired and base[key] is not None:
            out[key] = None
    return out

