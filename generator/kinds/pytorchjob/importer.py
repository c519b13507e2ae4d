"""`import`: an existing PyTorchJob manifest turned into values that render it back.

The values are built as the full desired state, reduced to an overlay of the chart's
defaults, and then rendered and compared with the original: whatever would not come
back the same is refused by name, so nothing is silently dropped."""
from __future__ import annotations

import copy
import functools
import shlex

from generator import helm, paths
from generator.errors import Finding, UserError
from generator.job import defaults, images, nodeloss, podschema
from generator.job.imports import CHART_LABELS, diff, metadata, pinned_image
from generator.kinds.pytorchjob import admission

POD_OWNED = {"containers", "volumes", "nodeSelector", "tolerations", "affinity", "priorityClassName",
             "serviceAccountName", "automountServiceAccountToken", "securityContext", "imagePullSecrets"}
CONTAINER_OWNED = {"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports", "resources",
                   "securityContext", "volumeMounts"}


def kubernetes_findings(job: dict) -> list[Finding]:
    """Pod templates against Kubernetes' own schema (strict), as the API server would see the pods.
    A template that passes is told so without loading kubernetes-validate (generator.job.podschema)."""
    out = []
    for role, spec in (job["spec"].get("pytorchReplicaSpecs") or {}).items():
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "import"},
                    "template": spec.get("template") or {}}
        if podschema.passes(template):
            continue
        import kubernetes_validate

        try:
            kubernetes_validate.validate(template, podschema.KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in list(exc.path)[1:])
            out.append(Finding(f"spec.pytorchReplicaSpecs.{role}.template.{where}".rstrip("."),
                               exc.message.splitlines()[0], hint="fix the pod template as Kubernetes expects it"))
    return out


def _same(values_by_role: dict, what: str) -> object:
    distinct = {repr(v) for v in values_by_role.values()}
    if len(distinct) > 1:
        raise UserError([Finding(f"spec.pytorchReplicaSpecs.*.{what}", "differs between Master and Worker",
                                 {k: v for k, v in values_by_role.items()},
                                 "the chart runs one container setup on every pod; make them equal, or keep "
                                 "this job as a manifest (`generator run` and `submit` take manifests too)")])
    return next(iter(values_by_role.values()))


def to_values(job: dict, source: str = "", reader=None) -> tuple[dict, list[str]]:
    """(values overlay, notes for the user). Raises UserError for anything invalid or unrepresentable.
    With `reader` (images/distribution.py's), a command left to the image is written out from its config."""
    findings = admission.check_objects([job])
    if findings:
        raise UserError(findings, source=source)
    said: list[str] = []
    if reader is not None:
        job = copy.deepcopy(job)
        said = _command_from_image(job, reader)
    # Kubernetes' findings come first, whether or not the chart can carry the job.
    schema_findings = kubernetes_findings(job)
    try:
        result = _build(copy.deepcopy(job), source)
    except UserError:
        if schema_findings:
            raise UserError(schema_findings, source=source) from None
        raise
    if schema_findings:
        raise UserError(schema_findings, source=source)
    return result[0], said + result[1]


def _command_from_image(job: dict, reader) -> list[str]:
    """Each pytorch container that leaves `command` to its image (other than the project's trainer,
    whose ENTRYPOINT is known) gets the image's ENTRYPOINT, and its CMD unless the container gives
    args, as its command: the values then say what runs, which `generator run` and Trainer v2 need.
    What could not be read stays empty, as the image would run it; the notes say which."""
    from generator.images import manifests

    trainer = defaults.chart_defaults()["image"]["repository"]
    notes = []
    for spec in (job["spec"].get("pytorchReplicaSpecs") or {}).values():
        main = admission.pytorch_container(spec)
        image = str(main.get("image") or "")
        if main.get("command") or (images.parse(image) or ("",))[0] == trainer:
            continue
        try:
            found = reader.config(image)
        except manifests.Unreadable as exc:
            note = f"command: left empty, so {image}'s own ENTRYPOINT runs; it was not written out: {exc}"
        else:
            command = found.config.runs(main.get("args"))
            if not command:
                continue
            main["command"] = command
            note = (f"command: {shlex.join(command)} written out, {image}'s own ENTRYPOINT"
                    f"{'' if main.get('args') else ' and CMD'}, read from {found.where}")
        if note not in notes:
            notes.append(note)
    return notes


