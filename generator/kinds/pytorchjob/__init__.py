"""The Kubeflow training operator's PyTorchJob (kubeflow.org/v1): a Master and Workers, each a
replica spec of its own; the job succeeds when the Master does. Its package holds the operator's
admission rules (admission.py), import (importer.py), the operator's contract with the pods
(contract.py), the local plan (plan.py) and its reading of the chart's values."""
from __future__ import annotations

from pathlib import Path

from generator.errors import Finding
from generator.fixtext import OPERATOR_CHART, operator_value, setting, value
from generator.kinds.base import JobKind
from generator.kinds.pytorchjob import admission

JOB_LABEL = "training.kubeflow.org/job-name"
TYPE_LABEL = "training.kubeflow.org/replica-type"
INDEX_LABEL = "training.kubeflow.org/replica-index"
INIT_CONTAINER = "init-pytorch"  # the operator's: waits until the Master's Service resolves

BACKOFF_LIMIT = value("runPolicy.backoffLimit")
ENV, ENV_FROM = value("env"), value("envFrom")
ROLE_ENV = {"master": value("master.env"), "worker": value("worker.env")}
WATCH_NAMESPACE = operator_value("watchNamespace")


class PyTorchJob(JobKind):
    kind = admission.KIND
    group = admission.GROUP
    version = admission.VERSION
    plural = "pytorchjobs"
    pod_label = JOB_LABEL
    container = admission.CONTAINER
    done = "Succeeded"
    install = ("install charts/pytorch-operator first: helm install training charts/pytorch-operator -n kubeflow "
               "--create-namespace")
    replica_unit = "REPLICA"
    start_word = "started"
    replica_form = "ROLE-INDEX, e.g. master-0 or worker-1"
    init_container = INIT_CONTAINER
    clean_pod_policy = True
    suspend_path = ("runPolicy", "suspend")
    kueue_integration = "kubeflow.org/pytorchjob"
    pod_group_maker = "the operator"
    gang_opt_out = f"run the operator chart with {setting('gangScheduling.enabled', 'false', OPERATOR_CHART)}"
    target = "v1"
    restart_policies = admission.RESTART_POLICIES
    restarts_exhausted = ("backoff",)

    def check(self, objects: list[dict], source: str) -> list[Finding]:
        from generator.kinds.pytorchjob import importer, manifest

        job = manifest.pick(objects, source)  # exactly one PyTorchJob, or a refusal that says so
        # The operator's rules first; Kubernetes' pod schema once they hold.
        return admission.check_objects(objects) or importer.kubernetes_findings(job)

    def advice(self, objects: list[dict]) -> list[Finding]:
        return admission.advice(self.job_of(objects))

    def to_values(self, documents: list, source: str, reader=None) -> tuple[dict, list[str]]:
        from generator.kinds.pytorchjob import importer, manifest

        return importer.to_values(manifest.pick(documents, source), source=source, reader=reader)

    def values_findings(self, objects: list[dict], merged: dict) -> tuple[list[Finding], list[Finding]]:
        from generator.kinds.pytorchjob import values_paths

        return values_paths.values_findings(objects, merged)

    def summary(self, values: dict, checked, release: str) -> str:
        from generator.kinds.pytorchjob.summary import summary

        return summary(values, checked.job)

    def image_warnings(self, job: dict, reader, as_values: bool = False) -> list[Finding]:
        from generator.kinds.pytorchjob import workdir

        return workdir.image_warnings(job, reader, as_values)

    def not_convertible(self, from_values: bool) -> Finding | None:
        return None  # convert's own input

    def plan(self, objects: list[dict], run_dir: Path, namespace: str, backend=None):
        from generator.kinds.pytorchjob import plan

        return plan.plan(self.job_of(objects), run_dir, namespace, backend)

    def replica_counts(self, job: dict) -> dict[str, dict[str, int]]:
        statuses = (job.get("status") or {}).get("replicaStatuses") or {}
        return {role: {k: int(v.get(k, 0) or 0) for k in ("active", "succeeded", "failed")} for role, v in statuses.items()}

    def times(self, job: dict, state: str, last: dict) -> tuple[str | None, str | None]:
        status = job.get("status") or {}
        return status.get("startTime"), status.get("completionTime")

    def replica_name(self, labels: dict) -> str | None:
        if TYPE_LABEL in labels and INDEX_LABEL in labels:
            return f"{labels[TYPE_LABEL].lower()}-{labels[INDEX_LABEL]}"
        return None

    def role(self, labels: dict) -> str:
        """master / worker, from the operator's label."""
        return (labels.get(TYPE_LABEL) or "").lower()

    def pod_specs(self, job: dict, runtime: dict | None) -> dict[str, dict]:
        specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        return {role: (r.get("template") or {}).get("spec") or {} for role, r in specs.items()}

    def env_fields(self, role: str) -> str:
        return f"{ENV}/{ENV_FROM}" + (f" (or {ROLE_ENV[role.lower()]})" if role.lower() in ROLE_ENV else "")

    def restart_budget(self, job: dict) -> int | None:
        return ((job.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")

    def restarts_exhausted_finding(self, restarts: int, limit: int | None) -> tuple[str, str, str]:
        return ("BackoffLimitExceeded", f"{restarts} restarts reached backoffLimit {limit}",
                f"the restarts were failures: fix their cause (findings above); {BACKOFF_LIMIT} (now {limit}) only "
                "allows more of them")

    def no_pods(self, job: dict, runtime: dict | None, namespace: str) -> tuple[str, str, str]:
        return ("NoPods", "the job exists for over a minute and has no pods: no operator is reconciling it",
                f"install or fix the operator (charts/pytorch-operator); its log says why, and {WATCH_NAMESPACE} must "
                "include this namespace")
