"""`status` and `wait` show how far a running job has come, over real HTTP against
tests/support/fake_kube_api.py (a job that runs needs a node; tests/e2e/test_progress.py runs
them for real): a PyTorchJob's from the trainer's own progress line in rank 0's log, a TrainJob's
from status.trainerStatus, the same fields either way."""
import io
import json

from tests.support import trainjobs
from tests.support.cli_helpers import run, run_beside
from tests.support.fake_kube_api import now
from trainer.progress import Progress, RunProgress
from trainer.reporting import payload

NS = "ml"
FIELDS = {"percent": 42, "remainingSeconds": 85, "loss": 0.1234, "testAccuracy": 0.9712, "epoch": "3/6",
          "step": "50/120", "samplesPerSecond": 1461}
SHOWN = "progress: 42% done, 85 s left, loss 0.1234, test accuracy 0.9712 (epoch 3/6)"


def trainer_line() -> str:
    """The line the trainer itself prints (trainer/progress.py), not a copy of its format."""
    out = io.StringIO()
    run_progress = RunProgress(Progress(True, 20, 20, out), 6, 20, 0, None)
    run_progress.accuracy, run_progress.loss, run_progress.rate, run_progress.done = 0.9712, 0.1234, 1461.0, 50
    run_progress.total = 120
    line, _ = run_progress._figures(42, 85)
    return line


def test_status_of_a_running_pytorchjob_reads_rank_0s_latest_progress_line(api, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    assert run("submit", str(values))[0] == 0
    api.set_condition(NS, "mnist", "Running")
    master, worker = api.add_pod(NS, "mnist", "Master", 0), api.add_pod(NS, "mnist", "Worker", 1)
    api.log(NS, master, "progress 10%, epoch 1/6, step 12/120, loss 0.9000, 900 samples/s, 300 s left",
            "epoch 3 step 20/20 loss 0.1300 1400 samples/s", trainer_line(), "epoch 4 step 2/20 loss 0.1200 1500 samples/s")
    api.log(NS, worker, "progress 99%, this is not rank 0")
    code, out, err = run("status", "mnist")
    assert code == 0, err
    assert out.splitlines()[2] == SHOWN
    code, out, _ = run("status", "mnist", "--format", "json")
    report = json.loads(out)["progress"]
    assert {k: report[k] for k in FIELDS} == FIELDS
    assert report["source"] == f"log of pod {master}" and report["updated"]


def test_status_of_a_pytorchjob_that_printed_no_progress_yet_says_so(api, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    assert run("submit", str(values))[0] == 0
    api.set_condition(NS, "mnist", "Running")
    api.log(NS, api.add_pod(NS, "mnist", "Master", 0), "training on digits: 1437 samples")
    code, out, _ = run("status", "mnist")
    assert code == 0 and "progress: none reported yet" in out
    assert json.loads(run("status", "mnist", "--format", "json")[1])["progress"] is None


def running_trainjob(percent: int, remaining: int, metrics: dict) -> dict:
    job = trainjobs.trainjob("mnist", {"numNodes": 2, "image": trainjobs.IMAGE})
    job["status"] = {"jobsStatus": [{"name": "node", "active": 2, "succeeded": 0, "failed": 0}],
                     **payload(percent, remaining, metrics)}  # what Trainer's status server writes
    return job


def test_status_of_a_trainjob_reads_its_trainer_status(api):
    api.put_trainjob(NS, running_trainjob(42, 85, {"epoch": "3/6", "step": "50/120", "loss": "0.1234",
                                                   "test_accuracy": "0.9712", "samples_per_second": "1461"}))
    code, out, err = run("status", "mnist")
    assert code == 0, err
    assert SHOWN in out.splitlines()
    report = json.loads(run("status", "mnist", "--format", "json")[1])["progress"]
    assert {k: report[k] for k in FIELDS} == FIELDS and report["source"] == "status.trainerStatus"


def test_wait_tells_a_trainjobs_progress_as_its_status_moves(api):
    job = running_trainjob(10, 300, {"loss": "0.9000"})
    api.put_trainjob(NS, job)

    def trainer(printed):
        printed.wait_for("mnist: progress: 10% done, 5 min left, loss 0.9000")
        job["status"].update(payload(55, 90, {"loss": "0.2000", "test_accuracy": "0.9500"}))
        api.put_trainjob(NS, job)
        printed.wait_for("mnist: progress: 55% done, 90 s left, loss 0.2000, test accuracy 0.9500")
        job["status"]["conditions"] = [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                        "message": "jobset completed successfully", "lastTransitionTime": now()}]
        api.put_trainjob(NS, job)

    code, out, err = run_beside(trainer, "wait", "mnist", "--timeout", "30", abort=api.give_up)
    assert (code, out) == (0, "trainjob mnist complete\n"), err


def test_wait_tells_a_running_pytorchjobs_progress_from_rank_0s_log(api, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    assert run("submit", str(values))[0] == 0
    api.set_condition(NS, "mnist", "Running")
    api.log(NS, api.add_pod(NS, "mnist", "Master", 0), trainer_line())

    def operator(printed):
        printed.wait_for(f"mnist: {SHOWN}")
        api.set_condition(NS, "mnist", "Succeeded")

    code, _, err = run_beside(operator, "wait", "mnist", "--timeout", "30", abort=api.give_up)
    assert code == 0, err