def _build(job: dict, source: str) -> tuple[dict, list[str]]:
    notes: list[str] = []
    spec = job["spec"]
    elastic = spec.get("elasticPolicy")
    if elastic and "nProcPerNode" in elastic:
        spec["nprocPerNode"] = str(elastic.pop("nProcPerNode"))
        notes.append("moved the deprecated elasticPolicy.nProcPerNode to spec.nprocPerNode")
    specs = spec["pytorchReplicaSpecs"]
    role_of = {"Master": "master", "Worker": "worker"}
    present = {role_of[k]: v for k, v in specs.items()}
    pods = {r: s["template"].get("spec", {}) for r, s in present.items()}
    metas = {r: s["template"].get("metadata") or {} for r, s in present.items()}
    mains = {r: next(c for c in p["containers"] if c.get("name") == admission.CONTAINER) for r, p in pods.items()}

    d = defaults.chart_defaults()
    metadata(d, job.get("metadata") or {}, notes, "render or submit")
    image = _same({r: c.get("image") for r, c in mains.items()}, "containers[pytorch].image")
    parsed = pinned_image(image, "spec.pytorchReplicaSpecs.*.containers[pytorch].image", source)
    d["image"].update(repository=parsed[0], tag=parsed[1], digest=parsed[2],
                      pullPolicy=_same({r: c.get("imagePullPolicy", "") for r, c in mains.items()}, "imagePullPolicy"),
                      pullSecrets=[s["name"] for s in _same({r: p.get("imagePullSecrets") or [] for r, p in pods.items()},
                                                            "imagePullSecrets")])
    d["command"] = _same({r: c.get("command") or [] for r, c in mains.items()}, "command")
    d["args"] = _same({r: c.get("args") or [] for r, c in mains.items()}, "args")
    d["launcher"] = "entrypoint"
    d["topology"] = {"master": "master" in present, "workers": int(specs.get("Worker", {}).get("replicas", 1))
                     if "Worker" in specs else 0, "nprocPerNode": spec.get("nprocPerNode", ""), "backend": "none"}
    d["envFrom"] = _same({r: c.get("envFrom") or [] for r, c in mains.items()}, "envFrom")
    d["containerExtra"] = _same({r: {k: v for k, v in c.items() if k not in CONTAINER_OWNED} for r, c in mains.items()},
                                "container fields")
    d["securityContext"] = _same({r: c.get("securityContext") for r, c in mains.items()}, "securityContext")
    d["podSecurityContext"] = _same({r: p.get("securityContext") for r, p in pods.items()}, "pod securityContext")
    d["serviceAccountName"] = _same({r: p.get("serviceAccountName", "") for r, p in pods.items()}, "serviceAccountName")
    d["automountServiceAccountToken"] = _same({r: p.get("automountServiceAccountToken") for r, p in pods.items()},
                                              "automountServiceAccountToken")
    d["priorityClassName"] = _same({r: p.get("priorityClassName", "") for r, p in pods.items()}, "priorityClassName")

    ports = _same({r: c.get("ports") or [] for r, c in mains.items()}, "ports")
    if ports and set(ports[0]) == {"name", "containerPort"} and ports[0]["name"] == "pytorchjob-port":
        d["port"], d["extraPorts"] = ports[0]["containerPort"], ports[1:]
    else:
        d["port"], d["extraPorts"] = None, ports

    # Features the chart adds that the original did not have stay off.
    d["shm"]["enabled"] = False
    d["gpuToleration"] = False
    d["disableIstioSidecar"] = False
    d["output"]["enabled"] = False
    d["resources"] = {"requests": {}, "limits": {}, "gpus": 0}
    d["nodeSelector"], d["tolerations"], d["affinity"], d["env"] = {}, [], {}, []
    d["extraVolumes"], d["extraVolumeMounts"], d["extraContainers"] = [], [], []
    d["podAnnotations"], d["podLabels"], d["podSpecExtra"] = {}, {}, {}

    restart = {r: s.get("restartPolicy", "") for r, s in present.items()}
    d["restartPolicy"] = next(iter(restart.values())) if len(set(restart.values())) == 1 else ""
    for role in ("master", "worker"):
        if role not in present:
            d[role] = _unset_role()
            continue
        own_restart = "" if d["restartPolicy"] else restart[role]  # a restartPolicy both roles share is set once
        d[role] = _role_values(role, pods[role], metas[role], own_restart, source)
    _node_loss(d, [r for r in ("master", "worker") if r in present])
    d["runPolicy"] = _run_policy(spec.get("runPolicy") or {})
    if elastic is not None:
        d["elasticPolicy"] = _elastic_policy(elastic)
    values = defaults.overlay(_hoist_shared(d))
    mismatches = compare(job, render_job(values))
    if mismatches:
        raise UserError([Finding(p, "cannot be carried by the chart's values", None,
                                 "keep this job as a manifest, or file an issue with the manifest") for p in mismatches],
                        source=source)
    return values, notes


