"""Recovery from a killed replica under load: with a CPU hog running, a replica SIGKILLed right
after the Master's first checkpoint or at a random moment. Whatever the moment, the stale
rendezvous is left at once and the peers of the dead rank fail fast (trainer/distributed.py), so
the job converges within two minutes of an uninterrupted run, to the same accuracy, with no
process left."""
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from generator.local import runner as local_run
from tests.support import local_jobs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
EPOCHS = 4
BOUND_SECONDS = 120  # beyond an uninterrupted run


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run's accuracies and time, with one core kept busy elsewhere (as on a
    shared node) for it and every case after it."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        plan = local_jobs.digits_plan(tmp_path_factory.mktemp("reference"), "reference", EPOCHS)
        start = time.monotonic()
        outcome = local_run.Runner(plan, out=local_jobs.Sink()).run()
        assert outcome.succeeded, outcome.reason
        yield _accuracies(plan), time.monotonic() - start
    finally:
        hog.kill()
        hog.wait()


def _accuracies(plan) -> list[float]:
    import json

    return json.loads((Path(plan.replicas[0].env["OUTPUT_DIR"]) / "metrics.json").read_text())["epoch_accuracies"]


CASES = {
    "worker-right-after-the-first-checkpoint": (1, None),
    "master-right-after-the-first-checkpoint": (0, None),
    "random-replica-at-a-random-moment-1": (None, 1),
    "random-replica-at-a-random-moment-2": (None, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_killed_replica_recovers_to_the_same_accuracy_in_bounded_time(tmp_path, reference, case):
    accuracies, reference_seconds = reference
    victim, seed = CASES[case]
    plan = local_jobs.digits_plan(tmp_path, "killed", EPOCHS)
    marker = uuid.uuid4().hex
    for replica in plan.replicas:
        replica.env[local_jobs.MARKER] = marker
    plan.active_deadline = int(reference_seconds + BOUND_SECONDS)  # a hang fails the job instead of the suite
    checkpoints = Path(plan.replicas[0].env["OUTPUT_DIR"]) / "checkpoints"
    if seed is not None:
        rng = random.Random(seed)
        victim, moment = rng.randrange(len(plan.replicas)), rng.uniform(1.0, 0.8 * reference_seconds)
    sink = local_jobs.Sink()
    runner = local_run.Runner(plan, out=sink)
    killed = threading.Event()
    start = time.monotonic()

    def due() -> bool:
        if seed is None:
            return checkpoints.is_dir() and any(checkpoints.iterdir())
        return time.monotonic() - start >= moment

    def kill() -> None:
        wait_for(due, plan.active_deadline, "the moment of the kill", interval=0.01)
        state = runner.states[victim]
        if state.proc and state.proc.poll() is None:
            os.killpg(state.proc.pid, signal.SIGKILL)
            killed.set()

    threading.Thread(target=kill, daemon=True).start()
    outcome = runner.run()
    elapsed = time.monotonic() - start
    assert killed.is_set(), "the replica had already ended; the case tested nothing"
    assert outcome.succeeded, f"{outcome.reason}\n{sink.text()[-3000:]}"
    assert elapsed <= reference_seconds + BOUND_SECONDS
    assert _accuracies(plan) == accuracies
    assert f"{plan.replicas[victim].name} | exited with code 137" in sink.text()
    assert local_jobs.alive(marker) == []
