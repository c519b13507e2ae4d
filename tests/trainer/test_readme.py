"""The README's trainer commands, run as written in a scratch folder: the digits run, MNIST from
IDX files already in --data-dir (made here: CI has no internet), and the synthetic throughput
run, whose GPU-only flags say on a CPU that they do nothing."""
import json
import shlex
import subprocess
import sys

import pytest

from tests.support import docs, mnist_files, trainer_procs

pytestmark = pytest.mark.trains  # real training: started first, so parallel workers end together

def commands() -> list[str]:
    return docs.command_lines(docs.block("trainer.md", "The trainer"), "python -m trainer")


def test_the_readme_gives_the_three_runs():
    assert [shlex.split(line)[4] for line in commands()] == ["digits", "mnist", "synthetic"]


def lines():
    """One test per line, so parallel workers share them out. The synthetic line's --compile
    spends minutes in inductor's C++ compiler on a CPU, and the digits line trains its 5 epochs as
    written (about 40 s): both run in `make test-slow`, which keeps `make test` within 5 minutes."""
    for line in commands():
        dataset = shlex.split(line)[4]
        yield pytest.param(line, id=dataset, marks=[pytest.mark.slow, pytest.mark.timeout(900)]
                           if dataset in ("synthetic", "digits") else [])


@pytest.mark.parametrize("line", list(lines()))
def test_the_readmes_trainer_commands_train_as_written(tmp_path, line):
    mnist_files.write(tmp_path / "data" / "mnist", n_train=256, n_test=64)
    proc = subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=trainer_procs.base_env(CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
    dataset = shlex.split(line)[4]
    metrics = json.loads((tmp_path / "out" / dataset / "metrics.json").read_text())
    assert (tmp_path / "out" / dataset / "mnist_cnn.pt").stat().st_size > 0
    if dataset == "digits":
        assert len(metrics["epoch_accuracies"]) == 5 and metrics["final_accuracy"] >= 0.9
    if dataset == "mnist":
        assert "downloading" not in (proc.stdout + proc.stderr).lower()  # the files were there: no network
    if dataset == "synthetic":
        assert "do nothing" in proc.stdout + proc.stderr  # --amp and --channels-last on a CPU