def _unset_role() -> dict:
    """A role's own settings (the values' master and worker), none of them set."""
    return {"restartPolicy": "", "resources": {"requests": {}, "limits": {}, "gpus": None}, "nodeSelector": {},
            "tolerations": [], "affinity": {}, "env": [], "annotations": {}, "labels": {}, "podSpecExtra": {},
            "extraVolumes": [], "extraVolumeMounts": [], "extraContainers": []}


def _role_values(role: str, pod: dict, meta: dict, restart: str, source: str) -> dict:
    """A present role's own settings, as its pod template has them (_hoist_shared then moves what
    both roles share to the shared keys). Raises UserError for template metadata the chart cannot carry."""
    r = _unset_role()
    main = next(c for c in pod["containers"] if c.get("name") == admission.CONTAINER)
    r["restartPolicy"] = restart
    resources = main.get("resources") or {}
    r["resources"]["requests"] = dict(resources.get("requests") or {})
    r["resources"]["limits"] = dict(resources.get("limits") or {})
    r["nodeSelector"] = dict(pod.get("nodeSelector") or {})
    r["tolerations"] = list(pod.get("tolerations") or [])
    r["affinity"] = dict(pod.get("affinity") or {})
    r["env"] = list(main.get("env") or [])
    r["annotations"] = dict(meta.get("annotations") or {})
    r["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k not in CHART_LABELS}
    r["podSpecExtra"] = {k: v for k, v in pod.items() if k not in POD_OWNED}
    r["extraVolumes"] = list(pod.get("volumes") or [])
    r["extraVolumeMounts"] = list(main.get("volumeMounts") or [])
    r["extraContainers"] = [c for c in pod["containers"] if c.get("name") != admission.CONTAINER]
    unknown_meta = set(meta) - {"labels", "annotations"}
    if unknown_meta:
        raise UserError([Finding(f"spec.pytorchReplicaSpecs.{role.title()}.template.metadata",
                                 "has fields the chart cannot carry", sorted(unknown_meta),
                                 "remove them; pods get their names from the operator")], source=source)
    return r


def _node_loss(d: dict, present: list[str]) -> None:
    """The NoExecute tolerations the chart renders for nodeLossTolerationSeconds, where every pod
    ends with them, as that value; otherwise they stay the roles' own tolerations."""
    seconds, rests = nodeloss.split([d[r]["tolerations"] for r in present])
    if seconds is not None:
        d[nodeloss.VALUE] = seconds
        for role, rest in zip(present, rests, strict=True):
            d[role]["tolerations"] = rest


def _run_policy(run_policy: dict) -> dict:
    """spec.runPolicy as the values' runPolicy: a default the chart states for an unset value imports
    back as that unset value."""
    run_policy = without_stated_defaults(run_policy)
    scheduling = run_policy.get("schedulingPolicy") or {}
    return {"cleanPodPolicy": run_policy.get("cleanPodPolicy", ""),
            "ttlSecondsAfterFinished": run_policy.get("ttlSecondsAfterFinished"),
            "activeDeadlineSeconds": run_policy.get("activeDeadlineSeconds"),
            "backoffLimit": run_policy.get("backoffLimit"), "suspend": bool(run_policy.get("suspend", False)),
            "schedulingPolicy": {"queue": scheduling.get("queue", ""), "priorityClass": scheduling.get("priorityClass", ""),
                                 "minAvailable": scheduling.get("minAvailable")}}


def _elastic_policy(elastic: dict) -> dict:
    """spec.elasticPolicy as the values' elasticPolicy, enabled."""
    return {"enabled": True, "minReplicas": elastic.get("minReplicas"), "maxReplicas": elastic.get("maxReplicas"),
            "rdzvBackend": elastic.get("rdzvBackend", ""), "rdzvPort": elastic.get("rdzvPort"),
            "rdzvHost": elastic.get("rdzvHost", ""), "rdzvId": elastic.get("rdzvId", ""),
            "maxRestarts": elastic.get("maxRestarts"), "metrics": elastic.get("metrics") or []}


def _hoist_shared(d: dict) -> dict:
    """Settings equal on both roles move to the shared keys, so the values read naturally."""
    present = [r for r in ("master", "worker") if r == "master" and d["topology"]["master"]
               or r == "worker" and d["topology"]["workers"] > 0]
    pairs = [("nodeSelector", "nodeSelector"), ("tolerations", "tolerations"), ("affinity", "affinity"),
             ("env", "env"), ("annotations", "podAnnotations"), ("labels", "podLabels"),
             ("podSpecExtra", "podSpecExtra"), ("extraVolumes", "extraVolumes"),
             ("extraVolumeMounts", "extraVolumeMounts"), ("extraContainers", "extraContainers")]
    for role_key, shared_key in pairs:
        vals = [d[r][role_key] for r in present]
        if vals and all(v == vals[0] for v in vals):
            d[shared_key] = vals[0]
            for r in present:
                d[r][role_key] = type(vals[0])()
    for kind in ("requests", "limits"):
        vals = [d[r]["resources"][kind] for r in present]
        if vals and all(v == vals[0] for v in vals):
            d["resources"][kind] = vals[0]
            for r in present:
                d[r]["resources"][kind] = {}
    return d


def render_job(values: dict, release: str = "import", namespace: str = "default") -> dict:
    objects = helm.render_objects(paths.JOB_CHART, values, release, namespace)
    return next(o for o in objects if o["kind"] == admission.KIND)


def normalise(job: dict) -> dict:
    """A PyTorchJob without what the chart adds on purpose (its labels, the namespace) and
    with name-keyed lists in a canonical order."""
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    meta.pop("namespace", None)
    for holder in [meta] + [s.get("template", {}).setdefault("metadata", {})
                            for s in job.get("spec", {}).get("pytorchReplicaSpecs", {}).values()]:
        labels = {k: v for k, v in (holder.get("labels") or {}).items() if k not in CHART_LABELS}
        holder.pop("labels", None)
        if labels:
            holder["labels"] = labels
        if not holder.get("annotations"):
            holder.pop("annotations", None)
    for s in job.get("spec", {}).get("pytorchReplicaSpecs", {}).values():
        template = s.get("template", {})
        if not template.get("metadata"):
            template.pop("metadata", None)
        pod = template.get("spec", {})
        pod["containers"] = sorted(pod.get("containers", []), key=lambda c: c.get("name") != admission.CONTAINER)
        for c in pod["containers"]:
            for key in ("command", "args", "env", "envFrom", "ports", "volumeMounts"):
                if c.get(key) == []:
                    c.pop(key)
            if c.get("resources") in ({}, {"requests": {}, "limits": {}}):
                c.pop("resources")
        for key in ("volumes", "tolerations", "imagePullSecrets"):
            if pod.get(key) == []:
                pod.pop(key)
        for key in ("nodeSelector", "affinity", "securityContext"):
            if pod.get(key) == {}:
                pod.pop(key)
    if "runPolicy" in job.get("spec", {}):
        job["spec"]["runPolicy"] = without_stated_defaults(job["spec"]["runPolicy"] or {})
        if not job["spec"]["runPolicy"]:
            job["spec"].pop("runPolicy")
    return job


@functools.cache
def _stated_defaults() -> dict:
    """The runPolicy the chart writes when the values leave it unset: the operator's defaults,
    read off the chart itself so that the chart stays their one source."""
    return render_job(defaults.chart_defaults())["spec"]["runPolicy"]


def without_stated_defaults(run_policy: dict) -> dict:
    stated = _stated_defaults()
    return {k: v for k, v in run_policy.items() if k not in stated or v != stated[k]}


def compare(original: dict, rendered: dict, path: str = "") -> list[str]:
    """Dotted paths where the rendered job differs from the original."""
    return diff(normalise(original), normalise(rendered), path)
