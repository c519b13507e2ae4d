"""A PyTorchJob manifest among a file's documents. Which kind a file holds, and reading any job,
is generator/kinds' (kinds.source)."""
from __future__ import annotations

from generator.errors import Finding, UserError
from generator.kinds.pytorchjob import admission


def pick(documents: list, source: str) -> dict:
    """The one PyTorchJob among a file's documents."""
    if not documents:
        raise UserError([Finding("", "is empty", hint="give a file with one PyTorchJob")], source=source)
    jobs = [d for d in documents if isinstance(d, dict) and d.get("kind") == admission.KIND]
    if not jobs:
        kinds = [d.get("kind") if isinstance(d, dict) else type(d).__name__ for d in documents]
        raise UserError([Finding("kind", "no PyTorchJob in the file", kinds,
                                 hint=f"give a {admission.API_VERSION} {admission.KIND} manifest")], source=source)
    if len(jobs) > 1:
        raise UserError([Finding("", f"holds {len(jobs)} PyTorchJobs", [j.get("metadata", {}).get("name") for j in jobs],
                                 hint="split the file: one job per file")], source=source)
    return jobs[0]
