"""`import` of a Kubeflow Trainer v2 TrainJob (with its TrainingRuntime beside it in the same
file): values with `target: v2` that render it back. As for PyTorchJobs, the values are
rendered and compared with the originals, and whatever would not come back the same is
refused by name."""
from __future__ import annotations

import copy

from generator import helm, paths
from generator.errors import Finding, UserError
from generator.job import defaults, nodeloss
from generator.job.imports import CHART_LABELS, diff, metadata, pinned_image
from generator.kinds.trainjob.runtime import CONTAINER, DEFAULT_RESTART_POLICY, KIND

DEFAULT_LAUNCH = ["torchrun", "--module", "trainer"]
NODE_OWNED = {"name", "image", "imagePullPolicy", "securityContext", "volumeMounts", "envFrom"}
POD_OWNED = {"containers", "volumes", "nodeSelector", "tolerations", "affinity", "priorityClassName",
             "serviceAccountName", "automountServiceAccountToken", "securityContext", "imagePullSecrets",
             "restartPolicy"}


def to_values(documents: list, target: str, source: str = "") -> tuple[dict, list[str]]:
    """Values of the chart's `target` that render the file's one TrainJob (and its runtime) back, and notes."""
    jobs = [d for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
    if len(jobs) != 1:
        raise UserError([Finding("", f"holds {len(jobs)} TrainJobs", hint="give one TrainJob per file")], source=source)
    job = jobs[0]
    ref = job.get("spec", {}).get("runtimeRef") or {}
    runtimes = {d["metadata"]["name"]: d for d in documents
                if isinstance(d, dict) and d.get("kind") == "TrainingRuntime" and d.get("metadata", {}).get("name")}
    notes: list[str] = []
    d = defaults.chart_defaults()
    d["target"] = target
    meta = job.get("metadata") or {}
    metadata(d, meta, notes, "render")
    trainer = job.get("spec", {}).get("trainer") or {}
    parsed = pinned_image(trainer.get("image"), "spec.trainer.image", source)
    d["image"].update(repository=parsed[0], tag=parsed[1], digest=parsed[2], pullPolicy="", pullSecrets=[])
    command = list(trainer.get("command") or [])
    d["command"] = [] if command == DEFAULT_LAUNCH else command
    d["args"] = list(trainer.get("args") or [])
    d["env"] = list(trainer.get("env") or [])
    nodes = int(trainer.get("numNodes") or 1)
    d["topology"] = {"master": True, "workers": nodes - 1, "backend": "none",
                     "nprocPerNode": str(trainer["numProcPerNode"]) if trainer.get("numProcPerNode") else ""}
    resources = trainer.get("resourcesPerNode") or {}
    d["resources"] = {"requests": dict(resources.get("requests") or {}), "limits": dict(resources.get("limits") or {}),
                      "gpus": 0}
    # What the chart adds that the original did not have stays off.
    d["shm"]["enabled"] = False
    d["gpuToleration"] = False
    d["disableIstioSidecar"] = False
    d["output"]["enabled"] = False
    d["podSecurityContext"], d["securityContext"], d["automountServiceAccountToken"] = None, None, None
    spec = job.get("spec") or {}
    d["runPolicy"] = {"cleanPodPolicy": "", "ttlSecondsAfterFinished": None,
                      "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"), "backoffLimit": None,
                      "suspend": bool(spec.get("suspend", False)),
                      "schedulingPolicy": {"queue": "", "priorityClass": "", "minAvailable": None}}
    if ref.get("kind") == "TrainingRuntime":
        runtime = runtimes.get(ref.get("name"))
        if runtime is None:
            raise UserError([Finding("spec.runtimeRef.name", "names a TrainingRuntime that is not in the file",
                                     ref.get("name"), "put the TrainingRuntime in the same file, after the TrainJob")],
                            source=source)
        if ref.get("name") != meta.get("name"):
            raise UserError([Finding("spec.runtimeRef.name", "differs from the job's name, after which the chart names "
                                     "its runtime", ref.get("name"), "rename the TrainingRuntime after the job")],
                            source=source)
        _from_runtime(d, runtime, source)
    elif not (ref.get("kind") == "ClusterTrainingRuntime" and ref.get("name") == "torch-distributed"):
        raise UserError([Finding("spec.runtimeRef", "names a runtime the chart does not render", ref,
                                 "use a TrainingRuntime in the same file or the torch-distributed ClusterTrainingRuntime")],
                        source=source)
    values = defaults.overlay(d)
    mismatches = compare(job, runtimes.get(ref.get("name")), values)
    if mismatches:
        raise UserError([Finding(p, "cannot be carried by the chart's values", None,
                                 "keep this TrainJob as a manifest") for p in mismatches], source=source)
    return values, notes


