"""Kubeflow Trainer v2's TrainJob (trainer.kubeflow.org/v1alpha1): identical nodes of a JobSet,
run by a TrainingRuntime or ClusterTrainingRuntime; it completes when every node succeeds. Its
package holds Trainer's runtime and admission (runtime.py), import (importer.py), JobSet's
contract with the nodes (contract.py) and the local plan (plan.py)."""
from __future__ import annotations

import re
from pathlib import Path

from generator.errors import Finding
from generator.fixtext import value
from generator.kinds.base import FAILED, JobKind
from generator.kinds.trainjob import runtime as trainer

# JobSet's labels on a TrainJob's pods: <replicated job>-<job index>-<completion index> names a node.
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RJOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_LABEL = "batch.kubernetes.io/job-completion-index"
RUNTIME_PLURALS = {"TrainingRuntime": "trainingruntimes", "ClusterTrainingRuntime": "clustertrainingruntimes"}

ENV, ENV_FROM = value("env"), value("envFrom")
BACKOFF_LIMIT = value("runPolicy.backoffLimit")


_NODE_RESOURCES = re.compile(r"node pod\.spec\.containers\[0\]\.resources\.(requests|limits)\.(.+)$")


def _values_finding(finding: Finding, merged: dict) -> Finding:
    """A finding on the rendered node pod's resources, named by the value that made it: the node's
    resources are the values' `resources` (a GPU limit its `resources.gpus`), with a CPU limit the
    chart adds from the CPU request where the values set none."""
    match = _NODE_RESOURCES.search(finding.path)
    if not match:
        return finding
    kind, name = match.groups()
    if kind == "limits" and name == merged.get("gpuResourceName"):
        return Finding("resources.gpus", finding.message, finding.value, finding.hint)
    written = ((merged.get("resources") or {}).get(kind) or {}).get(name)
    if kind == "limits" and name == "cpu" and written is None:
        return Finding("resources.limits.cpu", f"(the chart's, from resources.requests.cpu) {finding.message}: "
                       "Kubernetes refuses the node pods, so the TrainJob would never run", finding.value,
                       "set resources.limits.cpu to at least resources.requests.cpu; a chart that sets it lower "
                       "is a bug of the chart's")
    return Finding(f"resources.{kind}.{name}", finding.message, finding.value, finding.hint)


