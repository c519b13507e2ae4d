"""Small PyTorchJobs for the local runner's tests, and a check for leftover processes."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import yaml

MARKER = "PYTORCHJOB_KIT_TEST_RUN"


def job(name: str, master: str | None, worker: str | None = None, workers: int = 0, restart: str = "OnFailure",
        run_policy: dict | None = None, extra_env: list | None = None) -> tuple[dict, str]:
    """A job whose replicas run `python -c <code>`; returns it with its marker value."""
    marker = uuid.uuid4().hex
    env = [{"name": MARKER, "value": marker}] + (extra_env or [])

    def spec(code: str, replicas: int) -> dict:
        return {"replicas": replicas, "restartPolicy": restart, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0", "command": ["python", "-c", code], "env": env}]}}}

    specs = {}
    if master is not None:
        specs["Master"] = spec(master, 1)
    if worker is not None:
        specs["Worker"] = spec(worker, workers)
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": specs}}
    if run_policy:
        body["spec"]["runPolicy"] = run_policy
    return body, marker


def write(tmp_path: Path, body: dict) -> str:
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def alive(marker: str) -> list[int]:
    """Processes still running with this test's marker in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if f"{MARKER}={marker}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found



def digits_plan(folder: Path, name: str, epochs: int = 6, **values):
    """The chart's 3-replica job on digits (seeded, one thread each), planned for `generator run`."""
    from generator import helm, paths
    from generator.local import plan as local_plan

    merged = {"job": {"name": name}, "topology": {"workers": 2}, "output": {"enabled": True},
              "args": ["--dataset=digits", f"--epochs={epochs}", "--threads=1", "--seed=5"], **values}
    job = next(o for o in helm.render_objects(paths.JOB_CHART, merged) if o["kind"] == "PyTorchJob")
    return local_plan.plan(job, folder / name)


class Sink:
    """A runner's output, kept in memory for the test to read."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        return "".join(self.lines)
