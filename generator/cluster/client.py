"""The Kubernetes API through the `kubernetes` client: connecting, one call asked again while an
admission webhook restarts, and the jobs and pods the commands read and write. Every failure
comes back as the sentence apierrors.py makes of it."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from generator import FIELD_MANAGER, kinds
from generator.cluster.apierrors import NoResource, error_body, explain, failures, webhook_down
from generator.errors import UserError
from generator.kinds.base import JobKind

APPLY = "application/apply-patch+yaml"
DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds for one request, as kubectl's --request-timeout


@dataclass
class Cluster:
    core: object
    custom: object
    namespace: str
    server: str
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    # Told, once per call, that a write is waiting for an admission webhook to come back.
    on_wait: Callable[[str], None] | None = None


def connect(context: str | None = None, namespace: str | None = None, kubeconfig: str | None = None,
            request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> Cluster:
    """The usual kubeconfig (KUBECONFIG, ~/.kube/config) or the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    # The client reads $KUBECONFIG once at import; read it at call time instead.
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not any(os.path.exists(os.path.expanduser(p)) for p in kubeconfig.split(os.pathsep)):
        try:
            config.load_incluster_config(client_configuration=configuration)
            default_ns = _incluster_namespace()
        except ConfigException:
            raise UserError(f"no kubeconfig found ({kubeconfig} does not exist) and this is not a pod in a cluster; "
                            "point KUBECONFIG at your cluster's config or pass --kubeconfig") from None
    else:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), active) if context else active
            default_ns = (chosen or {}).get("context", {}).get("namespace", "default")
        except (ConfigException, TypeError, ValueError) as exc:
            raise UserError(f"cannot use the kubeconfig {kubeconfig}{' context ' + context if context else ''}: "
                            f"{exc}; check `kubectl config get-contexts`") from None
    configuration.retries = 1  # fail fast on an unreachable server instead of retrying for a minute
    api = client.ApiClient(configuration)
    return Cluster(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace or default_ns, configuration.host,
                   request_timeout)


def _incluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as handle:
            return handle.read().strip()
    except OSError:
        return "default"


def call(cluster: Cluster, verb: str, resource: str, name: str, fn, *args, **kwargs):
    """Run one API call; failures come back as UserError. A server that accepts and never
    answers fails it after the cluster's request timeout. A write refused only because an admission
    webhook's server is (re)starting is asked again for up to the request timeout: the server
    persisted nothing, so asking again is safe."""
    kwargs.setdefault("_request_timeout", cluster.request_timeout)
    started, pause, retried = time.monotonic(), 0.25, False
    deadline = started + cluster.request_timeout
    while True:
        try:
            return fn(*args, **kwargs)
        except failures() as exc:  # every client failure is translated; nothing raw reaches the user
            from kubernetes.client.exceptions import ApiException

            down = webhook_down(exc) if isinstance(exc, ApiException) else None
            if not (down and down.transient and time.monotonic() + pause < deadline):
                waited = round(time.monotonic() - started) if retried else 0
                raise explain(exc, cluster, verb, resource, name, waited) from exc
            if cluster.on_wait and not retried:
                cluster.on_wait(f"waiting up to {cluster.request_timeout:g}s for the admission webhook {down.webhook} "
                                f"({down.reason})")
            retried = True
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def get_job(cluster: Cluster, name: str, kind: JobKind) -> dict | None:
    return get_custom(cluster, kind.group, kind.version, kind.plural, name)


def get_custom(cluster: Cluster, group: str, version: str, plural: str, name: str) -> dict | None:
    """The object, or None where it does not exist; NoResource where the kind does not."""
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.custom.get_namespaced_custom_object(group, version, cluster.namespace, plural, name,
                                                           _request_timeout=cluster.request_timeout)
    except ApiException as exc:
        if exc.status == 404 and (error_body(exc).get("details") or {}).get("name"):
            return None
        raise explain(exc, cluster, "get", plural, name) from exc
    except Exception as exc:
        raise explain(exc, cluster, "get", plural, name) from exc


