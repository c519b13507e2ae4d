"""Rank 0's progress reports to Kubeflow Trainer's status server (KEP-2779, the TrainJobStatus
feature gate): the controller injects the server's URL and the paths of its CA and of a rotated
token, and a POST lands in the TrainJob's status.trainerStatus. Reports go out from a thread of
their own with bounded timeouts, at most one per interval, so a slow, hanging or refusing server
never slows or stops training; the first failure that will not heal, or a few in a row, ends
reporting with one line in the log saying why."""
from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone

URL_ENV, CA_ENV, TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_URL", "KUBEFLOW_TRAINER_SERVER_CA_CERT", "KUBEFLOW_TRAINER_SERVER_TOKEN"
INTERVAL = 5.0  # seconds between reports: upstream's clients keep at least this far apart
TIMEOUT = 5.0  # connect and read, per report
FAILURES = 3  # failures in a row (timeouts, refusals, server errors) that end reporting


def payload(percent: int, remaining: int | None, metrics: dict[str, str]) -> dict:
    """The status server's UpdateTrainJobStatusRequest."""
    status: dict = {"progressPercentage": max(0, min(100, int(percent))),
                    "metrics": [{"name": k, "value": v} for k, v in metrics.items()],
                    "lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if remaining is not None:
        status["estimatedRemainingSeconds"] = max(0, int(remaining))
    return {"trainerStatus": status}


class Reporter:
    """Offer() hands the newest report over and returns at once; the thread posts the newest one
    it holds once INTERVAL has passed since its last post. finish() posts the last report and
    waits for it at most `wait` seconds."""

    def __init__(self, url: str, ca: str, token: str, log: Callable[[str], None],
                 interval: float = INTERVAL, timeout: float = TIMEOUT):
        self.url, self.ca, self.token, self.log = url, ca, token, log
        self.interval, self.timeout = interval, timeout
        self._cond = threading.Condition()
        self._pending: dict | None = None
        self._final = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="trainer-status-reports", daemon=True)
        self._thread.start()

    @classmethod
    def from_env(cls, log: Callable[[str], None], env=os.environ) -> Reporter | None:
        url = env.get(URL_ENV)
        if not url:
            return None
        return cls(url, env.get(CA_ENV, ""), env.get(TOKEN_ENV, ""), log)

    def offer(self, report: dict) -> None:
        with self._cond:
            if self._stopped or self._final:
                return
            self._pending = report
            self._cond.notify()

    def finish(self, report: dict, wait: float = TIMEOUT) -> None:
        with self._cond:
            if not self._stopped:
                self._pending, self._final = report, True
                self._cond.notify()
        self._thread.join(wait)
        if self._thread.is_alive():
            self._stop(f"progress reports to {self.url} stopped: the last one got no answer within {wait:g} s")

    def _stop(self, line: str) -> None:
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
        self.log(line)  # once: whichever of the thread and finish() stops first says why

    def _run(self) -> None:
        last, failures = float("-inf"), 0
        while True:
            with self._cond:
                while not self._final and (self._pending is None or time.monotonic() - last < self.interval):
                    self._cond.wait(None if self._pending is None else self.interval - (time.monotonic() - last))
                report, final, self._pending = self._pending, self._final, None
            if report is not None:
                last = time.monotonic()
                why, lasting = self._post(report)
                failures = 0 if why is None else failures + 1
                # The run's last report failing is said too: a short run may end before FAILURES.
                if why is not None and (lasting or failures >= FAILURES or final):
                    times = f" (the last {failures} reports failed)" if failures > 1 else ""
                    then = "the run's end went unreported" if final else "training goes on"
                    self._stop(f"progress reports to {self.url} stopped: {why}{times}; {then}")
                    return
            if final:
                return

    def _post(self, report: dict) -> tuple[str | None, bool]:
        """None when the server took it, else why not and whether that will last."""
        try:
            with open(self.token) as f:  # rotated: read afresh for each report
                token = f.read().strip()
            context = ssl.create_default_context(cafile=self.ca or None)
        except (OSError, ssl.SSLError) as exc:
            return f"cannot read {exc.filename or self.ca or self.token}: {exc.strerror or exc}", True
        try:
            request = urllib.request.Request(self.url, data=json.dumps(report).encode(), method="POST", headers={
                "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        except ValueError as exc:  # not a URL
            return str(exc), True
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
                answer.read()
            return None, False
        except urllib.error.HTTPError as exc:
            message = _message(exc)
            # 429 and 5xx may pass; any other refusal (403 a token, 404 the job, 422 the body) will not.
            return f"the server answered {exc.code}{': ' + message if message else ''}", exc.code != 429 and exc.code < 500
        except ssl.SSLCertVerificationError as exc:
            return f"its certificate is not trusted ({exc.verify_message})", True
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                return f"no answer within {self.timeout:g} s", False
            return str(reason), False


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read() or b"{}").get("message", ""))[:200]
    except (ValueError, OSError, AttributeError):
        return ""
