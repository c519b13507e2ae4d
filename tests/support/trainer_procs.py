"""Start trainer processes the way the operator or torchrun would, for the trainer's tests."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from generator.container.ports import free_port  # noqa: F401 (re-exported for the trainer tests)

ROOT = Path(__file__).resolve().parents[2]


def base_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                        "MASTER_ADDR", "MASTER_PORT", "OUTPUT_DIR")}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **extra)
    return env


def operator_env(rank: int, world: int, port: int) -> dict:
    """What training-operator injects into a pod with nprocPerNode 1: no LOCAL_RANK."""
    return base_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                    PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port), PET_NNODES=str(world),
                    PET_NODE_RANK=str(rank), PET_NPROC_PER_NODE="1")


def trainer(args: list[str], env: dict, **popen) -> subprocess.Popen:
    popen.setdefault("text", True)
    return subprocess.Popen([sys.executable, "-m", "trainer", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def run_operator_job(world: int, args: list[str], timeout: float = 240) -> list[tuple[int, str]]:
    """One process per pod, as the operator launches them; (exit code, output) per rank. The job
    as a whole gets `timeout` seconds, not each rank in turn."""
    port = free_port()
    procs = [trainer(args, operator_env(rank, world, port)) for rank in range(world)]
    end = time.monotonic() + timeout
    results = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1.0, end - time.monotonic()))
            results.append((proc.returncode, out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


ARGS = ["--dataset", "digits", "--epochs", "6", "--threads", "1", "--seed", "3"]  # the trainer's tests' runs


def metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


class Lines:
    """A process's output read line by line without blocking once it is stopped: what it wrote
    before SIGSTOP is all there is to read."""

    def __init__(self, proc):
        self.fd, self.buffer, self.seen = proc.stdout.fileno(), b"", []

    def until(self, prefix: str) -> str:
        while True:
            line = self._next(None)
            if line is None or line.startswith(prefix):
                return line

    def drain(self) -> list[str]:
        got = []
        while (line := self._next(0.5)) is not None:
            got.append(line)
        return got

    def rest(self) -> str:
        while self._next(None) is not None:
            pass
        return "".join(self.seen)

    def _next(self, timeout):
        while b"\n" not in self.buffer:
            if timeout is not None and not select.select([self.fd], [], [], timeout)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.seen.append(line.decode() + "\n")
        return line.decode()


def stop_with_sigterm(proc, lines: Lines, at: str) -> int:
    """SIGTERM to a rank frozen (SIGSTOP) after the step line `at`: how many steps of the run
    it had finished when the signal came (epochs before included)."""
    reached = lines.until(at)
    assert reached is not None, lines.rest()
    proc.send_signal(signal.SIGSTOP)
    done = [line for line in [reached, *lines.drain()] if line.startswith("epoch ") and " step " in line]
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    epoch, rest = done[-1].removeprefix("epoch ").split(" step ")
    finished, per_epoch = (int(n) for n in rest.split()[0].split("/"))
    return (int(epoch) - 1) * per_epoch + finished


def stopped_at(log: str, per_epoch: int) -> tuple[int, int, int]:
    """From the line "stopping at epoch E, step S: ...": (E, S, steps of the run before S)."""
    said = next(line for line in log.splitlines() if line.startswith("stopping at epoch "))
    epoch, step = (int(n) for n in said.removeprefix("stopping at epoch ").split(":")[0].split(", step "))
    return epoch, step, (epoch - 1) * per_epoch + step
