"""Rank 0's progress reports to a Kubeflow Trainer status server (KEP-2779), against real HTTPS
servers of the test's making: what it posts, with which token, how often; and that a server which
hangs or refuses leaves the training time as it is without one."""
from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from generator.controlplane.pki import Authority
from tests.support.trainer_procs import base_env, trainer

PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status"
ARGS = ["--dataset", "digits", "--epochs", "6", "--threads", "1", "--seed", "3", "--no-resume"]


class StatusServer:
    """HTTPS on 127.0.0.1 with a certificate of a CA of the test's; `answer` is the status code
    it gives, or None to read the request and never answer."""

    def __init__(self, folder, answer: int | None = 200):
        ca = Authority(folder / "pki")
        crt, key = ca.issue("status", "localhost", server=True, names=["localhost"], ips=["127.0.0.1"])
        self.ca_path, self.posts, self.answer, self.release = ca.cert_path, [], answer, threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.posts.append((time.monotonic(), self.path, self.headers["Authorization"], body))
                if server.answer is None:
                    server.release.wait(60)
                    return
                self.send_response(server.answer)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"message": "Forbidden"} if server.answer == 403 else body).encode())

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://localhost:{self.httpd.server_address[1]}{PATH}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def start(tmp_path, name: str, env: dict):
    return trainer([*ARGS, "--output-dir", str(tmp_path / name)], base_env(**env))


def finish(tmp_path, name: str, proc, on_line=None) -> tuple[str, dict]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if on_line:
            on_line()
    assert proc.wait(timeout=120) == 0, "".join(lines)
    return "".join(lines), json.loads((tmp_path / name / "metrics.json").read_text())


def reporter_env(tmp_path, server_url: str, ca) -> dict:
    (tmp_path / "token").write_text("first-token\n")
    return {"KUBEFLOW_TRAINER_SERVER_URL": server_url, "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(ca),
            "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}


def test_rank_0_posts_progress_time_left_and_metrics_at_most_every_5_s_with_the_token_read_afresh(tmp_path):
    server = StatusServer(tmp_path)
    rotated = []

    def rotate():
        if server.posts and not rotated:
            (tmp_path / "token").write_text("second-token")  # rotated, as the kubelet does
            rotated.append(True)

    try:
        log, _ = finish(tmp_path, "out", start(tmp_path, "out", reporter_env(tmp_path, server.url, server.ca_path)),
                        rotate)
    finally:
        server.close()
    assert "stopped" not in log
    assert len(server.posts) >= 2, log
    assert {path for _, path, _, _ in server.posts} == {PATH}
    tokens = [auth for _, _, auth, _ in server.posts]
    assert tokens[0] == "Bearer first-token" and tokens[-1] == "Bearer second-token"
    statuses = [body["trainerStatus"] for _, _, _, body in server.posts]
    percents = [s["progressPercentage"] for s in statuses]
    assert percents == sorted(percents) and all(0 <= p < 100 for p in percents[:-1]) and percents[-1] == 100
    assert all("lastUpdatedTime" in s for s in statuses)
    assert statuses[-1]["estimatedRemainingSeconds"] == 0
    assert any(s.get("estimatedRemainingSeconds", 0) > 0 for s in statuses[:-1])
    final = {m["name"]: m["value"] for m in statuses[-1]["metrics"]}
    assert set(final) == {"epoch", "step", "loss", "test_accuracy", "samples_per_second"}
    assert final["epoch"] == "6/6" and 0 < float(final["loss"]) and 0.5 < float(final["test_accuracy"]) <= 1
    times = [t for t, _, _, _ in server.posts[:-1]]  # the last report goes out when the run ends
    assert all(b - a >= 4.9 for a, b in zip(times, times[1:], strict=False)), times
    # The same figures are in the log, for those who read a PyTorchJob's, which ends as it always has.
    progress_lines = [line for line in log.splitlines() if line.startswith("progress ")]
    assert progress_lines and progress_lines[0].startswith("progress 14%, epoch 1/6, step 20/138, loss ")
    assert log.rstrip().splitlines()[-1].startswith("wrote ")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["is not there", "answers 503"])
def test_a_short_run_whose_reports_all_failed_says_so_once_when_it_ends(tmp_path, kind):
    """A run shorter than FAILURES reports: its last report failing is said, naming the cause,
    rather than nothing (a fast machine ended the digits run after two refused reports)."""
    from trainer.reporting import FAILURES, Reporter

    server = StatusServer(tmp_path, answer=503)
    url = server.url if kind == "answers 503" else f"https://localhost:{closed_port()}{PATH}"
    (tmp_path / "token").write_text("t\n")
    said = []
    try:
        reporter = Reporter(url, str(server.ca_path), str(tmp_path / "token"), said.append, interval=0.05)
        for step in range(FAILURES - 2):
            reporter.offer({"step": step})
        reporter.finish({"step": "last"})
    finally:
        server.close()
    assert len(said) == 1, said
    cause = {"is not there": "Connection refused", "answers 503": "the server answered 503"}[kind]
    assert said[0].startswith(f"progress reports to {url} stopped: ") and cause in said[0], said
    assert said[0].endswith("; the run's end went unreported"), said


# Two trainings side by side, three times (about 30 s each): the slow tier's, so `make test` keeps
# within 5 minutes.
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hangs", "refuses", "is not there"])
def test_a_server_that_hangs_or_refuses_leaves_training_time_unchanged_and_is_named_once(tmp_path, kind):
    server = StatusServer(tmp_path, answer=None if kind == "hangs" else 403)
    url = server.url if kind != "is not there" else f"https://localhost:{closed_port()}{PATH}"
    try:
        # Side by side, so that whatever else loads the machine loads both runs alike.
        alone = start(tmp_path, "alone", {})
        reporting = start(tmp_path, "reporting", reporter_env(tmp_path, url, server.ca_path))
        log, reported = finish(tmp_path, "reporting", reporting)
        _, baseline = finish(tmp_path, "alone", alone)
    finally:
        server.close()
    # Each report waited for on the training thread would add its 5 s timeout to this.
    assert reported["train_seconds"] <= baseline["train_seconds"] * 1.2 + 1.5, (baseline, reported)
    stops = [line for line in log.splitlines() if line.startswith("progress reports to ")]
    assert len(stops) == 1, log
    why = {"hangs": "no answer within 5 s", "refuses": "the server answered 403: Forbidden",
           "is not there": "Connection refused"}[kind]
    assert why in stops[0]
