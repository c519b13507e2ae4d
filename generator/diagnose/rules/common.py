"""What every rule shares: the finding, its severities, and the readings of a snapshot that more
than one concern needs. Kind-specific facts come from the snapshot's kind (generator/kinds)."""
from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from generator.cluster import client as api
from generator.diagnose.snapshot import Snapshot

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass(frozen=True)
class Diagnosis:
    severity: str
    object: str  # Kind/name
    reason: str
    message: str
    fix: str

    def as_dict(self) -> dict:
        return asdict(self)


Rule = Callable[[Snapshot], Iterator[Diagnosis]]


def pods_in(shot: Snapshot, phase: str | None = None) -> list[dict]:
    return [p for p in shot.pods if phase is None or (p.get("status") or {}).get("phase") == phase]


def pod_name(pod: dict) -> str:
    return pod["metadata"]["name"]


def objects(kind: str, names: list[str]) -> str:
    names = sorted(names)
    return f"{kind}/{names[0]}" + (f" (and {len(names) - 1} more: {', '.join(names[1:])})" if len(names) > 1 else "")


def statuses(pod: dict, init: bool | None = None) -> list[dict]:
    status = pod.get("status") or {}
    inits = status.get("initContainerStatuses") or []
    mains = status.get("containerStatuses") or []
    return inits if init else mains if init is False else [*inits, *mains]


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule: an empty key with Exists matches every key; an empty effect every effect."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def job_state(shot: Snapshot) -> tuple[str, dict]:
    return api.condition(shot.job)


def ended(shot: Snapshot) -> bool:
    return job_state(shot)[0] in api.TERMINAL


def suspended(shot: Snapshot) -> bool:
    return shot.job_kind.suspended(shot.job)


def seconds_since(shot: Snapshot, stamp: str | None) -> float:
    if not stamp or not shot.now:
        return 0.0
    parse = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(shot.now) - parse(stamp)).total_seconds()


def out_of_restarts(shot: Snapshot, cond: dict) -> bool:
    """Whether a failure condition says the restarts ran out (the backoff rule explains those)."""
    said = (cond.get("reason", "") + " " + cond.get("message", "")).lower()
    return any(word in said for word in shot.job_kind.restarts_exhausted)
