"""The Kubernetes API through the `kubernetes` client, with every failure a user can meet
turned into a sentence that says what to do."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from generator.errors import UserError

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
FIELD_MANAGER = "pytorchjob-kit"
JOB_LABEL = "training.kubeflow.org/job-name"
TYPE_LABEL = "training.kubeflow.org/replica-type"
INDEX_LABEL = "training.kubeflow.org/replica-index"
APPLY = "application/apply-patch+yaml"


DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds for one request, as kubectl's --request-timeout


@dataclass
class Cluster:
    core: object
    custom: object
    namespace: str
    server: str
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT


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


def explain(exc: Exception, cluster: Cluster, verb: str, resource: str, name: str = "") -> UserError:
    """An API failure as an error that says what to do."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, HTTPError) or isinstance(exc, OSError):
        reason = getattr(exc, "reason", None) or exc
        return UserError(f"cannot reach the cluster at {cluster.server} ({_short(reason)}); check your network or VPN "
                         "and the current context (`kubectl cluster-info`)")
    if not isinstance(exc, ApiException):
        return UserError(f"{verb} {resource}: {exc}")
    body = _body(exc)
    message = body.get("message") or exc.reason or ""
    where = f"in namespace {cluster.namespace}"
    if exc.status == 404 and resource == PLURAL and not (body.get("details") or {}).get("name"):
        return UserError("the cluster has no PyTorchJob resource (CRD pytorchjobs.kubeflow.org is missing); "
                         "install charts/pytorch-operator first: helm install training charts/pytorch-operator "
                         "-n kubeflow --create-namespace")
    if exc.status == 404:
        return UserError(f"{_kind(resource)} {name} not found {where}; check the name and --namespace "
                         f"(kubectl get {resource} -n {cluster.namespace})")
    if "admission webhook" in message and "denied" in message:
        denial = message.split("denied the request:", 1)[-1].strip()
        return UserError(f"the operator's webhook rejected {_kind(resource)} {name}: {denial}; fix the job and "
                         "check it first with `python -m generator validate`")
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
            return UserError(f"{_kind(resource)} {name}: fields are owned by another tool ({message}); edit it with "
                             "that tool, or delete it and submit again with --replace")
        return UserError(f"{_kind(resource)} {name} already exists {where} ({message}); pick another --name or "
                         "submit with --replace")
    if exc.status == 422 or exc.status == 400:
        return UserError(f"the API server rejected {_kind(resource)} {name}: {message}")
    return UserError(f"{verb} {resource} {name}: the API server answered {exc.status} {exc.reason}: {message}")


def _body(exc) -> dict:
    try:
        return json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}


def _short(reason: object) -> str:
    text = str(reason)
    match = re.search(r"(Connection refused|Name or service not known|timed out|No route to host)", text)
    return match.group(1) if match else text[:120]


def _kind(resource: str) -> str:
    return {PLURAL: "PyTorchJob", "pods": "pod", "persistentvolumeclaims": "PersistentVolumeClaim"}.get(resource, resource)


def call(cluster: Cluster, verb: str, resource: str, name: str, fn, *args, **kwargs):
    """Run one API call; failures come back as UserError. A server that accepts and never
    answers fails it after the cluster's request timeout."""
    kwargs.setdefault("_request_timeout", cluster.request_timeout)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # every client failure is translated; nothing raw reaches the user
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if isinstance(exc, (ApiException, HTTPError, OSError)):
            raise explain(exc, cluster, verb, resource, name) from exc
        raise


def get_job(cluster: Cluster, name: str) -> dict | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.custom.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name,
                                                           _request_timeout=cluster.request_timeout)
    except ApiException as exc:
        if exc.status == 404 and (_body(exc).get("details") or {}).get("name"):
            return None
        raise explain(exc, cluster, "get", PLURAL, name) from exc
    except Exception as exc:
        raise explain(exc, cluster, "get", PLURAL, name) from exc


def apply_job(cluster: Cluster, job: dict, dry_run: bool = False) -> dict:
    name = job["metadata"]["name"]
    kwargs = {"field_manager": FIELD_MANAGER, "_content_type": APPLY}
    if dry_run:
        kwargs["dry_run"] = "All"
    applied = call(cluster, "apply", PLURAL, name, cluster.custom.patch_namespaced_custom_object,
                   GROUP, VERSION, cluster.namespace, PLURAL, name, job, **kwargs)
    # The client only decodes a 200; an apply that creates answers 201, so read the object back.
    if applied is None and not dry_run:
        applied = get_job(cluster, name) or {}
    return applied or {}


def apply_pvc(cluster: Cluster, pvc: dict, dry_run: bool = False) -> dict:
    name = pvc["metadata"]["name"]
    kwargs = {"field_manager": FIELD_MANAGER, "_content_type": APPLY}
    if dry_run:
        kwargs["dry_run"] = "All"
    return call(cluster, "apply", "persistentvolumeclaims", name,
                cluster.core.patch_namespaced_persistent_volume_claim, name, cluster.namespace, pvc, **kwargs)


def delete_job(cluster: Cluster, name: str) -> None:
    call(cluster, "delete", PLURAL, name, cluster.custom.delete_namespaced_custom_object, GROUP, VERSION,
         cluster.namespace, PLURAL, name, propagation_policy="Foreground")


def pods(cluster: Cluster, job: str) -> list:
    result = call(cluster, "list", "pods", job, cluster.core.list_namespaced_pod, cluster.namespace,
                  label_selector=f"{JOB_LABEL}={job}")
    return sorted(result.items, key=lambda p: replica_name(p))


def replica_name(pod) -> str:
    """master-0 / worker-1, from the operator's labels (or the pod name as a fallback)."""
    labels = pod.metadata.labels or {}
    if TYPE_LABEL in labels and INDEX_LABEL in labels:
        return f"{labels[TYPE_LABEL].lower()}-{labels[INDEX_LABEL]}"
    job = labels.get(JOB_LABEL, "")
    return pod.metadata.name[len(job) + 1:] if job and pod.metadata.name.startswith(job + "-") else pod.metadata.name


def condition(job: dict) -> tuple[str, dict]:
    """The job's last true condition type and the condition itself."""
    conditions = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return (conditions[-1]["type"], conditions[-1]) if conditions else ("Created" if job else "", {})


TERMINAL = ("Succeeded", "Failed")