def find(cluster: Cluster, name: str) -> tuple[JobKind, dict]:
    """The PyTorchJob, else the TrainJob, of this name: the commands take either by name alone."""
    served, unserved = [], []
    for kind in kinds.ALL:
        try:
            job = get_job(cluster, name, kind)
        except NoResource as exc:
            unserved.append(exc)
            continue
        if job is not None:
            return kind, job
        served.append(kind)
    if not served:
        raise unserved[0]  # neither kind: the operator is what most users are missing
    where = f"in namespace {cluster.namespace}"
    if len(served) == 1:
        (kind,) = served
        raise UserError(f"{kind.kind} {name} not found {where}; list them with "
                        f"`kubectl get {kind.plural} -n {cluster.namespace}`")
    first, *others = served
    raise UserError(f"{first.kind} {name} not found {where}, nor a {' or a '.join(k.kind for k in others)}; list them "
                    f"with `kubectl get {','.join(k.plural for k in served)} -n {cluster.namespace}`")


def apply_custom(cluster: Cluster, obj: dict, plural: str, dry_run: bool = False) -> dict:
    """Server-side apply of a namespaced custom object (a job, a TrainingRuntime)."""
    group, _, version = obj["apiVersion"].partition("/")
    name = obj["metadata"]["name"]
    kwargs = {"field_manager": FIELD_MANAGER, "_content_type": APPLY}
    if dry_run:
        kwargs["dry_run"] = "All"
    applied = call(cluster, "apply", plural, name, cluster.custom.patch_namespaced_custom_object,
                   group, version, cluster.namespace, plural, name, obj, **kwargs)
    # The client only decodes a 200; an apply that creates answers 201, so read the object back.
    if applied is None and not dry_run:
        applied = get_custom(cluster, group, version, plural, name) or {}
    return applied or {}


def apply_job(cluster: Cluster, job: dict, dry_run: bool, kind: JobKind) -> dict:
    return apply_custom(cluster, job, kind.plural, dry_run)


def apply_pvc(cluster: Cluster, pvc: dict, dry_run: bool = False) -> dict:
    name = pvc["metadata"]["name"]
    kwargs = {"field_manager": FIELD_MANAGER, "_content_type": APPLY}
    if dry_run:
        kwargs["dry_run"] = "All"
    return call(cluster, "apply", "persistentvolumeclaims", name,
                cluster.core.patch_namespaced_persistent_volume_claim, name, cluster.namespace, pvc, **kwargs)


def delete_job(cluster: Cluster, name: str, kind: JobKind) -> None:
    call(cluster, "delete", kind.plural, name, cluster.custom.delete_namespaced_custom_object, kind.group, kind.version,
         cluster.namespace, kind.plural, name, propagation_policy="Foreground")


def pods(cluster: Cluster, job: str, kind: JobKind) -> list:
    result = call(cluster, "list", "pods", job, cluster.core.list_namespaced_pod, cluster.namespace,
                  label_selector=f"{kind.pod_label}={job}")
    return sorted(result.items, key=lambda p: replica_name(p))


def replica_name(pod) -> str:
    """master-0 / worker-1, node-0-1: as the kind whose labels the pod carries names it (else the
    pod name less its job's)."""
    labels = pod.metadata.labels or {}
    for kind in kinds.ALL:
        name = kind.replica_name(labels)
        if name:
            return name
    job = next((labels[k.pod_label] for k in kinds.ALL if labels.get(k.pod_label)), "")
    return pod.metadata.name[len(job) + 1:] if job and pod.metadata.name.startswith(job + "-") else pod.metadata.name


def condition(job: dict) -> tuple[str, dict]:
    """The job's state and the condition that says it, as its kind reads them; ("", {}) for no job."""
    if not job:
        return "", {}
    return kinds.for_object(job).condition(job)


TERMINAL = kinds.TERMINAL
