"""One rule set for every input. Values are checked against the schema and rendered by Helm, and
the job they render goes through its kind's admission rules, as a hand-written manifest does;
the kind names its findings back by the values paths a user edits."""
from __future__ import annotations

from dataclasses import dataclass, field

from generator import helm, paths
from generator.errors import Finding, UserError
from generator.job import defaults, goyaml, schema


@dataclass
class Checked:
    findings: list[Finding]
    rendered: dict[str, str] = field(default_factory=dict)  # template path -> text, when it rendered
    objects: list[dict] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)  # admitted, but maybe not what was meant
    job: dict | None = None  # the job among the objects, of the kind the values render


def check_values(user: dict, kind, release: str = "release", namespace: str = "default") -> Checked:
    """`kind` (a generator.kinds.JobKind, the one the values render: kinds.for_values) judges
    what the chart rendered."""
    merged = defaults.coalesce(user)
    try:
        # Helm checks the values against the same schema before it renders, so valid values
        # never pay for loading jsonschema; refused ones get our findings, which name a fix.
        rendered = helm.render(paths.JOB_CHART, user, release, namespace)
    except UserError as exc:
        return Checked(schema.check(merged) or [_blame(f, merged, release) for f in exc.findings])
    objects = helm.objects(rendered)
    findings, warnings = kind.values_findings(objects, merged)
    return Checked(findings, rendered, objects, warnings, next((o for o in objects if kind.owns(o)), None))


def check_operator_values(user: dict, release: str = "training", namespace: str = "kubeflow") -> Checked:
    """Values for charts/pytorch-operator: every schema problem at once, then the chart's own
    guards as Helm renders it."""
    base = goyaml.load_yaml((paths.OPERATOR_CHART / "values.yaml").read_text())
    findings = schema.check(defaults.coalesce(user, base), paths.OPERATOR_CHART)
    if findings:
        return Checked(findings)
    try:
        rendered = helm.render(paths.OPERATOR_CHART, user, release, namespace)
    except UserError as exc:
        return Checked(exc.findings)
    return Checked([], rendered, helm.objects(rendered))


def _blame(finding: Finding, values: dict, release: str) -> Finding:
    """The chart's own fail() guards say job.name; name what the user actually wrote instead."""
    if finding.path != "job.name" or values["job"].get("name"):
        return finding
    if values.get("fullnameOverride"):
        return Finding("fullnameOverride", finding.message, hint="shorten fullnameOverride, or set job.name")
    return Finding("--release", f"{release!r} makes the job name {finding.message}", hint="use a shorter --release, "
                   "or set job.name")


def unique(findings: list[Finding]) -> list[Finding]:
    """A shared value broken on both roles is one problem."""
    seen, out = set(), []
    for f in findings:
        key = (f.path, repr(f.value))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
