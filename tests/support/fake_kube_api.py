"""TEST DOUBLE of the Kubernetes API server: just the paths the cluster commands use
(apply, get, list and watch of pytorchjobs; get and watch of trainjobs a test puts there; pods,
pod logs with follow; PVCs; delete) and the
error statuses a real server answers with. It speaks real HTTP on loopback so the real
`kubernetes` client library runs against it unpatched. It is not a Kubernetes.

It stays only for what the real control plane of `make e2e` cannot be made to produce: job
conditions and pod states that need a node to run pods (Running, Succeeded, Failed, restarts),
pod logs, an API server without the PyTorchJob CRD, a webhook refusal of a job our own checks
accept, and refusals keyed to one verb and resource. Everything else is tested against the real
API server in tests/e2e/."""
from __future__ import annotations

import copy
import datetime
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

TOKEN = "test-token"
JOBS = re.compile(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/pytorchjobs(?:/([^/]+))?$")
TRAINJOBS = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs(?:/([^/]+))?$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")
PVCS = re.compile(r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims(?:/([^/]+))?$")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeKubeAPI:
    """State plus switches for the errors a test wants; the test plays the operator by
    calling set_condition, add_pod and log."""

    def __init__(self):
        self.lock = threading.Condition()
        self.version = 0
        self.jobs: dict[tuple[str, str], dict] = {}
        self.trainjobs: dict[tuple[str, str], dict] | None = None  # None: Trainer's CRD is not installed
        self.pods: dict[tuple[str, str], dict] = {}
        self.pvcs: dict[tuple[str, str], dict] = {}
        self.logs: dict[tuple[str, str], dict] = {}
        self.crd_installed = True
        self.forbidden: set[tuple[str, str]] = set()  # (verb, resource)
        self.webhook = None  # callable(job) -> denial message or None
        self.foreign_owner: set[str] = set()  # job names whose fields another manager owns
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "FakeKubeAPI":
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            for entry in self.logs.values():
                entry["open"] = False
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path, namespace="ml", token=TOKEN) -> str:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}},
                         {"name": "other", "context": {"cluster": "fake", "user": "tester", "namespace": "other-ns"}}]}))
        return str(path)

    # -- the operator's side, driven by tests ------------------------------------------------
    def _bump(self, obj: dict) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.lock.notify_all()

    def set_condition(self, ns: str, name: str, ctype: str, reason: str = "", message: str = "",
                      replicas: dict | None = None) -> None:
        with self.lock:
            job = self.jobs[(ns, name)]
            status = job.setdefault("status", {})
            conditions = status.setdefault("conditions", [])
            # The history training-operator writes: Created stays True beside what follows it, and
            # only Running/Restarting turn False when the job moves on.
            if not conditions and ctype != "Created":
                conditions.append({"type": "Created", "status": "True", "reason": "PyTorchJobCreated",
                                   "message": f"PyTorchJob {name} is created.", "lastUpdateTime": now(),
                                   "lastTransitionTime": now()})
            for cond in conditions:
                if cond["status"] == "True" and cond["type"] in ("Running", "Restarting"):
                    cond["status"] = "False"
            status["conditions"].append({"type": ctype, "status": "True", "reason": reason or f"PyTorchJob{ctype}",
                                         "message": message or f"PyTorchJob {name} is {ctype.lower()}.",
                                         "lastUpdateTime": now(), "lastTransitionTime": now()})
            status.setdefault("startTime", now())
            if ctype in ("Succeeded", "Failed"):
                status["completionTime"] = now()
            if replicas:
                status["replicaStatuses"] = replicas
            self._bump(job)

    def put_trainjob(self, ns: str, job: dict) -> None:
        """A TrainJob as Trainer left it, status and all (installs Trainer's CRD)."""
        with self.lock:
            self.trainjobs = self.trainjobs or {}
            job = copy.deepcopy(job)
            job["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            self.trainjobs[(ns, job["metadata"]["name"])] = job
            self._bump(job)

    def add_pod(self, ns: str, job: str, role: str, index: int, phase: str = "Running", waiting: str | None = None,
                exit_code: int | None = None, restarts: int = 0) -> str:
        name = f"{job}-{role.lower()}-{index}"
        state: dict = {"running": {"startedAt": now()}}
        if waiting:
            state = {"waiting": {"reason": waiting}}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed",
                                    "startedAt": now(), "finishedAt": now()}}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                            "labels": {"training.kubeflow.org/job-name": job,
                                       "training.kubeflow.org/replica-type": role.lower(),
                                       "training.kubeflow.org/replica-index": str(index)}},
               "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
               "status": {"phase": phase, "containerStatuses": [
                   {"name": "pytorch", "ready": phase == "Running", "restartCount": restarts, "image": "trainer:1",
                    "imageID": "", "state": state}]}}
        with self.lock:
            self.pods[(ns, name)] = pod
            self.logs.setdefault((ns, name), {"current": [], "previous": [], "open": True})
            self._bump(pod)
        return name

    def update_pod(self, ns: str, name: str, phase: str, state: dict | None = None, restarts: int | None = None) -> None:
        with self.lock:
            pod = self.pods[(ns, name)]
            pod["status"]["phase"] = phase
            status = pod["status"]["containerStatuses"][0]
            if state is not None:
                status["state"] = state
            if restarts is not None:
                status["restartCount"] = restarts
            self._bump(pod)

    def log(self, ns: str, pod: str, *lines: str, previous: bool = False) -> None:
        with self.lock:
            entry = self.logs.setdefault((ns, pod), {"current": [], "previous": [], "open": True})
            for line in lines:
                entry["previous" if previous else "current"].append((stamp(), line))
                time.sleep(0.001)  # distinct, ordered timestamps
            self.lock.notify_all()

    def restart_container(self, ns: str, pod: str) -> None:
        """The kubelet restarts the container: the old log becomes --previous."""
        with self.lock:
            entry = self.logs[(ns, pod)]
            entry["previous"], entry["current"] = entry["current"], []
            entry["generation"] = entry.get("generation", 0) + 1
            status = self.pods[(ns, pod)]["status"]["containerStatuses"][0]
            status["restartCount"] += 1
            self._bump(self.pods[(ns, pod)])

    def give_up(self) -> None:
        """What a test that cannot go on does: every job and pod ends Failed and every log closes,
        so a command following them (`wait`, `logs --follow`) returns instead of waiting for ever."""
        with self.lock:
            for (ns, name), job in list(self.jobs.items()):
                if not any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
                           for c in (job.get("status") or {}).get("conditions", [])):
                    self.set_condition(ns, name, "Failed", reason="TestGaveUp", message="the test gave up")
            for (ns, name) in list(self.pods):
                self.update_pod(ns, name, "Failed", {"terminated": {"exitCode": 1, "reason": "Error"}})
            for entry in self.logs.values():
                entry["open"] = False
            self.lock.notify_all()

    def wait_for_request(self, method: str, part: str, after: int = 0, timeout: float = 20) -> None:
        """Until a `method` request whose path holds `part` has come in, past the first `after`
        requests: a test acts once the client has asked, instead of after a fixed sleep."""
        end = time.monotonic() + timeout
        with self.lock:
            while not any(m == method and part in path for m, path in self.requests[after:]):
                left = end - time.monotonic()
                assert left > 0, f"no {method} {part} request in {timeout:g}s; the last ones: {self.requests[-5:]}"
                self.lock.wait(left)

    def close_log(self, ns: str, pod: str) -> None:
        with self.lock:
            self.logs[(ns, pod)]["open"] = False
            self.lock.notify_all()

    # -- HTTP ------------------------------------------------------------------------------
    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                api._dispatch(self, "GET")

            def do_PATCH(self):
                api._dispatch(self, "PATCH")

            def do_DELETE(self):
                api._dispatch(self, "DELETE")

            def do_POST(self):
                api._dispatch(self, "POST")

        return Handler

    def _send(self, h, code: int, body: dict | str, content_type: str = "application/json") -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        h.send_response(code)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _status(self, h, code: int, reason: str, message: str, details: dict | None = None) -> None:
        self._send(h, code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                             "reason": reason, "details": details or {}, "code": code})

    def _stream_start(self, h, content_type: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

    def _chunk(self, h, data: str) -> bool:
        raw = data.encode()
        try:
            h.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            h.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _stream_end(self, h) -> None:
        try:
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _dispatch(self, h, method: str) -> None:
        url = urlparse(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, h.path))
            self.lock.notify_all()
        if h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._status(h, 401, "Unauthorized", "Unauthorized")
        if match := JOBS.match(url.path):
            return self._jobs(h, method, match.group(1), match.group(2), query, body)
        if (match := TRAINJOBS.match(url.path)) and self.trainjobs is not None:
            return self._trainjobs(h, method, match.group(1), match.group(2), query)
        if match := PODS.match(url.path):
            return self._pods(h, method, match.group(1), match.group(2), bool(match.group(3)), query)
        if match := PVCS.match(url.path):
            return self._pvcs(h, method, match.group(1), match.group(2), query, body)
        return self._status(h, 404, "NotFound", "the server could not find the requested resource")

    def _deny(self, h, verb: str, resource: str, group: str, ns: str, name: str | None) -> bool:
        if (verb, resource) in self.forbidden:
            who = f'{resource}{"." + group if group else ""} "{name}"' if name else f"{resource}{'.' + group if group else ''}"
            self._status(h, 403, "Forbidden", f'{who} is forbidden: User "tester" cannot {verb} resource "{resource}" '
                                              f'in API group "{group}" in the namespace "{ns}"')
            return True
        return False

    def _jobs(self, h, method, ns, name, query, body) -> None:
        if not self.crd_installed:
            return self._status(h, 404, "NotFound", "the server could not find the requested resource")
        verb = {"GET": "watch" if query.get("watch") in ("true", "1") else ("get" if name else "list"),
                "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
        if self._deny(h, verb, "pytorchjobs", "kubeflow.org", ns, name):
            return
        missing = {"name": name, "group": "kubeflow.org", "kind": "pytorchjobs"}
        if method == "GET" and name:
            with self.lock:
                job = copy.deepcopy(self.jobs.get((ns, name)))
            if job is None:
                return self._status(h, 404, "NotFound", f'pytorchjobs.kubeflow.org "{name}" not found', missing)
            return self._send(h, 200, job)
        if method == "GET":
            selector = query.get("fieldSelector", "")
            wanted = selector.split("=", 1)[1] if selector.startswith("metadata.name=") else None
            if verb == "watch":
                return self._watch_jobs(h, ns, wanted, int(query.get("timeoutSeconds", "30")))
            with self.lock:
                items = [copy.deepcopy(j) for (n, k), j in sorted(self.jobs.items()) if n == ns and wanted in (None, k)]
            return self._send(h, 200, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList",
                                       "metadata": {"resourceVersion": str(self.version)}, "items": items})
        if method == "PATCH":
            if "apply-patch" not in (h.headers.get("Content-Type") or ""):
                return self._status(h, 415, "UnsupportedMediaType", "only server-side apply is implemented here")
            incoming = json.loads(body)
            if name in self.foreign_owner:
                return self._status(h, 409, "Conflict", 'Apply failed with 1 conflict: conflict with "kubectl" using '
                                                        'kubeflow.org/v1: .spec.runPolicy.backoffLimit')
            if self.webhook and (denial := self.webhook(incoming)):
                return self._status(h, 403, "Forbidden", 'admission webhook "validator.pytorchjob.training-operator.'
                                                         f'kubeflow.org" denied the request: {denial}')
            with self.lock:
                existing = self.jobs.get((ns, name))
                result = copy.deepcopy(existing) if existing else {
                    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": now(),
                                 "resourceVersion": "0"}}
                changed = existing is None or any(existing.get(k) != incoming.get(k) for k in ("spec",)) or \
                    existing["metadata"].get("labels") != incoming.get("metadata", {}).get("labels")
                result["spec"] = copy.deepcopy(incoming.get("spec"))
                for key in ("labels", "annotations"):
                    if incoming.get("metadata", {}).get(key) is not None:
                        result["metadata"][key] = incoming["metadata"][key]
                if query.get("dryRun") == "All":
                    return self._send(h, 201 if existing is None else 200, result)
                if changed:
                    self.jobs[(ns, name)] = result
                    self._bump(result)
                return self._send(h, 201 if existing is None else 200, copy.deepcopy(self.jobs[(ns, name)]))
        if method == "DELETE":
            with self.lock:
                job = self.jobs.pop((ns, name), None)
                if job is None:
                    return self._status(h, 404, "NotFound", f'pytorchjobs.kubeflow.org "{name}" not found', missing)
                for key in [k for k, p in self.pods.items() if p["metadata"]["labels"].get(
                        "training.kubeflow.org/job-name") == name and k[0] == ns]:
                    self.pods.pop(key)
                self.version += 1
                self.lock.notify_all()
            return self._send(h, 200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                                       "details": {"name": name, "group": "kubeflow.org", "kind": "pytorchjobs"}})
        return self._status(h, 405, "MethodNotAllowed", f"{method} is not supported here")

    def _trainjobs(self, h, method, ns, name, query) -> None:
        if method != "GET":
            return self._status(h, 405, "MethodNotAllowed", f"{method} is not supported here")
        if name:
            with self.lock:
                job = copy.deepcopy(self.trainjobs.get((ns, name)))
            if job is None:
                return self._status(h, 404, "NotFound", f'trainjobs.trainer.kubeflow.org "{name}" not found',
                                    {"name": name, "group": "trainer.kubeflow.org", "kind": "trainjobs"})
            return self._send(h, 200, job)
        selector = query.get("fieldSelector", "")
        wanted = selector.split("=", 1)[1] if selector.startswith("metadata.name=") else None
        if query.get("watch") in ("true", "1"):
            return self._watch_jobs(h, ns, wanted, int(query.get("timeoutSeconds", "30")), self.trainjobs)
        with self.lock:
            items = [copy.deepcopy(j) for (n, k), j in sorted(self.trainjobs.items()) if n == ns and wanted in (None, k)]
        return self._send(h, 200, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJobList",
                                   "metadata": {"resourceVersion": str(self.version)}, "items": items})

    def _watch_jobs(self, h, ns: str, wanted: str | None, timeout: int, store: dict | None = None) -> None:
        self._stream_start(h, "application/json")
        end = time.monotonic() + timeout
        seen: dict[str, str] = {}
        store = self.jobs if store is None else store
        while time.monotonic() < end:
            with self.lock:
                current = {k: copy.deepcopy(j) for (n, k), j in store.items() if n == ns and wanted in (None, k)}
            events = []
            for key, job in current.items():
                rv = job["metadata"]["resourceVersion"]
                if seen.get(key) != rv:
                    events.append({"type": "ADDED" if key not in seen else "MODIFIED", "object": job})
                    seen[key] = rv
            for key in [k for k in seen if k not in current]:
                events.append({"type": "DELETED", "object": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                             "metadata": {"name": key, "namespace": ns}}})
                seen.pop(key)
            for event in events:
                if not self._chunk(h, json.dumps(event) + "\n"):
                    return
            with self.lock:
                self.lock.wait(timeout=min(0.5, max(0.0, end - time.monotonic())))
        self._stream_end(h)

    def _pods(self, h, method, ns, name, is_log, query) -> None:
        if self._deny(h, "get" if name else "list", "pods", "", ns, name):
            return
        if method != "GET":
            return self._status(h, 405, "MethodNotAllowed", f"{method} is not supported here")
        if not name:
            selector = query.get("labelSelector", "")
            key, _, value = selector.partition("=")
            with self.lock:
                items = [copy.deepcopy(p) for (n, _), p in sorted(self.pods.items())
                         if n == ns and (not key or p["metadata"]["labels"].get(key) == value)]
            return self._send(h, 200, {"apiVersion": "v1", "kind": "PodList",
                                       "metadata": {"resourceVersion": str(self.version)}, "items": items})
        with self.lock:
            pod = copy.deepcopy(self.pods.get((ns, name)))
        if pod is None:
            return self._status(h, 404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        if not is_log:
            return self._send(h, 200, pod)
        return self._log(h, ns, name, pod, query)

    def _log(self, h, ns, name, pod, query) -> None:
        state = pod["status"]["containerStatuses"][0]["state"]
        previous = query.get("previous") in ("true", "1")
        timestamps = query.get("timestamps") in ("true", "1")
        if "waiting" in state or pod["status"]["phase"] == "Pending":
            reason = state.get("waiting", {}).get("reason", "ContainerCreating")
            return self._status(h, 400, "BadRequest", f'container "pytorch" in pod "{name}" is waiting to start: {reason}')
        entry = self.logs.get((ns, name), {"current": [], "previous": [], "open": False})
        if previous and not entry["previous"]:
            return self._status(h, 400, "BadRequest", f'previous terminated container "pytorch" in pod "{name}" not found')
        fmt = (lambda s, line: f"{s} {line}\n") if timestamps else (lambda s, line: f"{line}\n")
        if previous or query.get("follow") not in ("true", "1"):
            with self.lock:
                lines = list(entry["previous" if previous else "current"])
            return self._send(h, 200, "".join(fmt(s, line) for s, line in lines), "text/plain")
        self._stream_start(h, "text/plain")
        sent = 0
        generation = entry.get("generation", 0)
        while True:
            with self.lock:
                lines = entry["current"][sent:] if entry.get("generation", 0) == generation else []
                restarted = entry.get("generation", 0) != generation
                still_open = entry["open"] and not restarted
            for s, line in lines:
                if not self._chunk(h, fmt(s, line)):
                    return
            sent += len(lines)
            if not still_open:
                break
            with self.lock:
                self.lock.wait(timeout=0.2)
        self._stream_end(h)

    def _pvcs(self, h, method, ns, name, query, body) -> None:
        verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete"}[method]
        if self._deny(h, verb, "persistentvolumeclaims", "", ns, name):
            return
        missing = {"name": name, "kind": "persistentvolumeclaims"}
        with self.lock:
            if method == "PATCH":
                incoming = json.loads(body)
                incoming.setdefault("metadata", {}).update(namespace=ns, uid=str(uuid.uuid4()))
                if query.get("dryRun") != "All":
                    self.pvcs[(ns, name)] = incoming
                    self._bump(incoming)
                return self._send(h, 200, incoming)
            if (ns, name) not in self.pvcs:
                return self._status(h, 404, "NotFound", f'persistentvolumeclaims "{name}" not found', missing)
            if method == "GET":
                return self._send(h, 200, self.pvcs[(ns, name)])
            deleted = self.pvcs.pop((ns, name))  # a real server answers with the object it deletes
            return self._send(h, 200, deleted)
