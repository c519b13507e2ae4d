"""How far a running job has come, as `status` and `wait` print it: a TrainJob's from
status.trainerStatus (what the trainer posted to Trainer's status server), a PyTorchJob's, which
has no such API, from the newest `progress ...` line in rank 0's log, read through the API
server. The same fields either way, named the same in `--format json`."""
from __future__ import annotations

import re

# The trainer's line (trainer/progress.py RunProgress): "progress 42%, epoch 3/6, step 120/276,
# loss 0.1234, test accuracy 0.9712, 1461 samples/s, 85 s left"; every part but the first optional.
LINE = re.compile(r"^progress (\d+)%(?:, |$)")
PARTS = {"epoch": re.compile(r"(?:^|, )epoch (\d+/\d+)(?:,|$)"),
         "step": re.compile(r"(?:^|, )step (\d+/\d+)(?:,|$)"),
         "loss": re.compile(r"(?:^|, )loss ([-+0-9.eE]+|nan|inf)(?:,|$)"),
         "testAccuracy": re.compile(r"(?:^|, )test accuracy ([0-9.eE+-]+)(?:,|$)"),
         "samplesPerSecond": re.compile(r"(?:^|, )(\d+) samples/s(?:,|$)"),
         "remainingSeconds": re.compile(r"(?:^|, )(\d+) s left(?:,|$)")}
# Metric names the trainer posts, and the Kubeflow SDK's and transformers' names for the same.
METRICS = {"loss": ("loss", "train_loss"), "testAccuracy": ("test_accuracy", "eval_accuracy", "accuracy"),
           "samplesPerSecond": ("samples_per_second", "train_samples_per_second"), "epoch": ("epoch",),
           "step": ("step",)}
NUMBERS = ("loss", "testAccuracy")
RANK_0 = ("master-0", "node-0-0")  # a PyTorchJob's Master, a TrainJob's first node
TAIL_LINES = 400  # the trainer prints a progress line every few seconds, a step line every 20 steps


def empty() -> dict:
    return {"percent": None, "remainingSeconds": None, "loss": None, "testAccuracy": None, "epoch": None,
            "step": None, "samplesPerSecond": None, "updated": None, "source": None}


def parse_line(line: str) -> dict | None:
    """A `progress ...` line's figures; None for any other line."""
    text = line.strip()
    head = LINE.match(text)
    if not head:
        return None
    found = {**empty(), "percent": int(head.group(1))}
    for name, pattern in PARTS.items():
        match = pattern.search(text)
        if match:
            found[name] = _number(name, match.group(1))
    return found


def _number(name: str, text: str):
    if name in NUMBERS:
        return float(text)
    if name in ("remainingSeconds", "samplesPerSecond"):
        return int(text)
    return text


def of_trainjob(job: dict) -> dict | None:
    """status.trainerStatus (TrainJobStatus gate) as the report's fields; None when nothing was posted."""
    status = (job.get("status") or {}).get("trainerStatus")
    if not status:
        return None
    metrics = {m.get("name"): m.get("value") for m in status.get("metrics") or []}
    found = {**empty(), "percent": status.get("progressPercentage"),
             "remainingSeconds": status.get("estimatedRemainingSeconds"),
             "updated": status.get("lastUpdatedTime"), "source": "status.trainerStatus"}
    for field, names in METRICS.items():
        value = next((metrics[n] for n in names if metrics.get(n) not in (None, "")), None)
        if value is not None:
            try:
                found[field] = _number(field, str(value))
            except ValueError:
                found[field] = value  # as posted: someone else's trainer may write any string
    return found


def of_log(text: str, pod: str) -> dict | None:
    """The newest progress line of a log (with or without the kubelet's timestamps)."""
    for line in reversed(text.splitlines()):
        stamp, _, rest = line.partition(" ")
        found = parse_line(line) or (parse_line(rest) if re.match(r"^\d{4}-\d\d-\d\dT", stamp) else None)
        if found:
            if re.match(r"^\d{4}-\d\d-\d\dT", stamp):
                found["updated"] = stamp
            found["source"] = f"log of pod {pod}"
            return found
    return None


def read(c, kind, job: dict) -> dict | None:
    """The job's progress; None when it has reported none (yet). A log that cannot be read (the pod
    Pending, or gone) is no progress, not an error: status and wait still answer. A finished
    PyTorchJob's log says no more than its state does (its last line is at most 99 %)."""
    if kind.progress_in_status:
        return of_trainjob(job)
    from kubernetes.client.exceptions import ApiException

    from generator.cluster import client as api

    if api.condition(job)[0] in api.TERMINAL:
        return None

    name = job.get("metadata", {}).get("name", "")
    pods = api.pods(c, name, kind)
    first = next((p for p in pods if api.replica_name(p) in RANK_0), None)
    if first is None:
        return None
    try:
        text = c.core.read_namespaced_pod_log(first.metadata.name, c.namespace, container=kind.container,
                                              tail_lines=TAIL_LINES, timestamps=True)
    except ApiException:
        return None
    return of_log(text or "", first.metadata.name)


def one_line(p: dict | None) -> str:
    """`progress: 42% done, 85 s left, loss 0.1234, test accuracy 0.9712 (epoch 3/6)`."""
    if not p or p.get("percent") is None:
        return "progress: none reported yet"
    parts = [f"{p['percent']}% done"]
    if p.get("remainingSeconds") is not None:
        parts.append(f"{_duration(int(p['remainingSeconds']))} left")
    if p.get("loss") is not None:
        parts.append(f"loss {_figure(p['loss'])}")
    if p.get("testAccuracy") is not None:
        parts.append(f"test accuracy {_figure(p['testAccuracy'])}")
    where = f" (epoch {p['epoch']})" if p.get("epoch") else ""
    return "progress: " + ", ".join(parts) + where


def _figure(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
