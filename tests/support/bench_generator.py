"""`python -m tests.support.bench_generator` (`make bench`): median wall time of the generator's
commands as whole processes (`python -m generator ...`, this checkout's code), each beside
`torchx run --dryrun dist.ddp` for the same 3-pod job measured in the same run, when torchx is on
PATH. Goals: every command at most 0.25 s and at least 4x faster than torchx's dry run. It
reports; it fails nothing on time."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from generator import paths

GOAL_SECONDS = 0.25
GOAL_SPEEDUP = 4.0
TORCHX = "torchx dryrun"


def _env() -> dict[str, str]:
    """This checkout's generator whatever the venv has installed, and bytecode caches written
    and used, as a user has them (some environments set PYTHONDONTWRITEBYTECODE)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(paths.ROOT), env.get("PYTHONPATH")) if p)
    return env


def _time(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{proc.stderr}")
    return elapsed


def commands(py: str, tmp: str) -> dict[str, list[str]]:
    values = str(Path(tmp) / "values.yaml")
    manifest = str(paths.ROOT / "tests" / "manifests" / "vsphere-cpu.yaml")
    return {
        "--help": [py, "-m", "generator", "--help"],
        "values": [py, "-m", "generator", "values", "--name", "bench", "--workers", "2", "--cpu", "2",
                   "--memory", "4Gi", "-o", str(Path(tmp) / "out.yaml")],
        "validate": [py, "-m", "generator", "validate", values],
        "render": [py, "-m", "generator", "render", values, "-o", str(Path(tmp) / "manifests.yaml")],
        "import": [py, "-m", "generator", "import", manifest, "-o", str(Path(tmp) / "imported.yaml")],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.bench_generator", description=__doc__)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--output", default="bench-generator.json")
    ns = p.parse_args(argv)
    py, env = sys.executable, _env()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([py, "-m", "generator", "values", "--workers", "2", "-o", str(Path(tmp) / "values.yaml")],
                       check=True, capture_output=True, cwd=tmp, env=env)
        ours = commands(py, tmp)
        timed = dict(ours)
        torchx = shutil.which("torchx")
        if torchx:
            script = Path(tmp) / "train.py"
            script.write_text("print('hi')\n")
            # No workspace: its image patching needs a Docker engine, which a dry run should not.
            timed[TORCHX] = [torchx, "run", "--workspace", "", "--dryrun", "--scheduler", "kubernetes",
                             "-cfg", "queue=default", "dist.ddp", "-j", "3x1", "--script", str(script)]
        for cmd in timed.values():  # one untimed round: bytecode and the pod schema's cache in place
            _time(cmd, tmp, env)
        samples: dict[str, list[float]] = {k: [] for k in timed}
        for _ in range(ns.rounds):  # interleaved, so drift hits every command alike
            for name, cmd in timed.items():
                samples[name].append(_time(cmd, tmp, env))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    report: dict = {"rounds": ns.rounds, "median_seconds": medians, "goal_seconds": GOAL_SECONDS,
                    "goal_speedup": GOAL_SPEEDUP, "speedup": {}, "met": {}}
    print(f"{'command':<16}{'median s':>10}{'vs torchx':>11}   goal: <= {GOAL_SECONDS:g} s and >= {GOAL_SPEEDUP:g}x")
    for name in ours:
        line = f"{name:<16}{medians[name]:>10.3f}"
        met = medians[name] <= GOAL_SECONDS
        if TORCHX in medians:
            speedup = medians[TORCHX] / medians[name]
            report["speedup"][name] = speedup
            met = met and speedup >= GOAL_SPEEDUP
            line += f"{speedup:>10.1f}x"
        else:
            line += f"{'-':>11}"
        report["met"][name] = met
        print(f"{line}   {'met' if met else 'NOT MET'}")
    if TORCHX in medians:
        print(f"{TORCHX:<16}{medians[TORCHX]:>10.3f}")
    else:
        print("torchx is not on PATH (`make bench` installs it in .venv/torchx): the speedup goal is not checked")
    Path(ns.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
