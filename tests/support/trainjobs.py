"""Kubeflow Trainer v2.3 objects as the tests write them: a TrainJob and a TrainingRuntime of the
shapes Trainer's CRDs (../shared/reference/trainer-v2.3.0) define, each test giving what it is about."""
from __future__ import annotations

from generator import kinds
from generator.kinds.trainjob import runtime

API_VERSION = kinds.TRAINJOB.api_version  # the kind's, which tests/generator/kinds holds to Trainer's CRD
IMAGE = "ghcr.io/pytorchjob-kit/trainer:0.1.0"


def trainjob(name: str, trainer: dict, runtime_ref: dict | None = None, metadata: dict | None = None, **spec) -> dict:
    """`spec.trainer` as given; runtimeRef upstream's torch-distributed unless given; other spec
    fields (suspend, activeDeadlineSeconds, ...) as keywords."""
    return {"apiVersion": API_VERSION, "kind": kinds.TRAINJOB.kind, "metadata": {"name": name, **(metadata or {})},
            "spec": {"runtimeRef": runtime_ref or {"name": runtime.DEFAULT_RUNTIME}, "trainer": trainer, **spec}}


def training_runtime(name: str, pod_spec: dict | None = None, job_spec: dict | None = None,
                     failure_policy: dict | None = None, nodes: int = 1, ancestor: bool = True) -> dict:
    """A torch runtime whose JobSet runs the replicated job `node`, labelled (unless `ancestor` is
    False) as the one Trainer lays the TrainJob's trainer over: its Job's spec (`job_spec`,
    backoffLimit ...) around `pod_spec`, and the JobSet's failurePolicy when given."""
    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"} if ancestor else {}
    jobset = {"replicatedJobs": [{"name": "node", "template": {"metadata": {"labels": labels}, "spec": {
        **(job_spec or {}), "template": {"spec": pod_spec or {"containers": [{"name": "node"}]}}}}}]}
    if failure_policy:
        jobset["failurePolicy"] = failure_policy
    return {"apiVersion": API_VERSION, "kind": "TrainingRuntime", "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": nodes, "torch": {}}, "template": {"spec": jobset}}}
