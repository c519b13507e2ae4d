"""Two ranks under the operator's env and under torchrun: accuracy, outputs, the shared-memory
option against gloo, torchrun's restarts and elastic rendezvous. The default pair runs once."""
import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.support import trainer_procs
from trainer.model import Net

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

ARGS = trainer_procs.ARGS
metrics = trainer_procs.metrics


@pytest.fixture(scope="module")
def operator_pair(tmp_path_factory):
    """Two processes under the operator's env through ARGS, by default (gloo)."""
    out = tmp_path_factory.mktemp("pair") / "gloo"
    results = trainer_procs.run_operator_job(2, [*ARGS, "--output-dir", str(out)])
    assert [code for code, _ in results] == [0, 0], results
    return out, results


def test_two_processes_under_the_operator_env_reach_95_percent(operator_pair):
    out, results = operator_pair
    m = metrics(out)
    assert m["world_size"] == 2 and m["backend"] == "gloo" and m["allreduce"] == "gloo"  # the default
    assert m["steps_per_rank"] == 12  # ceil(1437 / (2 x 64))
    assert len(m["epoch_accuracies"]) == 6 and all(0 <= a <= 1 for a in m["epoch_accuracies"])
    assert m["final_accuracy"] >= 0.95 and m["train_seconds"] < 60
    assert m["samples_per_second"] > 0
    # rank 0 alone logs, and says how gradients are summed
    assert "world size 2 (gloo, cpu)," in results[0][1] and "test accuracy" in results[0][1]
    assert results[1][1].strip() == ""
    model = Net()
    model.load_state_dict(torch.load(out / "mnist_cnn.pt", weights_only=True))


def test_gradients_summed_in_shared_memory_train_exactly_as_gloo_does_at_two_ranks(operator_pair, tmp_path):
    """At 2 ranks each sum is one addition, so the shared-memory option gives gloo's bits epoch
    after epoch (from 3 ranks the order differs: tests/trainer/test_allreduce.py bounds it)."""
    gloo, _ = operator_pair
    results = trainer_procs.run_operator_job(2, [*ARGS, "--allreduce", "shm", "--output-dir", str(tmp_path)])
    assert [code for code, _ in results] == [0, 0], results
    assert "world size 2 (gloo, cpu, gradients summed in shared memory)" in results[0][1]
    assert metrics(tmp_path)["allreduce"] == "shared-memory" and metrics(gloo)["allreduce"] == "gloo"
    assert metrics(tmp_path)["epoch_losses"] == metrics(gloo)["epoch_losses"]
    ours, gloos = (torch.load(out / "mnist_cnn.pt", weights_only=True) for out in (tmp_path, gloo))
    assert all(torch.equal(ours[name], gloos[name]) for name in gloos)


def test_two_processes_under_torchrun(tmp_path):
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1", PET_NODE_RANK="0",
                                 PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS,
                           "--epochs", "1", "--output-dir", str(tmp_path)], env=env, cwd=trainer_procs.ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = metrics(tmp_path)
    assert m["world_size"] == 2 and m["allreduce"] == "gloo" and len(m["epoch_accuracies"]) == 1


def test_torchrun_restarts_its_workers_into_a_group_of_their_own(tmp_path):
    """torchrun's agent keeps one store for every restart of its workers: the restarted group
    must neither read the first attempt's set-up nor its end."""
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1", PET_NODE_RANK="0", PET_MAX_RESTARTS="1",
                                 PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS,
                             "--epochs", "3", "--allreduce", "shm", "--log-interval", "1", "--output-dir",
                             str(tmp_path)], env=env, cwd=trainer_procs.ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    # The restarted workers set the shared memory up afresh, in a group of their own.
    assert len(starts) == 2 and all("gradients summed in shared memory" in line for line in starts), starts
    assert "resumed from" in rest
    m = metrics(tmp_path)
    assert m["allreduce"] == "shared-memory" and len(m["epoch_accuracies"]) == 3


def test_elastic_rendezvous_under_torchrun_with_the_operators_pet_variables(tmp_path):
    port = trainer_procs.free_port()
    env = trainer_procs.base_env(PET_NPROC_PER_NODE="2", PET_NNODES="1:2", PET_RDZV_BACKEND="c10d",
                                 PET_RDZV_ENDPOINT=f"127.0.0.1:{port}", PET_MAX_RESTARTS="1", PET_RDZV_ID="job-uid",
                                 PET_RDZV_CONF="last_call_timeout=1")  # no 30 s wait for a second node
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--module", "trainer", *ARGS, "--epochs", "1",
                           "--output-dir", str(tmp_path)], env=env, cwd=trainer_procs.ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert metrics(tmp_path)["world_size"] == 2

