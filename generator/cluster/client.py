"""The Kubernetes API through the `kubernetes` client, with every failure a user can meet
turned into a sentence that says what to do."""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Callable

from generator import FIELD_MANAGER, kinds
from generator.errors import UserError
from generator.kinds.base import JobKind

APPLY = "application/apply-patch+yaml"


class NoResource(UserError):
    """The cluster does not serve the kind at all: its CRD is missing."""


DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds for one request, as kubectl's --request-timeout
# What the API server says when a webhook's Service has no ready pod behind it, or a pod that is not
# listening yet: an operator starting or restarting, which a write outlasts by asking again.
TRANSIENT_WEBHOOK = ("no endpoints available for service", "connect: connection refused")


@dataclass
class Cluster:
    core: object
    custom: object
    namespace: str
    server: str
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    # Told, once per call, that a write is waiting for an admission webhook to come back.
    on_wait: Callable[[str], None] | None = None


@dataclass(frozen=True)
class WebhookDown:
    """An admission webhook the API server could not call (as opposed to one that said no)."""
    webhook: str
    reason: str
    service: str = ""  # the webhook's Service, and its namespace, where the server named its URL
    namespace: str = ""

    @property
    def transient(self) -> bool:
        return any(sign in self.reason for sign in TRANSIENT_WEBHOOK)


def webhook_down(exc) -> WebhookDown | None:
    """The webhook a failed write could not reach, from the API server's message; None for any other failure."""
    message = error_body(exc).get("message") or ""
    found = re.search(r'failed calling webhook "([^"]+)": (?:failed to call webhook: )?(.*)', message, re.S)
    if not found:
        return None
    said = found.group(2).strip()
    url = re.search(r'https://([a-z0-9-]+)\.([a-z0-9-]+)\.svc[.:/]', said)
    reason = re.sub(r'^[A-Za-z]+ "[^"]*": ', "", said)  # the request line (Post "https://...") says nothing new
    return WebhookDown(found.group(1), reason, *(url.groups() if url else ()))


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


def explain(exc: Exception, cluster: Cluster, verb: str, resource: str, name: str = "", waited: float = 0) -> UserError:
    """An API failure as an error that says what to do; `waited`: seconds spent asking again."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, HTTPError) or isinstance(exc, OSError):
        reason = getattr(exc, "reason", None) or exc
        return UserError(f"cannot reach the cluster at {cluster.server} ({_short(reason)}); check your network or VPN "
                         "and the current context (`kubectl cluster-info`)")
    if not isinstance(exc, ApiException):
        return UserError(f"{verb} {resource}: {exc}")
    body = error_body(exc)
    message = body.get("message") or exc.reason or ""
    where = f"in namespace {cluster.namespace}"
    kind = kinds.by_plural(resource)
    if exc.status == 404 and kind and not (body.get("details") or {}).get("name"):
        return NoResource(f"the cluster has no {kind.kind} resource (CRD {kind.plural}.{kind.group} is missing); "
                          f"{kind.install}")
    if exc.status == 404 and (body.get("details") or {}).get("kind") == "namespaces":
        return UserError(f"namespace {cluster.namespace} does not exist; create it first (kubectl create namespace "
                         f"{cluster.namespace}) or pass another --namespace")
    if exc.status == 404:
        return UserError(f"{_kind(resource)} {name} not found {where}; check the name and --namespace "
                         f"(kubectl get {resource} -n {cluster.namespace})")
    if "admission webhook" in message and "denied" in message:
        denial = message.split("denied the request:", 1)[-1].strip()
        # Named as the API server names it: the operator's, Trainer's or a policy engine's
        hook = re.search(r'admission webhook "([^"]+)"', message)
        who = f"the admission webhook {hook.group(1)}" if hook else "an admission webhook"
        return UserError(f"{who} rejected {_kind(resource)} {name}: {denial}; fix the job and "
                         "check it first with `python -m generator validate`")
    down = webhook_down(exc)
    if down:
        check = f"kubectl get pods,endpoints -n {down.namespace}" if down.service else "kubectl get pods -A"
        if down.transient and down.service:
            what = f"its Service {down.service} in namespace {down.namespace} has no pod ready to answer"
        elif down.service:
            what = f"the API server cannot reach its Service {down.service} in namespace {down.namespace}"
        else:
            what = "the API server cannot reach the server it names"
        waited = f", still after {waited:g}s" if waited else ""
        return UserError(f"the API server could not call the admission webhook {down.webhook} for {_kind(resource)} "
                         f"{name} ({down.reason}{waited}): {what}; check the operator that serves it ({check}), then "
                         "run the command again")
    if exc.status == 401:
        return UserError(f"the cluster at {cluster.server} rejected your credentials ({message}); log in again or "
                         "refresh the kubeconfig's token")
    if exc.status == 403:
        match = re.search(r'cannot (\w+) resource "([^"]+)"', message)
        what = f"{match.group(1)} {match.group(2)}" if match else f"{verb} {resource}"
        return UserError(f"forbidden: your user cannot {what} {where} ({message}); ask a cluster admin for a "
                         f"RoleBinding to the edit role (charts/pytorch-operator aggregates pytorchjobs into it)")
    if exc.status == 409:
        if "conflict" in message.lower() and "apply" in message.lower():
            if "meta.helm.sh/release-name" in message or "app.kubernetes.io/instance" in message:
                return UserError(f"{_kind(resource)} {name} belongs to another Helm release ({message}); submit with "
                                 "that release's name as --release so the two agree, or delete the object first "
                                 f"(kubectl delete {resource} {name} -n {cluster.namespace})")
            return UserError(f"{_kind(resource)} {name}: fields are owned by another tool ({message}); edit it with "
                             "that tool, or delete it and submit again with --replace")
        return UserError(f"{_kind(resource)} {name} already exists {where} ({message}); pick another --name or "
                         "submit with --replace")
    if exc.status == 422 or exc.status == 400:
        return UserError(f"the API server rejected {_kind(resource)} {name}: {message}")
    return UserError(f"{verb} {resource} {name}: the API server answered {exc.status} {exc.reason}: {message}")


def error_body(exc) -> dict:
    """The API's Status object of a failed call; {} when it sent none."""
    try:
        return json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}


def _short(reason: object) -> str:
    text = str(reason)
    match = re.search(r"(Connection refused|Name or service not known|timed out|No route to host)", text)
    return match.group(1) if match else text[:120]


def _kind(resource: str) -> str:
    return {**{k.plural: k.kind for k in kinds.ALL}, "trainingruntimes": "TrainingRuntime", "pods": "pod",
            "persistentvolumeclaims": "PersistentVolumeClaim"}.get(resource, resource)


def failures() -> tuple[type[BaseException], ...]:
    """What a client call raises when the server refuses, fails or cannot be reached; anything
    else is a bug in the caller."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    return ApiException, HTTPError, OSError


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
