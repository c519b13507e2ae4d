"""One values file in, every problem out: schema first, then the cross-field rules."""
from __future__ import annotations

from . import defaults, rules, schema
from .errors import Finding


def check_values(user: dict, release: str = "") -> list[Finding]:
    merged = defaults.coalesce(user)
    found = schema.check(merged)
    if any(f.path == "" for f in found):
        return found
    try:
        reported = {f.path for f in found}
        found += [f for f in rules.check(merged, release) if f.path not in reported]
    except (TypeError, ValueError, AttributeError, KeyError):
        pass  # malformed shapes the schema has already reported
    return found


def check_manifest(job: dict) -> list[Finding]:
    """A PyTorchJob as it is: the operator's admission rules, then Kubernetes' pod schema."""
    from . import admission, importer

    return admission.check_pytorchjob(job) or importer.kubernetes_findings(job)
