"""`python -m tests.support.bench_cluster` (`make bench`): the local cluster's own figures, measured
in one run on this machine once its binaries and images are built: `cluster up` with the operator,
the trainer image's first pull into the new node (from the registry on this machine), and the
demo's job from `submit` to its first training step on the warm node (the image already there).
Goals beside each; it reports and fails nothing on time. Writes bench-cluster.json."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from generator import paths

# The goals of issue 56: `cluster up` at most 30 s once built; the first pull at most 20 s.
GOALS = {"cluster up": 30.0, "first pull of the trainer image": 20.0, "submit to first step": None}
FIRST_STEP = re.compile(r"epoch 1 step \d+/\d+ loss")


def _cli(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "generator", *args], env=env, cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"generator {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def _until(check, timeout: float, what: str) -> float:
    """Seconds until `check()` is true, polled every 0.2 s."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - start


def _pull(core, image: str) -> float:
    """The seconds a pod naming `image` waits for its pull on a node that lacks it."""
    pod = {"metadata": {"name": "bench-pull"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "pull", "image": image, "command": ["true"]}]}}
    core.create_namespaced_pod("default", pod)

    def pulled() -> bool:
        return core.read_namespaced_pod("bench-pull", "default").status.phase in ("Succeeded", "Failed")

    try:
        return _until(pulled, 900, f"{image} to be pulled")
    finally:
        core.delete_namespaced_pod("bench-pull", "default", grace_period_seconds=0)


def _first_step(env: dict, core, values: Path) -> float:
    start = time.monotonic()
    _cli(env, "submit", str(values), "--release", "bench")

    def stepped() -> bool:
        try:
            return bool(FIRST_STEP.search(core.read_namespaced_pod_log("bench-master-0", "default")))
        except Exception:  # not created, or not started yet
            return False

    _until(stepped, 600, "the Master's first training step")
    return time.monotonic() - start


def measure(folder: Path) -> dict[str, float]:
    from kubernetes import client, config

    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    start = time.monotonic()
    up = _cli(env, "cluster", "up", "--dir", str(folder / "cluster"))
    figures = {"cluster up": time.monotonic() - start}
    kubeconfig = up.stdout.strip().split("=", 1)[1]
    env["KUBECONFIG"] = kubeconfig
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        core = client.CoreV1Api(client.ApiClient(configuration))
        values = folder / "values.yaml"
        _cli(env, "values", "--name", "bench", "--workers", "2", "--cpu", "250m", "--memory", "512Mi",
             "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(values))
        rendered = _cli(env, "render", str(values)).stdout
        image = re.search(r"image: \"?([^\s\"]+)", rendered).group(1)
        figures["first pull of the trainer image"] = _pull(core, image)
        figures["submit to first step"] = _first_step(env, core, values)
        figures["image"] = image  # type: ignore[assignment]
    finally:
        subprocess.run([sys.executable, "-m", "generator", "cluster", "down", "--purge", "--dir", str(folder / "cluster")],
                       env=env, cwd=paths.ROOT, capture_output=True, timeout=300)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.bench_cluster", description=__doc__)
    p.add_argument("--output", default="bench-cluster.json")
    ns = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pjk-bench-", dir="/tmp") as tmp:
        figures = measure(Path(tmp))
    print(f"{'cluster figure':<34}{'seconds':>9}   goal")
    report = {"seconds": {}, "goal_seconds": GOALS, "met": {}, "image": figures.pop("image")}
    for name, seconds in figures.items():
        goal = GOALS[name]
        met = None if goal is None else seconds <= goal
        report["seconds"][name], report["met"][name] = seconds, met
        said = "-" if goal is None else f"<= {goal:g} s: {'met' if met else 'NOT MET'}"
        print(f"{name:<34}{seconds:>9.1f}   {said}")
    Path(ns.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