class TrainJob(JobKind):
    companion_plurals = RUNTIME_PLURALS
    kind = trainer.KIND
    group = trainer.GROUP
    version = trainer.VERSION
    plural = "trainjobs"
    pod_label = JOBSET_LABEL
    container = trainer.CONTAINER
    done = "Complete"
    install = "install Kubeflow Trainer v2.3 (its CRDs, controller and JobSet) on the cluster, or use --target v1"
    replica_unit = "JOB"
    start_word = "created"
    replica_form = f"{trainer.REPLICATED_JOB}-0-INDEX, e.g. {trainer.REPLICATED_JOB}-0-1"
    child_jobs = True
    suspend_path = ("suspend",)
    kueue_integration = "trainer.kubeflow.org/trainjob"
    pod_group_maker = "Trainer's controller"
    gang_opt_out = "drop `podGroupPolicy` from the job's TrainingRuntime"
    target = "v2"
    restart_policies = trainer.RESTART_POLICIES
    restarts_exhausted = ("backoff", "restarts")
    progress_in_status = True

    def check(self, objects: list[dict], source: str) -> list[Finding]:
        return trainer.check(objects)

    def check_rendered(self, objects: list[dict]) -> list[Finding]:
        return trainer.check(objects)

    def to_values(self, documents: list, source: str, reader=None) -> tuple[dict, list[str]]:
        from generator.kinds.trainjob import importer

        return importer.to_values(documents, self.target, source=source)

    def values_findings(self, objects: list[dict], merged: dict) -> tuple[list[Finding], list[Finding]]:
        """The chart's own guards refused what v2 cannot express; left: the node pod as Trainer and
        Kubernetes judge it (a limit below its request: the pods are refused and the TrainJob never
        runs), and a TrainJob the Kubeflow SDK cannot read, each named by the values that made it
        (the chart's runtimes set no resources, so the node's limits are resources.limits with the
        chart's additions)."""
        refused = [_values_finding(f, merged) for f in trainer.check(objects)]
        if refused:
            return refused, []
        return [], [Finding("resources.limits", f.message, f.value, "set resources.limits.cpu, or on nodes without "
                            "GPUs a CPU request (resources.requests.cpu), which the chart then sets as the TrainJob's "
                            "CPU limit; or drop resources.limits") for f in trainer.sdk_unreadable(objects)]

    def shape_values(self, values: dict) -> dict:
        """Every node mounts the same volumes: an output claim goes on all of them, so that many
        nodes must attach it (ReadWriteMany, where the chart makes the claim)."""
        from generator.job import defaults, describe

        merged = defaults.coalesce(values)
        if merged["output"]["enabled"] and merged["topology"]["workers"] and "mountOn" not in (values.get("output") or {}):
            describe.set_path(values, "output.mountOn", "all")
            if not merged["output"]["existingClaim"]:
                describe.set_path(values, "output.accessModes", ["ReadWriteMany"])
        return values

    def summary(self, values: dict, checked, release: str) -> str:
        """Read off the PyTorchJob the same values render, whose pods are the nodes, and the TrainJob."""
        from generator import kinds
        from generator.job import validation
        from generator.kinds.pytorchjob.summary import summary

        pods = validation.check_values({**values, "target": kinds.PYTORCHJOB.target}, kinds.PYTORCHJOB, release)
        return summary(values, pods.job, checked.job) if pods.job else ""

    def not_convertible(self, from_values: bool) -> Finding | None:
        if from_values:
            return Finding("target", f"is already {self.target}", self.target,
                           "nothing to convert: `generator render` gives its TrainJob")
        return Finding("kind", f"is already a {self.kind}, Trainer v2's own kind", self.kind,
                       "nothing to convert: `generator run` and `submit` take it as it is")

    def plan(self, objects: list[dict], run_dir: Path, namespace: str, backend=None):
        from generator.kinds.trainjob import plan

        return plan.plan(objects, run_dir, namespace, backend)

    def running_without_condition(self, job: dict) -> bool:
        """Trainer sets no Running condition: it runs once any of its Jobs is active, and still runs
        once they have ended until JobSet's Complete or Failed reaches it (a real Trainer copies
        `succeeded: 1, active: 0` a moment before the condition)."""
        return any(int(j.get(k) or 0) for j in (job.get("status") or {}).get("jobsStatus") or []
                   for k in ("active", "succeeded", "failed"))

    def replica_counts(self, job: dict) -> dict[str, dict[str, int]]:
        """Its child Jobs' counts (jobsStatus), as Trainer reports them."""
        return {j.get("name", "?"): {k: int(j.get(k, 0) or 0) for k in ("active", "succeeded", "failed")}
                for j in (job.get("status") or {}).get("jobsStatus") or []}

    def times(self, job: dict, state: str, last: dict) -> tuple[str | None, str | None]:
        return (job.get("metadata", {}).get("creationTimestamp"),
                last.get("lastTransitionTime") if state in (self.done, FAILED) else None)

    def replica_name(self, labels: dict) -> str | None:
        if all(k in labels for k in (RJOB_LABEL, RJOB_INDEX_LABEL, COMPLETION_LABEL)):
            return f"{labels[RJOB_LABEL]}-{labels[RJOB_INDEX_LABEL]}-{labels[COMPLETION_LABEL]}"
        return None

    def companions(self, objects: list[dict]) -> list[tuple[str, dict]]:
        """The TrainingRuntime it names, applied before the job that references it."""
        return [(RUNTIME_PLURALS["TrainingRuntime"], o) for o in objects if o.get("kind") == "TrainingRuntime"]

    def own_companions(self, job: dict) -> list[tuple[str, str]]:
        """The chart names a job's own TrainingRuntime after the job."""
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        name = job.get("metadata", {}).get("name")
        if ref.get("kind") == "TrainingRuntime" and ref.get("name") == name:
            return [(RUNTIME_PLURALS["TrainingRuntime"], name)]
        return []

    def runtime_ref(self, job: dict) -> tuple[str, str, bool] | None:
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        kind = ref.get("kind") or "ClusterTrainingRuntime"
        return RUNTIME_PLURALS.get(kind, RUNTIME_PLURALS["ClusterTrainingRuntime"]), ref.get("name", ""), \
            kind == "TrainingRuntime"

    def pod_specs(self, job: dict, runtime: dict | None) -> dict[str, dict]:
        """The runtime's replicated jobs' pod templates, with the TrainJob's own trainer env in their
        node container."""
        out = {}
        jobs = (((runtime or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or []
        for rjob in jobs:
            out[rjob.get("name", trainer.REPLICATED_JOB)] = (
                (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
        env = ((job.get("spec") or {}).get("trainer") or {}).get("env")
        if env:
            node = dict(out.get(trainer.REPLICATED_JOB) or {})
            node["containers"] = [*(node.get("containers") or []), {"name": self.container, "env": env}]
            out[trainer.REPLICATED_JOB] = node
        return out

    def env_fields(self, role: str) -> str:
        return f"{ENV}/{ENV_FROM}"

    def restart_budget(self, job: dict) -> int | None:
        return None  # JobSet restarts the whole set: no per-container count to warn of early

    def restarts_exhausted_finding(self, restarts: int, limit: int | None) -> tuple[str, str, str]:
        """It fails when its node Job exhausts its backoffLimit and JobSet's failurePolicy allows no
        further restart of the whole set (the chart's runPolicy.backoffLimit sets both)."""
        return ("ReachedMaxRestarts", "the set of nodes was restarted as often as its failure policy allows",
                f"the restarts were failures: fix their cause (findings above); {BACKOFF_LIMIT} sets how many restarts "
                "of the whole set the job gets (JobSet's failurePolicy.maxRestarts)")

    def no_pods(self, job: dict, runtime: dict | None, namespace: str) -> tuple[str, str, str]:
        if runtime is None:
            ref = (job.get("spec") or {}).get("runtimeRef") or {}
            return ("RuntimeNotFound",
                    f"the job runs on {ref.get('kind', 'ClusterTrainingRuntime')} {ref.get('name')}, which does not "
                    "exist, so Trainer makes no pods for it",
                    "submit the job together with its TrainingRuntime (`generator submit` does), or install Trainer's "
                    "runtimes (`kubectl get clustertrainingruntimes`)")
        name = job["metadata"]["name"]
        return ("NoPods", "the job exists for over a minute and has no pods: no Trainer controller (or no JobSet "
                "controller) is reconciling it",
                f"install Kubeflow Trainer v2.3 with JobSet, and check their logs (`kubectl get jobset {name} -n "
                f"{namespace}`); or submit with `--target v1` to the training operator")
