"""Real training runs on the digits data set: accuracy, outputs, reproducibility, resume, the
SIGTERM stop and the end of a run. Runs that several tests read are made once per module."""
import json
import os
import select
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


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """One process through ARGS: the reference of the reproducibility, SIGTERM and checkpoint tests."""
    out = tmp_path_factory.mktemp("one") / "out"
    assert trainer_procs.trainer([*ARGS, "--output-dir", str(out)], trainer_procs.base_env()).wait(240) == 0
    return out


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


def test_same_seed_and_world_size_give_the_same_accuracies(one_process, tmp_path):
    proc = trainer_procs.trainer([*ARGS, "--output-dir", str(tmp_path)], trainer_procs.base_env())
    assert proc.wait(timeout=240) == 0
    assert metrics(tmp_path)["epoch_accuracies"] == metrics(one_process)["epoch_accuracies"]


class Lines:
    """A process's output read line by line without blocking once it is stopped: what it wrote
    before SIGSTOP is all there is to read."""

    def __init__(self, proc):
        self.fd, self.buffer, self.seen = proc.stdout.fileno(), b"", []

    def until(self, prefix: str) -> str:
        while True:
            line = self._next(None)
            if line is None or line.startswith(prefix):
                return line

    def drain(self) -> list[str]:
        got = []
        while (line := self._next(0.5)) is not None:
            got.append(line)
        return got

    def rest(self) -> str:
        while self._next(None) is not None:
            pass
        return "".join(self.seen)

    def _next(self, timeout):
        while b"\n" not in self.buffer:
            if timeout is not None and not select.select([self.fd], [], [], timeout)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.seen.append(line.decode() + "\n")
        return line.decode()


def stop_with_sigterm(proc, lines: Lines, at: str) -> int:
    """SIGTERM to a rank frozen (SIGSTOP) after the step line `at`: how many steps of the run
    it had finished when the signal came (epochs before included)."""
    reached = lines.until(at)
    assert reached is not None, lines.rest()
    proc.send_signal(signal.SIGSTOP)
    done = [line for line in [reached, *lines.drain()] if line.startswith("epoch ") and " step " in line]
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    epoch, rest = done[-1].removeprefix("epoch ").split(" step ")
    finished, per_epoch = (int(n) for n in rest.split()[0].split("/"))
    return (int(epoch) - 1) * per_epoch + finished


def stopped_at(log: str, per_epoch: int) -> tuple[int, int, int]:
    """From the line "stopping at epoch E, step S: ...": (E, S, steps of the run before S)."""
    said = next(line for line in log.splitlines() if line.startswith("stopping at epoch "))
    epoch, step = (int(n) for n in said.removeprefix("stopping at epoch ").split(":")[0].split(", step "))
    return epoch, step, (epoch - 1) * per_epoch + step


def test_sigterm_checkpoints_exits_143_and_the_restart_resumes_to_the_same_result(one_process, tmp_path):
    out = tmp_path / "interrupted"
    proc = trainer_procs.trainer([*ARGS, "--log-interval", "1", "--output-dir", str(out)], trainer_procs.base_env(),
                                 text=False)
    lines = Lines(proc)
    finished = stop_with_sigterm(proc, lines, "epoch 3 step 5/")  # mid-epoch 3
    rest = lines.rest()
    assert proc.wait(timeout=60) == 143, rest
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
    assert metrics(out)["epoch_accuracies"] == metrics(one_process)["epoch_accuracies"]


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