def _from_runtime(d: dict, runtime: dict, source: str) -> None:
    jobset = runtime.get("spec", {}).get("template", {}).get("spec") or {}
    replicated = jobset.get("replicatedJobs") or []
    if len(replicated) != 1:
        raise UserError([Finding("TrainingRuntime spec.template.spec.replicatedJobs", "must hold one replicated job (node)",
                                 [r.get("name") for r in replicated], "the chart renders one: node")], source=source)
    pod_template = replicated[0]["template"]["spec"]["template"]
    pod = pod_template.get("spec") or {}
    node = next((c for c in pod.get("containers") or [] if c.get("name") == CONTAINER), {})
    if jobset.get("failurePolicy", {}).get("maxRestarts") is not None:
        # The chart pairs it with the node Job's backoffLimit 0; compare() refuses a runtime without it.
        d["runPolicy"]["backoffLimit"] = jobset["failurePolicy"]["maxRestarts"]
    d["runPolicy"]["ttlSecondsAfterFinished"] = jobset.get("ttlSecondsAfterFinished")
    d["restartPolicy"] = pod.get("restartPolicy", DEFAULT_RESTART_POLICY)
    d["image"]["pullPolicy"] = node.get("imagePullPolicy", "")
    d["image"]["pullSecrets"] = [s["name"] for s in pod.get("imagePullSecrets") or []]
    d["securityContext"] = node.get("securityContext")
    d["envFrom"] = list(node.get("envFrom") or [])
    d["containerExtra"] = {k: v for k, v in node.items() if k not in NODE_OWNED}
    d["podSecurityContext"] = pod.get("securityContext")
    d["serviceAccountName"] = pod.get("serviceAccountName", "")
    d["automountServiceAccountToken"] = pod.get("automountServiceAccountToken")
    d["priorityClassName"] = pod.get("priorityClassName", "")
    d["nodeSelector"] = dict(pod.get("nodeSelector") or {})
    seconds, (d["tolerations"],) = nodeloss.split([list(pod.get("tolerations") or [])])
    d[nodeloss.VALUE] = seconds
    d["affinity"] = dict(pod.get("affinity") or {})
    d["extraVolumes"] = list(pod.get("volumes") or [])
    d["extraVolumeMounts"] = list(node.get("volumeMounts") or [])
    d["extraContainers"] = [c for c in pod.get("containers") or [] if c.get("name") != CONTAINER]
    d["podSpecExtra"] = {k: v for k, v in pod.items() if k not in POD_OWNED}
    meta = pod_template.get("metadata") or {}
    d["podAnnotations"] = dict(meta.get("annotations") or {})
    d["podLabels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k not in CHART_LABELS}


def compare(job: dict, runtime: dict | None, values: dict) -> list[str]:
    """Paths where rendering the values does not give back the TrainJob (and its runtime)."""
    rendered = {o["kind"]: o for o in helm.render_objects(paths.JOB_CHART, values, "import", "default")}
    out = diff(_normal(job), _normal(rendered.get(KIND, {})), KIND)
    if runtime is not None:
        out += diff(_normal(runtime), _normal(rendered.get("TrainingRuntime", {})), "TrainingRuntime")
    return out


def _normal(obj: dict) -> dict:
    """Without what the chart adds on purpose (its labels, the namespace) and empty lists or maps."""
    obj = copy.deepcopy(obj)

    def clean(node):
        if isinstance(node, dict):
            for key in list(node):
                if key == "labels" and isinstance(node[key], dict):
                    node[key] = {k: v for k, v in node[key].items() if k not in CHART_LABELS}
                clean(node[key])
                if node[key] in ({}, [], None):
                    node.pop(key)
        elif isinstance(node, list):
            for item in node:
                clean(item)
        return node

    obj.get("metadata", {}).pop("namespace", None)
    return clean(obj)
