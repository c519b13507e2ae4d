"""Real training runs on the digits data set: accuracy, outputs, reproducibility, resume."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from tests.support import trainer_procs
from trainer import checkpoint
from trainer.model import Net

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

ARGS = ["--dataset", "digits", "--epochs", "6", "--threads", "1", "--seed", "3"]


def metrics(out):
    return json.loads((out / "metrics.json").read_text())


def test_two_processes_under_the_operator_env_reach_95_percent(tmp_path):
    results = trainer_procs.run_operator_job(2, [*ARGS, "--output-dir", str(tmp_path)])
    assert [code for code, _ in results] == [0, 0], results
    m = metrics(tmp_path)
    assert m["world_size"] == 2 and m["backend"] == "gloo" and m["allreduce"] == "shared-memory"  # both on this host
    assert m["steps_per_rank"] == 12  # ceil(1437 / (2 x 64))
    assert len(m["epoch_accuracies"]) == 6 and all(0 <= a <= 1 for a in m["epoch_accuracies"])
    assert m["final_accuracy"] >= 0.95 and m["train_seconds"] < 60
    assert m["samples_per_second"] > 0
    # rank 0 alone logs
    assert "test accuracy" in results[0][1] and results[1][1].strip() == ""
    model = Net()
    model.load_state_dict(torch.load(tmp_path / "mnist_cnn.pt", weights_only=True))


def test_two_processes_under_torchrun_reach_95_percent(tmp_path):
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1", PET_NODE_RANK="0",
                                 PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS,
                           "--output-dir", str(tmp_path)], env=env, cwd=trainer_procs.ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = metrics(tmp_path)
    assert m["world_size"] == 2 and m["final_accuracy"] >= 0.95 and m["train_seconds"] < 60
    assert m["allreduce"] == "shared-memory"


def test_torchrun_restarts_its_workers_into_a_group_of_their_own(tmp_path):
    """torchrun's agent keeps one store for every restart of its workers: the restarted group
    must neither read the first attempt's set-up nor its end."""
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1", PET_NODE_RANK="0", PET_MAX_RESTARTS="1",
                                 PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS,
                             "--log-interval", "1", "--output-dir", str(tmp_path)], env=env, cwd=trainer_procs.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("epoch 2 step 3/"):
                break
        children = [int(pid) for pid in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
        assert len(children) == 2, seen
        os.kill(max(children), signal.SIGKILL)  # the later-started worker: rank 1
        rest = proc.stdout.read()
        assert proc.wait(timeout=240) == 0, "".join(seen) + rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    starts = [line for line in ("".join(seen) + rest).splitlines() if "training on digits" in line]
    assert len(starts) == 2 and all("gradients summed in shared memory" in line for line in starts), starts
    assert "resumed from" in rest
    m = metrics(tmp_path)
    assert m["allreduce"] == "shared-memory" and len(m["epoch_accuracies"]) == 6 and m["final_accuracy"] >= 0.95


def test_gradients_summed_in_shared_memory_train_exactly_as_gloo_does(tmp_path):
    runs = {}
    for mode in ("auto", "backend"):
        results = trainer_procs.run_operator_job(2, [*ARGS, "--epochs", "2", "--allreduce", mode,
                                                     "--output-dir", str(tmp_path / mode)])
        assert [code for code, _ in results] == [0, 0], results
        runs[mode] = metrics(tmp_path / mode)
    assert runs["auto"]["allreduce"] == "shared-memory" and runs["backend"]["allreduce"] == "gloo"
    assert runs["auto"]["epoch_losses"] == runs["backend"]["epoch_losses"]  # the same bits, epoch after epoch
    ours, gloos = (torch.load(tmp_path / mode / "mnist_cnn.pt", weights_only=True) for mode in ("auto", "backend"))
    assert all(torch.equal(ours[name], gloos[name]) for name in gloos)


def test_same_seed_and_world_size_give_the_same_accuracies(tmp_path):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        proc = trainer_procs.trainer([*ARGS, "--epochs", "2", "--output-dir", str(out)], trainer_procs.base_env())
        assert proc.wait(timeout=120) == 0
        runs.append(metrics(out)["epoch_accuracies"])
    assert runs[0] == runs[1]


def test_sigterm_checkpoints_exits_143_and_the_restart_resumes_to_the_same_result(tmp_path):
    reference = tmp_path / "reference"
    assert trainer_procs.trainer([*ARGS, "--output-dir", str(reference)], trainer_procs.base_env()).wait(120) == 0

    out = tmp_path / "interrupted"
    proc = trainer_procs.trainer([*ARGS, "--log-interval", "1", "--output-dir", str(out)], trainer_procs.base_env())
    for line in proc.stdout:  # stop mid-epoch 3
        if line.startswith("epoch 3 step 5/"):
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 143, rest
    assert "stopping at epoch 3" in rest
    saved = checkpoint.complete(out / "checkpoints")
    assert saved and saved[0].name.startswith("ckpt-e0002-s")  # mid-epoch 3 (0-based 2)
    assert len(saved) <= 3  # --keep-checkpoints default
    assert not (out / "metrics.json").exists()

    restarted = trainer_procs.trainer([*ARGS, "--output-dir", str(out)], trainer_procs.base_env())
    log = restarted.stdout.read()
    assert restarted.wait(timeout=120) == 0
    assert "resumed from" in log and "epoch 3, step" in log
    assert metrics(out)["epoch_accuracies"] == metrics(reference)["epoch_accuracies"]


RESIZE_ARGS = [*ARGS, "--epochs", "4", "--batch-size", "16"]  # 30 steps an epoch at 3: room to stop mid-epoch


@pytest.fixture(scope="module")
def three_process_runs(tmp_path_factory):
    """A 3-process job run through, and the same job stopped by SIGTERM in its second epoch."""
    folder = tmp_path_factory.mktemp("resize")
    results = trainer_procs.run_operator_job(3, [*RESIZE_ARGS, "--output-dir", str(folder / "reference")])
    assert [code for code, _ in results] == [0, 0, 0], results
    port = trainer_procs.free_port()
    stopped = folder / "stopped"
    procs = [trainer_procs.trainer([*RESIZE_ARGS, "--log-interval", "1", "--output-dir", str(stopped)],
                                   trainer_procs.operator_env(rank, 3, port)) for rank in range(3)]
    try:
        for line in procs[0].stdout:
            if line.startswith("epoch 2 step 3/"):  # the ranks agree to stop at step 8
                procs[0].send_signal(signal.SIGTERM)
                break
        assert [p.wait(timeout=120) for p in procs] == [143, 143, 143], procs[0].stdout.read()
    finally:
        for p in procs:
            p.kill()
    (saved,) = checkpoint.complete(stopped / "checkpoints")[:1]
    assert saved.name.startswith("ckpt-e0001-s")  # mid-epoch 2
    return folder / "reference", stopped


@pytest.mark.parametrize("world", [2, 4])
def test_a_three_process_checkpoint_resumes_with_another_process_count(tmp_path, three_process_runs, world):
    reference, stopped = three_process_runs
    out = tmp_path / "resumed"
    shutil.copytree(stopped, out)
    results = trainer_procs.run_operator_job(world, [*RESIZE_ARGS, "--output-dir", str(out)])
    assert [code for code, _ in results] == [0] * world, results
    log = results[0][1]
    assert "resumed from" in log and "at epoch 2, step" in log
    # The learning rate follows the world size (sqrt scaling by default), schedule and all.
    said = next(line for line in log.splitlines() if line.startswith(f"world size {world}, the checkpoint's 3:"))
    before, after = (float(x) for x in said.split("learning rate ")[1].split(",")[0].split(" -> "))
    assert after / before == pytest.approx((world / 3) ** 0.5, rel=1e-3)
    assert "the epoch goes on from sample " in said
    resumed, uninterrupted = metrics(out), metrics(reference)
    assert resumed["world_size"] == world and len(resumed["epoch_accuracies"]) == 4
    assert resumed["final_accuracy"] == pytest.approx(uninterrupted["final_accuracy"], abs=0.03)
    assert resumed["epoch_accuracies"][0] == uninterrupted["epoch_accuracies"][0]  # the epoch before the stop


def test_corrupt_newest_checkpoint_is_skipped_with_a_warning(tmp_path):
    out = tmp_path / "run"
    assert trainer_procs.trainer([*ARGS, "--epochs", "2", "--output-dir", str(out)], trainer_procs.base_env()).wait(120) == 0
    newest = checkpoint.complete(out / "checkpoints")[0]
    assert newest.name == "ckpt-e0002-s000000.pt"
    older = checkpoint.complete(out / "checkpoints")[1]
    torn = checkpoint.path_for(out / "checkpoints", 3, 0)
    shutil.copy(newest, torn)
    torn.write_bytes(torn.read_bytes()[: 1000])
    proc = trainer_procs.trainer([*ARGS, "--epochs", "3", "--output-dir", str(out)], trainer_procs.base_env())
    log = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    assert f"warning: skipping unreadable checkpoint {torn}" in log
    assert f"resumed from {newest}" in log and str(older) not in log
    assert len(metrics(out)["epoch_accuracies"]) == 3


def test_elastic_rendezvous_under_torchrun_with_the_operators_pet_variables(tmp_path):
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1:2", PET_RDZV_BACKEND="c10d",
                                 PET_RDZV_ENDPOINT=f"127.0.0.1:{port}", PET_MAX_RESTARTS="1", PET_RDZV_ID="job-uid",
                                 PET_RDZV_CONF="last_call_timeout=1")  # no 30 s wait for a second node
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS, "--epochs", "2",
                           "--output-dir", str(tmp_path)], env=env, cwd=trainer_procs.ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert metrics(tmp_path)["world_size"] == 2


def test_gpu_only_flags_on_the_cpu_say_they_do_nothing(tmp_path):
    proc = trainer_procs.trainer(["--dataset", "digits", "--epochs", "1", "--threads", "1", "--amp", "--channels-last",
                                  "--output-dir", str(tmp_path)], trainer_procs.base_env())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "note: --amp and --channels-last only act on a GPU; on the cpu they do nothing" in out
