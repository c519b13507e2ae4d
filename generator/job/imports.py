"""What `import` reads alike from every kind of job: its metadata (name, labels, annotations, the
Kueue queue, a namespace the values leave out), its image pinned by a tag or a digest, and where
the chart's render of the values differs from the original."""
from __future__ import annotations

from generator.errors import Finding, UserError
from generator.job import images

CHART_LABELS = ("helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by", "app.kubernetes.io/component")
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def metadata(d: dict, meta: dict, notes: list[str], commands: str) -> None:
    """The values' job name, labels (less the chart's and Kueue's) and annotations, and its Kueue
    queue, set in `d` from the job's metadata; a namespace, which values do not carry, becomes a
    note naming the `commands` that take it."""
    labels = meta.get("labels") or {}
    d["job"] = {"name": meta.get("name", ""), "labels": {k: v for k, v in labels.items()
                                                         if k != KUEUE_LABEL and k not in CHART_LABELS},
                "annotations": dict(meta.get("annotations") or {})}
    d["kueue"]["queueName"] = labels.get(KUEUE_LABEL, "")
    if meta.get("namespace"):
        notes.append(f"namespace {meta['namespace']} is not part of the values: {commands} with --namespace "
                     f"{meta['namespace']}")


def pinned_image(image: object, path: str, source: str) -> tuple[str, str, str]:
    """(repository, tag, digest) of an image that names exactly one of a tag or a digest, which the
    chart needs to pin it; refused by `path` otherwise."""
    parsed = images.parse(image) if isinstance(image, str) else None
    if not parsed or bool(parsed[1]) == bool(parsed[2]):
        raise UserError([Finding(path, "must name exactly one of a tag or a digest for the chart to pin it", image,
                                 "write REPOSITORY:TAG (e.g. :latest) or REPOSITORY@sha256:DIGEST")], source=source)
    return parsed


def diff(a: object, b: object, path: str) -> list[str]:
    """The dotted paths where two objects differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += diff(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if _equal_scalar(a, b) else [path]


def _equal_scalar(a: object, b: object) -> bool:
    if a == b:
        return True
    # Quantities and ports may be written as strings or numbers: 2 == "2".
    return isinstance(a, (int, float, str)) and isinstance(b, (int, float, str)) and not isinstance(a, bool) \
        and not isinstance(b, bool) and str(a) == str(b)
