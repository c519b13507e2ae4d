"""Operations on a cluster that return what happened; the CLI decides how to print it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from generator.cluster import apierrors, progress
from generator.cluster import client as api
from generator.errors import UserError
from generator.kinds import source
from generator.kinds.base import JobKind

# wait's exit statuses: reached, ended otherwise, timed out.
REACHED, ENDED_OTHERWISE, TIMED_OUT = 0, 1, 2


@dataclass
class Submitted:
    name: str
    namespace: str
    verdict: str  # created | configured | unchanged
    dry_run: bool
    kind: str
    notes: list[str] = field(default_factory=list)
    helm: str = ""  # the helm command that takes the job over, for a values file


def submit(c: api.Cluster, file: str, release: str, namespace_flag: str | None, dry_run: bool,
           replace: bool, target: str | None = None) -> Submitted:
    """Validate the job, then server-side apply what it needs (the output PVC; for a TrainJob, its
    TrainingRuntime) and the job itself: a PyTorchJob, or a Trainer v2 TrainJob."""
    from generator import helm, paths

    loaded = source.read(file, release, c.namespace, target)
    objects, chart, kind = loaded.objects, loaded.rendered, loaded.kind
    job = kind.job_of(objects)
    written = job.setdefault("metadata", {}).get("namespace")
    if written and written != c.namespace:
        if namespace_flag:  # as kubectl: a manifest's namespace and -n must agree
            raise UserError(f"{file} puts {kind.kind} {job['metadata']['name']} in namespace {written} but --namespace "
                            f"is {namespace_flag}; drop one of them or make them agree")
        c.namespace = written
    for obj in objects:
        obj.setdefault("metadata", {})["namespace"] = c.namespace
        if chart:  # rendered from values: `helm upgrade --install` of the same release adopts them
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations.update(zip(helm.RELEASE_ANNOTATIONS, (release, c.namespace), strict=True))
    name = job["metadata"]["name"]
    notes: list[str] = []
    existing = api.get_job(c, name, kind)
    state, _ = api.condition(existing or {})
    if existing and state in api.TERMINAL:
        if not replace:
            raise UserError(f"{kind.kind} {name} in namespace {c.namespace} already finished ({state}); a finished job "
                            "does not run again: pass --replace to delete it and submit anew, or choose another name")
        if not dry_run:
            api.delete_job(c, name, kind)
            wait_gone(c, name, kind)
            existing = None
            notes.append(f"{kind.kind.lower()} {name} deleted (it had {state.lower()})")
    for pvc in (o for o in objects if o.get("kind") == "PersistentVolumeClaim"):
        api.apply_pvc(c, pvc, dry_run)
        notes.append(f"persistentvolumeclaim {pvc['metadata']['name']} applied{' (dry run)' if dry_run else ''}")
    companions = kind.companions(objects)
    for plural, obj in companions:  # before the job that references them
        api.apply_custom(c, obj, plural, dry_run)
        notes.append(f"{obj['kind'].lower()} {obj['metadata']['name']} applied{' (dry run)' if dry_run else ''}")
    before = (existing or {}).get("metadata", {}).get("resourceVersion")
    applied = _apply_job(c, job, dry_run, kind, bool(companions), notes)
    after = applied.get("metadata", {}).get("resourceVersion")
    verdict = "created" if not existing else ("unchanged" if before == after else "configured")
    same = helm.equivalent("upgrade --install", paths.JOB_CHART, release, file, c.namespace) if chart else ""
    if same and target:
        same += f" --set target={target}"
    return Submitted(name, c.namespace, verdict, dry_run, kind.kind, notes, same)


# Trainer's TrainJob webhook looks the runtime up in its informer cache, which trails the API
# server by a moment: a runtime applied just now can be "not found" for it.
RUNTIME_UNSEEN = "must be created before the TrainJob is created"
RUNTIME_CACHE_SECONDS = 15.0


def _apply_job(c: api.Cluster, job: dict, dry_run: bool, kind: JobKind, own_runtime: bool,
               notes: list[str]) -> dict:
    """Apply the job. Where this submit has just applied the job's own runtime, ask again while the
    webhook has not seen it yet; a runtime that truly is missing still fails, after that wait. A dry
    run creates no runtime, so there the webhook's lookup cannot succeed: the API server validates
    the schema and its rules before it calls validating webhooks, so that refusal alone means the
    rest passed, and the note says what went unchecked."""
    end = time.monotonic() + RUNTIME_CACHE_SECONDS
    while True:
        try:
            return api.apply_job(c, job, dry_run, kind)
        except UserError as exc:
            cause = exc.__cause__
            said = (apierrors.error_body(cause).get("message") or "") if hasattr(cause, "body") else ""
            if not (own_runtime and RUNTIME_UNSEEN in said):
                raise
            if dry_run:
                name = job["metadata"]["name"]
                notes.append(f"{kind.kind.lower()} {name}: the API server accepted its schema; Trainer's webhook, "
                             "which judges a TrainJob against its runtime, could not, as a dry run creates no "
                             "runtime (a real submit asks it)")
                return {}
            if time.monotonic() >= end:
                raise
            time.sleep(0.5)


def wait_gone(c: api.Cluster, name: str, kind: JobKind, seconds: float = 120) -> None:
    end = time.monotonic() + seconds
    while api.get_job(c, name, kind) is not None:
        if time.monotonic() > end:
            raise UserError(f"{kind.kind} {name} is still being deleted after {seconds:g}s; try again shortly")
        time.sleep(0.5)


def status(c: api.Cluster, name: str) -> dict:
    """Conditions, replica counts and times, as a plain report, each as the job's kind reads it."""
    kind, job = api.find(c, name)
    st = job.get("status") or {}
    state, last = api.condition(job)
    replicas = kind.replica_counts(job)
    started, completed = kind.times(job, state, last)
    return {"kind": kind.kind, "name": name, "namespace": c.namespace, "state": state or "Created",
            "conditions": [{k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                           for cond in st.get("conditions") or []],
            "replicas": replicas, "startTime": started, "completionTime": completed,
            "reason": last.get("reason"), "message": last.get("message"),
            "progress": progress.read(c, kind, job)}


@dataclass
class WaitResult:
    code: int  # REACHED, ENDED_OTHERWISE or TIMED_OUT
    message: str


def wait_for(c: api.Cluster, name: str, target: str, timeout: int,
             on_state: Callable[[str, dict], None] | None = None,
             tick: Callable[[str], None] | None = None,
             on_job: Callable[[JobKind, dict], None] | None = None, window: int = 30) -> WaitResult:
    """Watch the job until it reaches target, ends otherwise, or the timeout passes. `tick` sees
    the state, and `on_job` the job, at least every `window` seconds (and `on_job` every change
    a watch brings). Succeeded means Complete for a TrainJob."""
    from kubernetes import watch

    end = time.monotonic() + timeout
    seen = None
    kind, job = api.find(c, name)
    goal = kind.done if target == "Succeeded" else target
    what = f"{kind.kind.lower()} {name}"
    def read(job: dict) -> tuple[str, dict]:
        state, cond = api.condition(job)
        # Nothing makes a job Created again: Trainer's counts read 0 for a moment between its updates
        # (and a restarting JobSet's Jobs), which is still the state already told.
        return (seen, cond) if state == "Created" and seen not in (None, "Created") else (state, cond)

    while True:
        state, cond = read(job)
        if on_state and state != seen:
            on_state(state or "Created", cond)
            seen = state
        if tick:
            tick(state or "Created")
        if state == goal:
            return WaitResult(REACHED, f"{what} {goal.lower()}")
        if state in api.TERMINAL:
            failed = first_failed_pod(c, name, kind)
            return WaitResult(ENDED_OTHERWISE, f"{what} ended {state}, not {goal}: {cond.get('reason')}: "
                              f"{cond.get('message')}" + (f"; first failed pod: {failed}" if failed else ""))
        if on_job:  # still waiting: what the job is doing meanwhile
            on_job(kind, job)
        left = end - time.monotonic()
        if left <= 0:
            return WaitResult(TIMED_OUT, f"{what} is still {state or 'Created'} after {timeout}s; timed out "
                              f"waiting for {goal}")
        stream = watch.Watch()
        try:
            for event in stream.stream(c.custom.list_namespaced_custom_object, kind.group, kind.version,
                                       c.namespace, kind.plural, field_selector=f"metadata.name={name}",
                                       timeout_seconds=max(1, int(min(left, window)))):
                if event["type"] == "DELETED":
                    raise UserError(f"{kind.kind} {name} was deleted while waiting for {goal}")
                job = event["object"]
                if read(job)[0] != state:
                    break
                if on_job:
                    on_job(kind, job)
        except UserError:
            raise
        except Exception as exc:
            raise apierrors.explain(exc, c, "watch", kind.plural, name) from exc
        finally:
            stream.stop()
        if kind.child_jobs and read(job)[0] == state:
            job = api.get_job(c, name, kind) or job  # Running comes of jobsStatus, which a watch may not end on


def first_failed_pod(c: api.Cluster, name: str, kind: JobKind) -> str:
    for pod in api.pods(c, name, kind):
        for st in pod.status.container_statuses or []:
            terminated = (st.state and st.state.terminated) or (st.last_state and st.last_state.terminated)
            if terminated and terminated.exit_code:
                return (f"{pod.metadata.name} (container {st.name} exited {terminated.exit_code}: "
                        f"{terminated.reason or 'Error'})")
        if pod.status.phase == "Failed":
            detail = ": ".join(x for x in (pod.status.reason or "Failed", pod.status.message) if x)
            return f"{pod.metadata.name} ({detail})"
    return ""


def delete(c: api.Cluster, name: str, with_pvc: bool) -> Iterator[str]:
    """Delete the job (its pods go with it), what the chart made for this job alone (a TrainJob's
    own TrainingRuntime), and, if asked, the output PVC the chart created; a line for each as it
    happens."""
    kind, job = api.find(c, name)
    api.delete_job(c, name, kind)
    yield f"{kind.kind.lower()} {name} deleted"
    companions = kind.own_companions(job)
    if companions:
        # Trainer's webhook judges every update of a TrainJob against its runtime, the garbage
        # collector's removal of the foreground-deletion finalizer included: a runtime deleted
        # first leaves the TrainJob stuck, being deleted, for good. So the job goes first.
        _gone(c, kind, name, GONE_TIMEOUT)
    for plural, own in companions:
        obj = api.get_custom(c, kind.group, kind.version, plural, own)
        if obj is not None and _charts(obj.get("metadata", {}).get("labels")):
            api.call(c, "delete", plural, own, c.custom.delete_namespaced_custom_object, kind.group, kind.version,
                     c.namespace, plural, own)
            yield f"{obj.get('kind', plural).lower()} {own} deleted"
    if with_pvc:
        claim = f"{name}-output"
        pvc = api.call(c, "get", "persistentvolumeclaims", claim, c.core.read_namespaced_persistent_volume_claim,
                       claim, c.namespace)
        if not _charts(pvc.metadata.labels):
            raise UserError(f"PersistentVolumeClaim {claim} was not created by charts/pytorchjob (no helm.sh/chart "
                            "label of it); delete it yourself if you mean to: kubectl delete pvc " + claim)
        api.call(c, "delete", "persistentvolumeclaims", claim, c.core.delete_namespaced_persistent_volume_claim,
                 claim, c.namespace)
        yield f"persistentvolumeclaim {claim} deleted"


GONE_TIMEOUT = 120.0  # the garbage collector takes a TrainJob's JobSet, Job and pods first


def _gone(c: api.Cluster, kind, name: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while api.get_custom(c, kind.group, kind.version, kind.plural, name) is not None:
        if time.monotonic() > end:
            raise UserError(f"{kind.kind} {name} is still being deleted after {timeout:g}s (its pods and JobSet go "
                            f"first), so its own runtime was kept; run `python -m generator delete {name} -n "
                            f"{c.namespace}` again once `kubectl get {kind.plural} {name}` finds nothing")
        time.sleep(0.5)


def _charts(labels: dict | None) -> bool:
    """Whether charts/pytorchjob made the object (only then may delete remove it)."""
    return (labels or {}).get("helm.sh/chart", "").startswith("pytorchjob-")
