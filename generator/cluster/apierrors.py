"""What a failed call to the Kubernetes API means to the user: the API server's refusals, an
unreachable server and an admission webhook it could not call, each turned into a sentence that
says what to do."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from generator import kinds
from generator.errors import UserError

if TYPE_CHECKING:
    from generator.cluster.client import Cluster


class NoResource(UserError):
    """The cluster does not serve the kind at all: its CRD is missing."""


# What the API server says when a webhook's Service has no ready pod behind it, or a pod that is not
# listening yet: an operator starting or restarting, which a write outlasts by asking again.
TRANSIENT_WEBHOOK = ("no endpoints available for service", "connect: connection refused")


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
    return {**{k.plural: k.kind for k in kinds.ALL}, **{plural: kind for k in kinds.ALL for kind, plural in k.companion_plurals.items()},
            "pods": "pod", "persistentvolumeclaims": "PersistentVolumeClaim"}.get(resource, resource)


def failures() -> tuple[type[BaseException], ...]:
    """What a client call raises when the server refuses, fails or cannot be reached; anything
    else is a bug in the caller."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    return ApiException, HTTPError, OSError
