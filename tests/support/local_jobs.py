"""Small PyTorchJobs for the local runner's tests, and a check for leftover processes."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
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
    from generator.kinds.pytorchjob import plan as v1_plan

    merged = {"job": {"name": name}, "topology": {"workers": 2}, "output": {"enabled": True},
              "args": ["--dataset=digits", f"--epochs={epochs}", "--threads=1", "--seed=5"], **values}
    job = next(o for o in helm.render_objects(paths.JOB_CHART, merged) if o["kind"] == "PyTorchJob")
    return check_ranks(v1_plan.plan(job, folder / name))


def check_ranks(plan):
    """The plan, once each replica's node rank is its own, 0 to n-1 (RANK under training-operator,
    PET_NODE_RANK under both it and Trainer v2). Checked before anything starts: two replicas of
    one rank would wait in the rendezvous until a timeout instead of failing."""
    from generator.kinds.trainjob.contract import JobSetPolicy

    keys = ("PET_NODE_RANK",) if isinstance(plan.policy, JobSetPolicy) else ("RANK", "PET_NODE_RANK")
    for key in keys:
        ranks = [r.env.get(key) for r in plan.replicas]
        assert ranks == [str(i) for i in range(len(ranks))], f"{key} of {[r.name for r in plan.replicas]}: {ranks}"
    return plan


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


class Generator:
    """`python -m generator ARGS` as a child process whose stdout and stderr are read as they come,
    so a test waits for a line with a deadline, and fails showing what it saw instead of blocking
    until the suite's timeout."""

    def __init__(self, *args: str, cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "generator", *args], cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.changed = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(pipe, lines), daemon=True)
                        for pipe, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    def _read(self, pipe, lines: list[str]) -> None:
        for line in pipe:
            with self.changed:
                lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, suffix: str, count: int = 1, timeout: float = 60, stderr: bool = False) -> None:
        """Until `count` lines of stdout (or stderr) end with `suffix`."""
        end = time.monotonic() + timeout
        lines = self.err if stderr else self.out
        with self.changed:
            while sum(line.rstrip().endswith(suffix) for line in lines) < count:
                left = end - time.monotonic()
                ended = self.proc.poll() is not None and not any(reader.is_alive() for reader in self.readers)
                assert left > 0 and not ended, (
                    f"{count} line(s) ending {suffix!r} not seen in {timeout:g}s "
                    f"(exit code {self.proc.poll()}):\n{''.join(self.out)}{''.join(self.err)}")
                self.changed.wait(min(left, 0.5))

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it has ended."""
        code = self.proc.wait(timeout)
        for reader in self.readers:
            reader.join(5)
        return code, "".join(self.out), "".join(self.err)
