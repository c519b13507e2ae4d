"""Real training runs of one process on the digits data set: reproducibility, SIGTERM, resume from a
torn checkpoint, and the end of a run. The run several tests read is made once per module."""
import shutil
import subprocess
import sys

import pytest

from tests.support import trainer_procs
from trainer import checkpoint

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

ARGS = trainer_procs.ARGS
metrics = trainer_procs.metrics
Lines, stop_with_sigterm, stopped_at = trainer_procs.Lines, trainer_procs.stop_with_sigterm, trainer_procs.stopped_at


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """One process through ARGS: the reference of the reproducibility, SIGTERM and checkpoint tests."""
    out = tmp_path_factory.mktemp("one") / "out"
    assert trainer_procs.trainer([*ARGS, "--output-dir", str(out)], trainer_procs.base_env()).wait(240) == 0
    return out


def test_same_seed_and_world_size_give_the_same_accuracies(one_process, tmp_path):
    proc = trainer_procs.trainer([*ARGS, "--output-dir", str(tmp_path)], trainer_procs.base_env())
    assert proc.wait(timeout=240) == 0
    assert metrics(tmp_path)["epoch_accuracies"] == metrics(one_process)["epoch_accuracies"]


def test_sigterm_checkpoints_exits_143_and_the_restart_resumes_to_the_same_result(one_process, tmp_path):
    out = tmp_path / "interrupted"
    proc = trainer_procs.trainer([*ARGS, "--log-interval", "1", "--output-dir", str(out)], trainer_procs.base_env(),
                                 text=False)
    lines = Lines(proc)
    finished = stop_with_sigterm(proc, lines, "epoch 3 step 5/")  # mid-epoch 3
    rest = lines.rest()
    assert proc.wait(timeout=60) == 143, rest
    assert any(line.startswith("stopping at epoch 3, step ") for line in rest.splitlines()), rest
    epoch, step, before = stopped_at(rest, 23)  # ceil(1437 / 64) steps an epoch
    # Acted on at the next step: only the step under way when the signal came finishes first.
    assert before <= finished + 1, (finished, rest)
    saved = checkpoint.complete(out / "checkpoints")
    assert saved[0] == checkpoint.path_for(out / "checkpoints", epoch - 1, step)
    assert len(saved) <= 3  # --keep-checkpoints default
    assert not (out / "metrics.json").exists()

    restarted = trainer_procs.trainer([*ARGS, "--output-dir", str(out)], trainer_procs.base_env())
    log = restarted.stdout.read()
    assert restarted.wait(timeout=240) == 0
    assert f"resumed from {saved[0]} at epoch {epoch}, step {step}" in log
    # Each epoch's loss, not only the accuracies: a resume one batch off can keep every accuracy.
    assert metrics(out)["epoch_losses"] == metrics(one_process)["epoch_losses"]
    assert metrics(out)["epoch_accuracies"] == metrics(one_process)["epoch_accuracies"]


def test_corrupt_newest_checkpoint_is_skipped_with_a_warning(one_process, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(one_process, out)
    newest = checkpoint.complete(out / "checkpoints")[0]
    assert newest.name == "ckpt-e0006-s000000.pt"
    older = checkpoint.complete(out / "checkpoints")[1]
    torn = checkpoint.path_for(out / "checkpoints", 7, 0)
    shutil.copy(newest, torn)
    torn.write_bytes(torn.read_bytes()[: 1000])
    proc = trainer_procs.trainer([*ARGS, "--epochs", "7", "--output-dir", str(out)], trainer_procs.base_env())
    log = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    assert f"warning: skipping unreadable checkpoint {torn}" in log
    assert f"resumed from {newest}" in log and str(older) not in log
    assert len(metrics(out)["epoch_accuracies"]) == 7


def test_gpu_only_flags_on_the_cpu_say_they_do_nothing(tmp_path):
    proc = trainer_procs.trainer(["--dataset", "synthetic", "--synthetic-size", "128", "--epochs", "1", "--threads",
                                  "1", "--amp", "--channels-last", "--output-dir", str(tmp_path)], trainer_procs.base_env())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "note: --amp and --channels-last only act on a GPU; on the cpu they do nothing" in out


# Rank 0 writes its outputs slowly; each Worker says, as Trainer.run() returns to it, whether
# rank 0's metrics.json was there.
SLOW_WRITE = """
import pathlib, sys, time
from trainer import atomic, cli, train
real = atomic.write
def slow(path, fill):
    if path.name == "metrics.json":
        time.sleep(3)
    return real(path, fill)
atomic.write = slow
run = train.Trainer.run
def watched(self):
    code = run(self)
    print("left run():", code, "metrics.json there:", (self.out_dir / "metrics.json").exists(), flush=True)
    return code
train.Trainer.run = watched
sys.exit(cli.main())
"""


def test_no_rank_leaves_the_run_before_rank_0s_metrics_exist(tmp_path):
    port = trainer_procs.free_port()
    args = ["--dataset", "synthetic", "--synthetic-size", "256", "--epochs", "1", "--threads", "1",
            "--output-dir", str(tmp_path)]
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_WRITE, *args], env=trainer_procs.operator_env(rank, 3, port),
                              cwd=trainer_procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(3)]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=240)[0])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    for out in outs:
        assert "left run(): 0 metrics.json there: True" in out, out
