"""`python -m tests.support.bench_generator` (`make bench`): median wall time of `values`, `validate` and
`import` as whole processes, beside `torchx run --dryrun dist.ddp` for the same 3-pod job
when torchx is installed. Goals: at most 0.3 s each, and 3x faster than torchx."""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from generator import paths

GOAL_SECONDS = 0.3
GOAL_SPEEDUP = 3.0


def _time(cmd: list[str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{proc.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.bench_generator", description=__doc__)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--output", default="bench-generator.json")
    ns = p.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        values = str(Path(tmp) / "values.yaml")
        subprocess.run([py, "-m", "generator", "values", "--workers", "2", "-o", values], check=True, capture_output=True)
        manifest = str(paths.ROOT / "tests" / "manifests" / "vsphere-cpu.yaml")
        commands = {
            "values": [py, "-m", "generator", "values", "--name", "bench", "--workers", "2", "--cpu", "2",
                       "--memory", "4Gi", "-o", str(Path(tmp) / "out.yaml")],
            "validate": [py, "-m", "generator", "validate", values],
            "import": [py, "-m", "generator", "import", manifest, "-o", str(Path(tmp) / "imported.yaml")],
        }
        torchx = shutil.which("torchx")
        if torchx:
            script = Path(tmp) / "train.py"
            script.write_text("print('hi')\n")
            # No workspace: its image patching needs a Docker engine, which a dry run should not.
            commands["torchx dryrun"] = [torchx, "run", "--workspace", "", "--dryrun", "--scheduler", "kubernetes",
                                         "-cfg", "queue=default", "dist.ddp", "-j", "3x1", "--script", str(script)]
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(ns.rounds):  # interleaved, so drift hits every command alike
            for name, cmd in commands.items():
                samples[name].append(_time(cmd, tmp))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    report = {"rounds": ns.rounds, "median_seconds": medians, "goal_seconds": GOAL_SECONDS}
    print(f"{'command':<16}{'median s':>10}{'goal':>8}  met")
    for name in ("values", "validate", "import"):
        met = medians[name] <= GOAL_SECONDS
        report.setdefault("met", {})[name] = met
        print(f"{name:<16}{medians[name]:>10.3f}{GOAL_SECONDS:>8.2f}  {'yes' if met else 'NO'}")
    if "torchx dryrun" in medians:
        report["torchx_speedup"] = {}
        print(f"{'torchx dryrun':<16}{medians['torchx dryrun']:>10.3f}")
        for name in ("values", "validate", "import"):
            speedup = medians["torchx dryrun"] / medians[name]
            report["torchx_speedup"][name] = speedup
            print(f"  {name} is {speedup:.1f}x faster than torchx's dry run (goal {GOAL_SPEEDUP:g}x): "
                  f"{'yes' if speedup >= GOAL_SPEEDUP else 'NO'}")
    else:
        print("torchx is not installed: `pip install torchx` to compare with its dry run")
    Path(ns.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
