"""The kubelet's log endpoint, which the API server's pods/log reaches: GET
/containerLogs/{namespace}/{pod}/{container} over TLS, for the API server's client certificate
only, with follow, previous, tailLines, limitBytes, sinceSeconds and timestamps. Container
output is kept one file per run, each line `<RFC 3339 time> stdout F <text>` as CRI runtimes
write it."""
from __future__ import annotations

import collections
import datetime
import http.server
import ssl
import threading
import time
import urllib.parse
from pathlib import Path

from generator.controlplane.components import APISERVER_KUBELET_CLIENT


class NotFound(Exception):
    pass


def _since(query: dict) -> datetime.datetime | None:
    if "sinceSeconds" in query:
        return datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=int(query["sinceSeconds"]))
    if "sinceTime" in query:
        return datetime.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
    return None


def _keep(line: str, since: datetime.datetime | None) -> bool:
    if since is None:
        return True
    try:
        return datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")) >= since
    except ValueError:
        return True


def _shown(line: str, timestamps: bool) -> str:
    stamp, _, rest = line.partition(" ")
    text = rest.split(" ", 2)[2] if rest.count(" ") >= 2 else ""
    return f"{stamp} {text}" if timestamps else text


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "pytorchjob-kit-kubelet"
    kubelet = None  # set by serve()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _plain(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if url.path in ("/healthz", "/healthz/"):
            return self._plain(200, "ok")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._plain(404, f"404 page not found: {url.path}")
        try:
            self._logs(*parts[1:], query)
        except NotFound as exc:
            self._plain(404 if "not found" in str(exc) else 400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _logs(self, namespace: str, pod: str, name: str, query: dict) -> None:
        worker, container = self.kubelet.container(namespace, pod, name)
        truthy = ("true", "1")
        previous = query.get("previous") in truthy
        if previous:
            if container.restarts == 0 or not worker.log_path(container, container.restarts - 1).exists():
                raise NotFound(f'previous terminated container "{name}" in pod "{pod}" not found')
            path, live = worker.log_path(container, container.restarts - 1), False
        else:
            path = worker.log_path(container, container.restarts)
            if not path.exists():
                reason = container.state.get("waiting", {}).get("reason", "ContainerCreating")
                raise NotFound(f'container "{name}" in pod "{pod}" is waiting to start: {reason}')
            live = True
        follow = query.get("follow") in truthy and live
        timestamps = query.get("timestamps") in truthy
        since = _since(query)
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        tail = int(query["tailLines"]) if query.get("tailLines") not in (None, "") else None
        try:  # opened before the answer starts: the pod may have been deleted, its folder with it
            f = open(path, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise NotFound(f'pod "{pod}" not found') from None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0

        def send(lines) -> bool:
            nonlocal sent
            for line in lines:
                if not _keep(line, since):
                    continue
                data = (_shown(line.rstrip("\n"), timestamps) + "\n").encode()
                if limit is not None and sent + len(data) > limit:
                    self.wfile.write(data[:limit - sent])
                    return False
                self.wfile.write(data)
                sent += len(data)
            self.wfile.flush()
            return True

        with f:
            first = f.readlines()
            if tail is not None:
                first = list(collections.deque(first, maxlen=tail)) if tail > 0 else []
            if not send(first) or not follow:
                return
            # Follow until this run of the container ends (its log file is closed for good).
            pending = ""
            while True:
                chunk = f.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        if not send([pending]):
                            return
                        pending = ""
                    continue
                if not worker.writing(container, path):
                    rest = f.read()
                    send([line for line in (pending + rest).splitlines(keepends=True) if line])
                    return
                time.sleep(0.2)


HANDSHAKE_SECONDS = 5.0
# Connections not yet known to be the API server's, at once: pods on the bridge reach this port,
# and each such connection is a thread until its handshake ends or times out. Past the cap a new
# one is closed at once; the API server's own requests stream for as long as they need.
MAX_UNAUTHENTICATED = 16


class _TLSServer(http.server.ThreadingHTTPServer):
    """TLS per connection, in the connection's own thread and with a deadline, so that a client
    that connects and says nothing holds up nobody else; at most MAX_UNAUTHENTICATED of those at
    a time; and only the API server gets an answer."""

    daemon_threads = True
    context: ssl.SSLContext
    client_cn: str
    unauthenticated: threading.BoundedSemaphore

    def process_request(self, request, client_address):
        if not self.unauthenticated.acquire(blocking=False):
            self.shutdown_request(request)  # no thread for it: closed now
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.unauthenticated.release()
            raise

    def finish_request(self, request, client_address):
        try:
            request.settimeout(HANDSHAKE_SECONDS)
            try:
                tls = self.context.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                request.close()
                return
            subject = dict(field[0] for field in (tls.getpeercert() or {}).get("subject", ()))
            if subject.get("commonName") != self.client_cn:  # signed by the cluster's CA, but not the API server
                tls.close()
                return
        finally:
            self.unauthenticated.release()
        tls.settimeout(None)  # a followed log streams for as long as the container runs
        super().finish_request(tls, client_address)

    def shutdown_request(self, request):
        try:
            super().shutdown_request(request)
        except OSError:
            pass


def serve(kubelet, address: str, port: int, cert: Path, key: Path, client_ca: Path,
          client_cn: str = APISERVER_KUBELET_CLIENT) -> http.server.ThreadingHTTPServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(str(client_ca))
    context.verify_mode = ssl.CERT_REQUIRED
    handler = type("KubeletHandler", (Handler,), {"kubelet": kubelet})
    server = _TLSServer((address, port), handler)
    server.context, server.client_cn = context, client_cn
    server.unauthenticated = threading.BoundedSemaphore(MAX_UNAUTHENTICATED)
    threading.Thread(target=server.serve_forever, name="kubelet-logs", daemon=True).start()
    return server
