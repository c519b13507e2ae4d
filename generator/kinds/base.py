"""The one interface every kind of training job implements. A caller asks `kinds` for the kind
of an object and calls it; no other module tests which kind it holds.

A kind owns its identity (API group, version, plural, the labels on its pods, its training
container, its success condition), its admission, import, its controller's contract and local
plan, its reading of the chart's values (each in its package: generator/kinds/<kind>/), how its
status and replicas read, and the kind-specific facts the diagnose rules ask for. What every kind
shares (values, the chart, Kubernetes' own rules, processes and containers) is generator/job's,
generator/container's and generator/local's, and takes the kind as an argument."""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from generator.errors import Finding

FAILED = "Failed"  # the condition type of failure, for every kind


class JobKind(ABC):
    kind: ClassVar[str]
    group: ClassVar[str]
    version: ClassVar[str]
    plural: ClassVar[str]
    pod_label: ClassVar[str]  # the label that names a pod's job
    container: ClassVar[str]  # the training container, whose log, requests and limits are the job's
    done: ClassVar[str]  # the condition type of success
    install: ClassVar[str]  # what gives a cluster the CRD
    replica_unit: ClassVar[str]  # what `status` counts: replicas' pods, or child Jobs
    start_word: ClassVar[str]  # what its start time is: when it started, or was created
    replica_form: ClassVar[str]  # how --replica names a pod, with an example
    # Whether its controller makes batch Jobs named <job>-<replicated job> whose events explain it,
    # and whose counts say it runs (a TrainJob has no Running condition).
    child_jobs: ClassVar[bool] = False
    # The operator's init container on Worker pods, waiting for the Master's Service; None: none.
    init_container: ClassVar[str | None] = None
    # Whether runPolicy.cleanPodPolicy decides that pods outlive the finished job.
    clean_pod_policy: ClassVar[bool] = False
    suspend_path: ClassVar[tuple[str, ...]]  # where spec says suspended
    kueue_integration: ClassVar[str]  # the Kueue integration that admits it
    pod_group_maker: ClassVar[str]  # who creates its PodGroup
    gang_opt_out: ClassVar[str]  # how to run it without gang scheduling
    restarts_exhausted: ClassVar[tuple[str, ...]]  # words of a failure condition that say the restarts ran out
    target: ClassVar[str]  # the chart's `target` that renders this kind (v1, v2)
    restart_policies: ClassVar[tuple[str, ...]]  # the pods' restartPolicy values its controller takes
    # Objects of other kinds a job of this kind is applied with, as kind -> plural (Trainer's runtimes).
    companion_plurals: ClassVar[dict[str, str]] = {}
    # Whether its progress is in the job's status (Trainer's status server), not read off a pod's log.
    progress_in_status: ClassVar[bool] = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def owns(self, obj: object) -> bool:
        return isinstance(obj, dict) and obj.get("kind") == self.kind

    def job_of(self, objects: list) -> dict:
        """The one job of this kind among objects that hold it."""
        return next(o for o in objects if self.owns(o))

    # --- admission, import, local run --------------------------------------------------------------
    @abstractmethod
    def check(self, objects: list[dict], source: str) -> list[Finding]:
        """Every refusal its webhook (or controller) would give, by path."""

    @abstractmethod
    def to_values(self, documents: list, source: str, reader=None) -> tuple[dict, list[str]]:
        """Values that render the job back, and notes on what the values leave out; with `reader`
        (images/distribution.py's), a command the job leaves to its image written out where the kind can."""

    def advice(self, objects: list[dict]) -> list[Finding]:
        """What an admitted job may still not do as its author expects (warnings, not refusals)."""
        return []

    def check_rendered(self, objects: list[dict]) -> list[Finding]:
        """What the chart's own checks of values leave to the kind's admission."""
        return []

    # --- the chart's values that render it -----------------------------------------------------------
    @abstractmethod
    def values_findings(self, objects: list[dict], merged: dict) -> tuple[list[Finding], list[Finding]]:
        """(refusals, warnings) of what the chart rendered from values (`merged` with the chart's
        defaults), named by the values paths a user edits."""

    def shape_values(self, values: dict) -> dict:
        """Values `generator values` wrote from flags, completed where this kind needs more than they say."""
        return values

    @abstractmethod
    def summary(self, values: dict, checked, release: str) -> str:
        """What `generator values` tells of the job its values render (checked: job.validation's Checked)."""

    def image_warnings(self, job: dict, reader, as_values: bool = False) -> list[Finding]:
        """What a pod that leaves its command to its image may not be allowed to do in it, read with
        `reader` (images/distribution.py's); paths the values' with `as_values`."""
        return []

    def not_convertible(self, from_values: bool) -> Finding | None:
        """Why `convert` does not take a job of this kind (from its values, or a manifest); None: it does."""
        return Finding("target" if from_values else "kind", f"is a {self.kind}, which convert does not take",
                       self.target if from_values else self.kind, "convert turns PyTorchJobs into TrainJobs")

    @abstractmethod
    def plan(self, objects: list[dict], run_dir: Path, namespace: str, backend=None):
        """The local run: one replica per pod, as `backend` (local/backends/; None: processes, no
        --image) runs it and places it, with the kind's restart and success policy."""

    # --- status ------------------------------------------------------------------------------------
    def condition(self, job: dict) -> tuple[str, dict]:
        """The job's state and the condition that says it: the last true condition, else Running
        while the kind's children say so, else Created."""
        conditions = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
        if conditions:
            return conditions[-1]["type"], conditions[-1]
        return ("Running" if self.running_without_condition(job) else "Created"), {}

    def running_without_condition(self, job: dict) -> bool:
        return False

    @abstractmethod
    def replica_counts(self, job: dict) -> dict[str, dict[str, int]]:
        """active / succeeded / failed, by replica (or child Job)."""

    @abstractmethod
    def times(self, job: dict, state: str, last: dict) -> tuple[str | None, str | None]:
        """When it started (or was created) and completed."""

    @abstractmethod
    def replica_name(self, labels: dict) -> str | None:
        """master-0, node-0-1 ... from the labels its controller puts on a pod; None: not its pod."""

    def role(self, labels: dict) -> str:
        """A pod's role (master, worker) where the kind's pods have roles; "" where all are alike."""
        return ""

    # --- cluster companions ------------------------------------------------------------------------
    def companions(self, objects: list[dict]) -> list[tuple[str, dict]]:
        """(plural, object) of what must be applied before the job, besides claims."""
        return []

    def own_companions(self, job: dict) -> list[tuple[str, str]]:
        """(plural, name) of objects the chart made for this job alone, deleted with it."""
        return []

    def runtime_ref(self, job: dict) -> tuple[str, str, bool] | None:
        """(plural, name, namespaced) of the runtime the job runs on; None: it names none."""
        return None

    # --- diagnose ----------------------------------------------------------------------------------
    def suspended(self, job: dict) -> bool:
        node: object = job.get("spec") or {}
        for key in self.suspend_path:
            node = (node or {}).get(key) if isinstance(node, dict) else None
        return bool(node)

    def suspend_patch(self) -> str:
        """The merge patch that resumes it."""
        patch = "false"
        for key in reversed(("spec", *self.suspend_path)):
            patch = f'{{"{key}":{patch}}}'
        return patch

    @abstractmethod
    def pod_specs(self, job: dict, runtime: dict | None) -> dict[str, dict]:
        """The pod templates by role, as the job (and its runtime) give them."""

    @abstractmethod
    def env_fields(self, role: str) -> str:
        """The values that set a role's container env, for a fix text."""

    @abstractmethod
    def restart_budget(self, job: dict) -> int | None:
        """The restarts counted against a limit while it runs (None: nothing to warn of early)."""

    @abstractmethod
    def restarts_exhausted_finding(self, restarts: int, limit: int | None) -> tuple[str, str, str]:
        """(reason, message, fix) once its restarts ran out, where its condition says less."""

    @abstractmethod
    def no_pods(self, job: dict, runtime: dict | None, namespace: str) -> tuple[str, str, str]:
        """(reason, message, fix) for a job that exists for a minute and made no pods."""
