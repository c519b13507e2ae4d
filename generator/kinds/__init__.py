"""The kinds of training job the tool understands, one package each behind `base.JobKind`, holding
everything of its kind (admission, import, its controller's contract, the local plan, how its
status reads). This lookup is the only place that decides which kind values, an object, a file
or a name are: a new kind is a package and its line in ALL."""
from __future__ import annotations

from generator.errors import UserError
from generator.kinds.base import FAILED, JobKind
from generator.kinds.pytorchjob import PyTorchJob
from generator.kinds.trainjob import TrainJob

PYTORCHJOB = PyTorchJob()
TRAINJOB = TrainJob()
ALL: tuple[JobKind, ...] = (PYTORCHJOB, TRAINJOB)  # the order `find` tries a bare name in
DEFAULT = PYTORCHJOB  # the project's own kind: values render it unless they target v2
TERMINAL = (*dict.fromkeys(k.done for k in ALL), FAILED)


def get(name: str) -> JobKind:
    for kind in ALL:
        if kind.kind == name:
            return kind
    raise UserError(f"kind {name!r} is not a training job this tool knows; use one of "
                    f"{', '.join(k.kind for k in ALL)}")


def by_plural(plural: str) -> JobKind | None:
    return next((k for k in ALL if k.plural == plural), None)


def in_manifest(documents: list) -> JobKind | None:
    """The kind of the job a manifest's documents hold; None when they hold no job (values).
    A file with a TrainJob is a TrainJob's, whatever else it carries (its runtime, claims)."""
    return next((k for k in reversed(ALL) if any(k.owns(d) for d in documents)), None)


def for_values(values: dict) -> JobKind:
    """The kind the chart renders from values: their `target`, else the chart's default (v1). A
    target no kind renders is the default's, and the chart's schema refuses it by name."""
    from generator.job import defaults

    target = defaults.coalesce(values).get("target")
    return next((k for k in ALL if k.target == target), DEFAULT)


def for_objects(objects: list) -> JobKind:
    """The kind of the job among rendered or read objects."""
    return in_manifest(objects) or DEFAULT


def for_object(obj: dict) -> JobKind:
    """The kind of one job object; one that does not say is the default kind's (as the API's
    objects always say, only hand-written snapshots may not)."""
    return next((k for k in ALL if k.owns(obj)), DEFAULT)
