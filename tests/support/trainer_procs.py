"""Start trainer processes the way the operator or torchrun would, for the trainer's tests."""
from __future__ import annotations

import os
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
