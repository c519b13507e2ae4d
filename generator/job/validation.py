"""One rule set for every input. Values are checked against the schema, rendered by Helm, and
the rendered PyTorchJob goes through the same admission rules as a hand-written manifest.
Findings on the manifest are named back by the values path a user edits."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator import helm, paths
from generator.errors import Finding, UserError
from generator.job import admission, defaults, images, schema, values_io


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


def image_warnings(job: dict, reader, as_values: bool = False) -> list[Finding]:
    """A pod whose runAsUser cannot (or may not) enter its image's WORKDIR, so that what the command
    reads there is refused (runc still starts it: `python train.py` then fails), for each pod that
    leaves the command to its image (the project's trainer aside: validating the chart's defaults
    asks no registry). Paths are the values' with `as_values`.

    What this can honestly tell: the folder's owner and mode are in the image's layers, which are
    read from the top while they stay small (a COPY, a useradd; never a base or a pip install of
    torch), so it is told for sure where those layers hold the folder. Where they do not, only the
    config is known, and it warns ("may not") where the image was built to run as another user than
    runAsUser: a folder made for that user is often closed to others. An image built as root is then
    not warned of: `WORKDIR` makes its folder 0755, open to every uid."""
    if not job:
        return []
    from generator.images import distribution

    trainer = defaults.chart_defaults()["image"]["repository"]
    out: list[Finding] = []
    for role, rspec in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        pod = ((rspec.get("template") or {}).get("spec") or {})
        main = admission.pytorch_container(rspec)
        image = str(main.get("image") or "")
        mine, shared = main.get("securityContext") or {}, pod.get("securityContext") or {}
        uid = mine.get("runAsUser", shared.get("runAsUser"))
        if main.get("command") or main.get("workingDir") or not isinstance(uid, int) or uid == 0 \
                or (images.parse(image) or ("",))[0] == trainer:
            continue
        if as_values:
            path = "securityContext.runAsUser" if "runAsUser" in mine else "podSecurityContext.runAsUser"
        else:
            path = f"spec.pytorchReplicaSpecs.{role}.template.spec." + \
                ("containers[pytorch].securityContext.runAsUser" if "runAsUser" in mine else "securityContext.runAsUser")
        reader = reader or distribution.Reader()  # asked only here: most jobs set their command
        try:
            found = reader.config(image)
        except distribution.Unreadable:
            # As before registries were read: validate stays quiet offline (the chart's default
            # runAsUser would otherwise warn of every image of the user's that no registry gives).
            continue
        config, workdir = found.config, found.config.workdir or "/"
        if workdir == "/":
            continue
        groups = {mine.get("runAsGroup", shared.get("runAsGroup")), shared.get("fsGroup"),
                  *(shared.get("supplementalGroups") or [])} - {None}
        entry = found.entry(workdir)
        fix = f"set the container's workingDir to a folder uid {uid} can enter, or open {workdir} to others in the image " \
              f"(chmod o+x)"
        if entry is not None:
            bits = entry.mode >> 6 if entry.uid == uid else entry.mode >> 3 if entry.gid in groups else entry.mode
            if bits & 1:
                continue
            held = f"mode {entry.mode & 0o7777:04o}, owner {entry.uid}:{entry.gid}, as the image's layers hold it"
            if not groups and entry.uid != uid and entry.mode >> 3 & 1:
                out.append(Finding(path, f"runs the pod as uid {uid}, which may not enter {image}'s WORKDIR {workdir} "
                                   f"({held}) unless its group is {entry.gid}: what the command reads there would then be refused",
                                   uid, f"set runAsGroup: {entry.gid}, or run as uid {entry.uid}, or {fix}"))
            else:
                out.append(Finding(path, f"runs the pod as uid {uid}, which cannot enter {image}'s WORKDIR {workdir} "
                                   f"({held}): what the command reads there is refused (Permission denied)", uid,
                                   f"run as uid {entry.uid}, or {fix}"))
            continue
        user = config.user.split(":", 1)[0]
        if user in ("", "0", "root") or (user.isdigit() and int(user) == uid):
            continue
        named = "" if user.isdigit() else " (a name: its uid is in the image's /etc/passwd, which this check does not read)"
        out.append(Finding(path, f"runs the pod as uid {uid}, but {image} was built to run as user {config.user}{named} "
                           f"and starts in its WORKDIR {workdir}, which uid {uid} may not be able to enter (the layers "
                           "that hold it are too large to read here, and a folder made for the image's user is often "
                           "closed to others): what the command reads there would then be refused", uid,
                           f"run as the image's user ({config.user}), or {fix}"))
    return _unique(out)


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
