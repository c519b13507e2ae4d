"""One rule set for every input. Values are checked against the schema, rendered by Helm, and
the rendered PyTorchJob goes through the same admission rules as a hand-written manifest.
Findings on the manifest are named back by the values path a user edits."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator import helm, paths
from generator.errors import Finding, UserError
from generator.job import admission, defaults, schema, values_io


@dataclass
class Checked:
    findings: list[Finding]
    rendered: dict[str, str] = field(default_factory=dict)  # template path -> text, when it rendered
    objects: list[dict] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)  # admitted, but maybe not what was meant

    @property
    def job(self) -> dict | None:
        return next((o for o in self.objects if o.get("kind") == admission.KIND), None)


def check_values(user: dict, release: str = "release", namespace: str = "default") -> Checked:
    merged = defaults.coalesce(user)
    try:
        # Helm checks the values against the same schema before it renders, so valid values
        # never pay for loading jsonschema; refused ones get our findings, which name a fix.
        rendered = helm.render(paths.JOB_CHART, user, release, namespace)
    except UserError as exc:
        return Checked(schema.check(merged) or [_blame(f, merged, release) for f in exc.findings])
    objects = helm.objects(rendered)
    if merged.get("target") == "v2":  # a TrainJob: the chart's own guards refused what v2 cannot express
        return Checked([], rendered, objects, _sdk_warnings(objects))
    manifest = admission.check_objects(objects, merged.get("gpuResourceName", ""))
    named = [Finding(values_path(f.path, merged), f.message, f.value, f.hint) for f in manifest]
    job = next((o for o in objects if o.get("kind") == admission.KIND), None)
    advice = admission.advice(job) if job and not named else []
    return Checked(_unique(named), rendered, objects,
                   [Finding(values_path(f.path, merged), f.message, f.value, f.hint) for f in advice])


def _sdk_warnings(objects: list[dict]) -> list[Finding]:
    """A TrainJob the Kubeflow SDK cannot read, named by the values that made it: the chart's
    runtimes set no resources, so the node's limits are resources.limits with the chart's additions."""
    from generator.job import runtime

    return [Finding("resources.limits", f.message, f.value, "set resources.limits.cpu, or on nodes without "
                    "GPUs a CPU request (resources.requests.cpu), which the chart then sets as the TrainJob's CPU "
                    "limit; or drop resources.limits") for f in runtime.sdk_unreadable(objects)]


def check_operator_values(user: dict, release: str = "training", namespace: str = "kubeflow") -> Checked:
    """Values for charts/pytorch-operator: every schema problem at once, then the chart's own
    guards as Helm renders it."""
    base = values_io.load_yaml((paths.OPERATOR_CHART / "values.yaml").read_text())
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


def check_file(path: str, release: str = "release", chart: str = "pytorchjob", target: str | None = None) -> Checked:
    """A values file or a job's manifest (a PyTorchJob; a TrainJob with the runtime it names, when
    that is in the file), told apart by their content; with chart "pytorch-operator", values for
    the operator chart. Only the findings and warnings are set."""
    from generator import kinds

    documents = values_io.load_documents(path)
    if chart == "pytorch-operator":
        return Checked(check_operator_values(values_io.mapping_of(documents, path), release).findings)
    kind = kinds.in_manifest(documents)
    if kind is not None:  # the same check `run` and `submit` give a manifest
        objects = [d for d in documents if isinstance(d, dict)]
        findings = kind.check(objects, path)
        return Checked(findings, warnings=[] if findings else kind.advice(objects))
    values = values_io.mapping_of(documents, path)
    checked = check_values({**values, "target": target} if target else values, release)
    return Checked(checked.findings, warnings=checked.warnings)


_REPLICA = re.compile(r"^spec\.pytorchReplicaSpecs\.(Master|Worker)\.(.*)$")
_CONTAINER = re.compile(r"^template\.spec\.containers\[(\d+)\](?:\.(.*))?$")


def values_path(path: str, values: dict) -> str:
    """The values path that produced a path of the rendered manifest; the manifest path when none did."""
    if path == "metadata.name":
        return "fullnameOverride" if values.get("fullnameOverride") and not values["job"].get("name") else "job.name"
    if path.startswith("PersistentVolumeClaim/"):
        return "output." + path.rsplit(".", 1)[-1]
    if path == "spec.pytorchReplicaSpecs.*.args":
        return "topology.backend"
    if path == "spec.nprocPerNode":
        return "topology.nprocPerNode"
    if path == "spec.elasticPolicy":
        return "elasticPolicy.enabled"
    if path.startswith(("spec.elasticPolicy.", "spec.runPolicy.")):
        return path[len("spec."):]
    match = _REPLICA.match(path)
    if not match:
        return path
    role, rest = match.group(1).lower(), match.group(2)
    if rest == "replicas":
        return "topology.master" if role == "master" else "topology.workers"
    if rest == "restartPolicy":
        return _own_or_shared(values, role, "restartPolicy")
    container = _CONTAINER.match(rest)
    if not container:
        return path
    index, inner = int(container.group(1)), container.group(2) or ""
    if index > 0:
        return _own_or_shared(values, role, "extraContainers")
    if inner == "image" or inner.startswith("image"):
        return "image.repository"
    if inner.startswith("ports"):
        return "port" if inner.startswith("ports[0]") and values.get("port") is not None else "extraPorts"
    if inner.startswith("resources"):
        parts = inner.split(".", 2)  # resources, kind, name
        if len(parts) < 3:
            return _own_or_shared(values, role, "resources")
        kind, name = parts[1], parts[2]
        if kind == "limits" and name == values.get("gpuResourceName"):
            return _own_or_shared(values, role, "resources.gpus")
        return _own_or_shared(values, role, f"resources.{kind}.{name}")
    return path


def _own_or_shared(values: dict, role: str, dotted: str) -> str:
    """`<role>.<dotted>` when the role sets it, else the shared `<dotted>`."""
    node: object = values.get(role, {})
    for part in _split(dotted):
        if not isinstance(node, dict) or node.get(part) is None:
            return dotted
        node = node[part]
    return f"{role}.{dotted}"


def _split(dotted: str) -> list[str]:
    # resource names hold dots (nvidia.com/gpu): only the first two separators are structure
    head, _, rest = dotted.partition(".")
    if head == "resources" and rest:
        kind, _, name = rest.partition(".")
        return [head, kind, name] if name else [head, kind]
    return [head] + ([rest] if rest else [])


def _unique(findings: list[Finding]) -> list[Finding]:
    """A shared value broken on both roles is one problem."""
    seen, out = set(), []
    for f in findings:
        key = (f.path, repr(f.value))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
