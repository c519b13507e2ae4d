"""A 3-process job stopped by SIGTERM to one rank and resumed at 2 and at 4 processes."""
import shutil

import pytest

from tests.support import trainer_procs
from trainer import checkpoint

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

ARGS = trainer_procs.ARGS
metrics = trainer_procs.metrics
Lines, stop_with_sigterm, stopped_at = trainer_procs.Lines, trainer_procs.stop_with_sigterm, trainer_procs.stopped_at


RESIZE_ARGS = [*ARGS, "--epochs", "3", "--batch-size", "16"]  # 30 steps an epoch at 3: room to stop mid-epoch


@pytest.fixture(scope="module")
def three_process_runs(tmp_path_factory):
    """A 3-process job run through, and the same job stopped by a SIGTERM to rank 0 alone in its
    second epoch; (reference, stopped, steps rank 0 had finished at the signal, its log)."""
    folder = tmp_path_factory.mktemp("resize")
    results = trainer_procs.run_operator_job(3, [*RESIZE_ARGS, "--output-dir", str(folder / "reference")])
    assert [code for code, _ in results] == [0, 0, 0], results
    port = trainer_procs.free_port()
    stopped = folder / "stopped"
    procs = [trainer_procs.trainer([*RESIZE_ARGS, "--log-interval", "1", "--output-dir", str(stopped)],
                                   trainer_procs.operator_env(rank, 3, port), text=False) for rank in range(3)]
    try:
        lines = Lines(procs[0])
        finished = stop_with_sigterm(procs[0], lines, "epoch 2 step 3/")
        rest = lines.rest()
        assert [p.wait(timeout=120) for p in procs] == [143, 143, 143], rest
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return folder / "reference", stopped, finished, rest


def test_a_sigterm_to_one_rank_stops_every_rank_within_two_steps(three_process_runs):
    """Every rank stops at the same step whichever got the signal, agreed within two steps of it
    whatever a step takes: each step reads the agreement started a step before."""
    _, stopped, finished, log = three_process_runs
    epoch, step, before = stopped_at(log, 30)  # ceil(1437 / (3 x 16)) steps an epoch
    assert before <= finished + 2, (finished, log)
    assert checkpoint.complete(stopped / "checkpoints")[0] == checkpoint.path_for(stopped / "checkpoints", epoch - 1, step)


@pytest.mark.parametrize("world", [2, 4])
def test_a_three_process_checkpoint_resumes_with_another_process_count(tmp_path, three_process_runs, world):
    reference, stopped, _, _ = three_process_runs
    out = tmp_path / "resumed"
    shutil.copytree(stopped, out)
    results = trainer_procs.run_operator_job(world, [*RESIZE_ARGS, "--output-dir", str(out)])
    assert [code for code, _ in results] == [0] * world, results
    log = results[0][1]
    assert "resumed from" in log
    # How the optimizer's state is rescaled is tests/trainer/test_train.py's; here, that it is said.
    assert f"world size {world}, the checkpoint's 3: learning rate " in log and "(sqrt rule)" in log
    resumed, uninterrupted = metrics(out), metrics(reference)
    assert resumed["world_size"] == world and len(resumed["epoch_accuracies"]) == 3
    assert resumed["final_accuracy"] == pytest.approx(uninterrupted["final_accuracy"], abs=0.03)
    assert resumed["epoch_accuracies"][0] == uninterrupted["epoch_accuracies"][0]  # the epoch before the stop

