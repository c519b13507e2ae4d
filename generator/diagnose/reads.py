"""Reading what diagnose may not be allowed to read: a refusal, an absent kind or an unreachable
server is recorded as such and diagnose goes on with the rest; only the client's failures mean
that, so a bug in reading an answer surfaces."""
from __future__ import annotations

from generator.cluster import apierrors


def status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def optional(fn):
    """None when the call is refused or the kind does not exist: diagnose works with what it may read.
    Only the client's failures mean that; a bug in reading the answer surfaces."""
    try:
        return fn()
    except apierrors.failures():
        return None


def read(fn):
    """The object, or None when it does not exist (a refusal is not absence: it counts as present)."""
    try:
        return fn()
    except apierrors.failures() as exc:
        return None if status(exc) == 404 else {}
