"""`python -m tests.support.bench_trainer` (`make bench`): the trainer against its baselines, both sides of
each comparison in the same run, interleaved, medians reported. Writes bench.json.

1. throughput at world size 1 vs a bare loop (same model, batch, threads, data; no DDP, no logging)
2. DDP efficiency: aggregate samples/s of 2 processes (1 thread each) over 1 process with 1 thread,
   divided by the machine's ceiling (two independent bare loops at once over one alone); the 2
   processes sum gradients in shared memory, as the trainer does by default on one host, and
   through gloo's TCP (`--allreduce backend`), side by side
3. seconds to 97% digits test accuracy: the default recipe vs the Kubeflow example's
   (SGD, lr 0.01, momentum 0.5, batch 64)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOALS = {"throughput_vs_bare_loop": 0.95, "ddp_efficiency": 0.9, "time_to_97_ratio": 1 / 3}


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return env


def _trainer(args: list[str], world: int = 1) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "trainer", *args, "--output-dir", out, "--no-resume"]
        if world == 1:
            subprocess.run(cmd, env=_env(), check=True, stdout=subprocess.DEVNULL)
        else:
            port = str(_free_port())
            procs = [subprocess.Popen(cmd, env=_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(world),
                                                    RANK=str(r)), stdout=subprocess.DEVNULL) for r in range(world)]
            if any(p.wait() for p in procs):
                raise SystemExit("a benchmark process failed")
        return json.loads((Path(out) / "metrics.json").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_loop(samples: int, batch: int, epochs: int, seed: int) -> float:
    """The same model, data and steps with nothing around them; samples per second."""
    import torch
    import torch.nn.functional as F

    from trainer import data, heap
    from trainer.model import Net

    heap.keep_freed_memory()  # as the trainer does: the same allocator behaviour on both sides
    torch.set_num_threads(1)
    train, _ = data.synthetic(samples, seed)
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    # A few untimed steps first: one-time kernel and allocator set-up would otherwise count
    # against the bare loop only, flattering the trainer.
    for idx in data.shard(len(train), 0, seed, 0, 1, batch)[:5]:
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(train.x[idx]), train.y[idx]).backward()
        optimizer.step()
    seconds, done = 0.0, 0
    for epoch in range(epochs):
        batches = data.shard(len(train), epoch, seed, 0, 1, batch)
        t0 = time.perf_counter()
        for idx in batches:
            optimizer.zero_grad(set_to_none=True)
            F.nll_loss(model(train.x[idx]), train.y[idx]).backward()
            optimizer.step()
        seconds += time.perf_counter() - t0
        done += batches.numel()
    return done / seconds


def _bare(samples: int, batch: int, epochs: int) -> float:
    out = subprocess.run([sys.executable, "-m", "tests.support.bench_trainer", "--bare", str(samples), str(batch), str(epochs)],
                         env=_env(), check=True, capture_output=True, text=True).stdout
    return float(out.strip())


def _independent_pair(samples: int, batch: int, epochs: int) -> float:
    """Two bare loops at once, no communication: their summed rate over one loop alone."""
    cmd = [sys.executable, "-m", "tests.support.bench_trainer", "--bare", str(samples), str(batch), str(epochs)]
    procs = [subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, text=True) for _ in range(2)]
    together = sum(float(p.communicate()[0]) for p in procs)
    return together / _bare(samples, batch, epochs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.bench_trainer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--output", default="bench.json")
    p.add_argument("--bare", nargs=3, type=int, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.bare:
        # The second pass is the steady state (allocator and thread pools settled): the
        # strictest baseline, since the trainer's own figure includes its first steps.
        bare_loop(ns.bare[0], ns.bare[1], ns.bare[2], seed=1)
        print(bare_loop(ns.bare[0], ns.bare[1], ns.bare[2], seed=1))
        return 0

    synthetic = ["--dataset", "synthetic", "--synthetic-size", "4096", "--epochs", "3", "--threads", "1", "--seed", "1"]
    big = [*synthetic, "--batch-size", "256", "--synthetic-size", "8192"]
    one, bare_rate, two, two_gloo, one_big, two_big, ceiling, efficiency, efficiency_gloo = ([] for _ in range(9))
    fast, seeds = [], []
    for r in range(ns.rounds):
        print(f"round {r + 1}/{ns.rounds}", file=sys.stderr, flush=True)
        # Each round's DDP efficiency is taken from runs seconds apart: this shared machine's speed
        # drifts by more than the differences being measured over a whole benchmark.
        one.append(_trainer(synthetic)["samples_per_second"])
        bare_rate.append(_bare(4096, 64, 3))  # the same 4096 samples, 7/8 of them for training
        two.append(_trainer(synthetic, world=2)["samples_per_second"])
        two_gloo.append(_trainer([*synthetic, "--allreduce", "backend"], world=2)["samples_per_second"])
        ceiling.append(_independent_pair(4096, 64, 3))
        efficiency.append(two[-1] / one[-1] / ceiling[-1])
        efficiency_gloo.append(two_gloo[-1] / one[-1] / ceiling[-1])
        one_big.append(_trainer(big)["samples_per_second"])
        two_big.append(_trainer(big, world=2)["samples_per_second"])
        target = ["--dataset", "digits", "--threads", "1", "--seed", str(r + 1), "--target-accuracy", "0.97"]
        fast.append(_trainer([*target, "--epochs", "40"])["elapsed_seconds"])
        seeds.append(_trainer([*target, "--epochs", "200", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.5",
                               "--lr-scaling", "none", "--batch-size", "64"])["elapsed_seconds"])

    med = statistics.median
    results = {
        "throughput_vs_bare_loop": {"trainer_samples_per_s": med(one), "bare_samples_per_s": med(bare_rate),
                                    "ratio": med(one) / med(bare_rate)},
        "ddp_efficiency": {"one_process_samples_per_s": med(one), "two_process_samples_per_s": med(two),
                           "scaling": med(two) / med(one), "ceiling": med(ceiling),
                           "note": "2 processes over 1 (1 thread each), gradients summed in shared memory, divided "
                                   "by the machine ceiling: two independent bare loops at once over one alone, "
                                   "measured in the same round; median of the rounds' quotients",
                           "rounds": [round(e, 3) for e in efficiency], "ratio": med(efficiency)},
        "ddp_efficiency_gloo": {"two_process_samples_per_s": med(two_gloo), "scaling": med(two_gloo) / med(one),
                                "note": "the same, gradients summed by gloo over loopback TCP (--allreduce backend)",
                                "rounds": [round(e, 3) for e in efficiency_gloo], "ratio": med(efficiency_gloo)},
        "two_process_scaling_batch_256": {"one_process_samples_per_s": med(one_big),
                                          "two_process_samples_per_s": med(two_big), "ratio": med(two_big) / med(one_big)},
        "time_to_97_ratio": {"default_recipe_s": med(fast), "kubeflow_recipe_s": med(seeds),
                             "ratio": med(fast) / med(seeds)},
    }
    for key, goal in GOALS.items():
        ratio = results[key]["ratio"]
        results[key]["goal"] = round(goal, 3)
        results[key]["met"] = ratio <= goal if key == "time_to_97_ratio" else ratio >= goal
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "rounds": ns.rounds}
    Path(ns.output).write_text(json.dumps(results, indent=2) + "\n")

    def row(label: str, ours: str, base: str, ratio: str, goal: str = "", met: str = "") -> None:
        print(f"{label:<30}{ours:>11}{base:>11}{ratio:>8}{goal:>8}  {met}")

    def verdict(key: str) -> tuple[str, str]:
        return f"{results[key]['goal']:.2f}", "yes" if results[key]["met"] else "NO"

    row("comparison", "ours", "baseline", "ratio", "goal", "met")
    r = results["throughput_vs_bare_loop"]
    row("throughput vs bare loop", f"{r['trainer_samples_per_s']:.1f}", f"{r['bare_samples_per_s']:.1f}", f"{r['ratio']:.2f}",
        *verdict("throughput_vs_bare_loop"))
    r = results["ddp_efficiency"]
    row("2 procs, shared memory", f"{r['two_process_samples_per_s']:.1f}", f"{r['one_process_samples_per_s']:.1f}",
        f"{r['scaling']:.2f}")
    row("  machine ceiling (no comms)", "", "", f"{r['ceiling']:.2f}")
    row("  DDP efficiency", "", "", f"{r['ratio']:.2f}", *verdict("ddp_efficiency"))
    r = results["ddp_efficiency_gloo"]
    row("2 procs, gloo's TCP", f"{r['two_process_samples_per_s']:.1f}", "", f"{r['scaling']:.2f}")
    row("  DDP efficiency, gloo's TCP", "", "", f"{r['ratio']:.2f}")
    r = results["two_process_scaling_batch_256"]
    row("  2 vs 1 at batch 256", f"{r['two_process_samples_per_s']:.1f}", f"{r['one_process_samples_per_s']:.1f}",
        f"{r['ratio']:.2f}")
    r = results["time_to_97_ratio"]
    row("seconds to 97% digits", f"{r['default_recipe_s']:.1f}", f"{r['kubeflow_recipe_s']:.1f}", f"{r['ratio']:.2f}",
        *verdict("time_to_97_ratio"))
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
