"""`python -m tests.support.bench_nodeloss [--defaults]` (`make bench`): a node lost under a
PyTorchJob and a TrainJob on a local cluster of three nodes, for both remedies (the node started
again; the node deleted), timed from the kill to NotReady, to eviction, to the replacement pods
Running and to success (tests/support/nodeloss.py). With the rehearsal's settings (a 10 s node
grace period, 5 s tolerations, a 45 s process group timeout), or with `--defaults` Kubernetes' and
the trainer's own (50 s, 300 s, 300 s). Each figure is explained by the timers beside it. Writes
bench-nodeloss.json; it reports and fails nothing on time."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from tests.e2e.conftest import start_cluster, stop_cluster, trainer_image
from tests.support import nodeloss

SHORT = {"grace": 10, "toleration": 5, "timeout": 45}
DEFAULTS = {"grace": 50, "toleration": None, "timeout": 300}


def chain(settings: dict) -> dict[str, str]:
    """What each step waits on, in Kubernetes' and the trainer's timers."""
    toleration = settings["toleration"] if settings["toleration"] is not None else 300
    return {
        "NotReady": f"node-monitor-grace-period {settings['grace']} s after the last Lease renewal, found by the node "
                    "lifecycle controller's check every 5 s",
        "evicted": f"then the pods' tolerationSeconds ({toleration} s) for the unreachable taint",
        "remedy": "the moment the remedy was applied (the survivors meanwhile end at their process group's timeout, "
                  f"{settings['timeout']} s, and wait for the lost rank)",
        "replaced": "node started: its kubelet confirms the pods gone at once; node deleted: PodGC's 40 s quarantine, "
                    "then the controllers make the pods anew (JobSet's restart waits for them all to go)",
        "succeeded": "the rest of the training, resumed from the newest checkpoint",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.bench_nodeloss")
    parser.add_argument("--defaults", action="store_true", help="Kubernetes' and the trainer's own timers")
    parser.add_argument("--out", type=Path, default=Path("bench-nodeloss.json"))
    args = parser.parse_args(argv)
    settings = DEFAULTS if args.defaults else SHORT
    with tempfile.TemporaryDirectory(prefix="bench-nodeloss-") as tmp:
        folder = Path(tmp) / "c"
        cluster = start_cluster(folder, None, ["--nodes", "3", "--trainer", "--timeout", "900",
                                               *(["--node-grace-period", str(settings["grace"])]
                                                 if not args.defaults else [])])
        try:
            nodeloss.pull_everywhere(cluster, trainer_image(), cluster.nodes())
            trainer = ["--arg=--dataset=digits", "--arg=--threads=1", "--arg=--epochs=30",
                       f"--arg=--rdzv-timeout={settings['timeout']}"]
            runs = []
            for remedy in nodeloss.REMEDIES:
                timeline = nodeloss.rehearse(cluster, Path(tmp), remedy, settings["toleration"], trainer)
                runs.append({"remedy": remedy, "seconds_after_kill": timeline.marks})
                if remedy == "node deleted":
                    cluster.cli("cluster", "node", "start", timeline.node, "--dir", str(folder), check=True)
        finally:
            stop_cluster(cluster)
            cluster.cli("cluster", "down", "--purge", "--dir", str(folder))
    report = {"settings": settings, "runs": runs, "timers": chain(settings)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"node loss ({'defaults' if args.defaults else 'rehearsal'}: {settings})")
    for run in runs:
        print(f"  {run['remedy']:<20}" + "  ".join(f"{k} {v:g} s" for k, v in run["seconds_after_kill"].items()))
    for mark, why in report["timers"].items():
        print(f"  {mark}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
