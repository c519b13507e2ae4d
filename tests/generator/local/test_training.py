"""The trainer under `generator run`: a 3-replica job, and a Worker killed mid-run."""
import json
import math
import os
import signal
import threading
from pathlib import Path

import pytest

from generator import helm, paths
from generator.kinds.trainjob import plan as v2_plan
from generator.local import plan as local_plan
from generator.local import runner as local_run
from tests.support import local_jobs

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

DIGITS_TRAIN = 1437


def _plan(tmp_path: Path, name: str, epochs: int = 6) -> local_plan.Plan:
    return local_jobs.digits_plan(tmp_path, name, epochs)


Sink = local_jobs.Sink


def _metrics(plan):
    folder = Path(plan.replicas[0].env["OUTPUT_DIR"])
    return json.loads((folder / "metrics.json").read_text())


# `make test` hands each file whole to one worker (--dist loadfile), so this runs once.
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The chart's 3-replica digits job run once without harm: what the killed runs must end as."""
    plan = _plan(tmp_path_factory.mktemp("uninterrupted"), "reference")
    sink = Sink()
    return plan, local_run.Runner(plan, out=sink).run(), sink


def test_three_replicas_succeed_each_taking_a_third_of_the_steps(uninterrupted):
    plan, outcome, sink = uninterrupted
    assert outcome.succeeded, outcome.reason
    # On a failure, every replica's exit code and the run's last lines say why.
    assert [s.status for s in outcome.states] == ["Succeeded"] * 3, (
        [(s.replica.name, s.status, s.exit_code) for s in outcome.states], sink.lines[-30:])
    m = _metrics(plan)
    assert m["world_size"] == 3
    single = math.ceil(DIGITS_TRAIN / 64)
    assert m["steps_per_rank"] == math.ceil(DIGITS_TRAIN / (3 * 64)) == math.ceil(single / 3)
    assert m["final_accuracy"] >= 0.95


@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_a_killed_worker_restarts_resumes_and_the_job_ends_as_an_uninterrupted_one(tmp_path, uninterrupted):
    reference, done, _ = uninterrupted
    assert done.succeeded, done.reason

    plan = _plan(tmp_path, "killed")
    sink = Sink()
    runner = local_run.Runner(plan, out=sink)

    def kill_worker_after_epoch_two():
        while not any("epoch 3 step" in line for line in sink.lines):
            threading.Event().wait(0.05)
        worker = runner.states[1]
        os.killpg(worker.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_worker_after_epoch_two, daemon=True)
    killer.start()
    outcome = runner.run()
    assert outcome.succeeded, outcome.reason
    worker = outcome.states[1]
    assert worker.restarts >= 1
    log = "".join(sink.lines)
    assert "worker-0 | exited with code 137; restarting (restartPolicy OnFailure" in log
    assert "resumed from" in log
    assert _metrics(plan)["epoch_accuracies"] == _metrics(reference)["epoch_accuracies"]


@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_trainer_v2_nodes_train_as_the_v1_job_does_and_a_killed_node_restarts_the_set(tmp_path, uninterrupted):
    """The same values as a TrainJob: torchrun in every node with only the PET_* variables, and a
    node killed mid-run fails its Job (backoffLimit 0), so every node starts again and resumes."""
    values = {"target": "v2", "job": {"name": "nodes"}, "topology": {"workers": 2},
              "output": {"enabled": True, "mountOn": "all", "accessModes": ["ReadWriteMany"]},
              "runPolicy": {"backoffLimit": 1},
              "args": ["--dataset=digits", "--epochs=6", "--threads=1", "--seed=5"]}

    def nodes():
        return local_jobs.check_ranks(v2_plan.plan(helm.render_objects(paths.JOB_CHART, values), tmp_path / "nodes"))

    assert all("RANK" not in r.env for r in nodes().replicas)  # the launch checked before anything runs
    reference, done, _ = uninterrupted
    assert done.succeeded, done.reason

    plan = nodes()  # planned now: its free port is picked just before it runs
    sink = Sink()
    runner = local_run.Runner(plan, out=sink)

    def kill_a_node_after_epoch_two():
        while not any("epoch 3 step" in line for line in sink.lines):
            threading.Event().wait(0.05)
        os.killpg(runner.states[1].proc.pid, signal.SIGKILL)

    threading.Thread(target=kill_a_node_after_epoch_two, daemon=True).start()
    outcome = runner.run()
    assert outcome.succeeded, outcome.reason
    assert outcome.reason == "every node succeeded"
    log = "".join(sink.lines)
    assert "node-0-1 | exited with code 137; the node Job failed, so every node restarts (JobSet restart 1 of 1)" in log
    assert "resumed from" in log
    assert [s.restarts for s in outcome.states] == [1, 1, 1]
    assert _metrics(plan)["epoch_accuracies"] == _metrics(reference)["epoch_accuracies"]
