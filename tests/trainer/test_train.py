"""The training loop's own state, in this process: what a resume at another world size makes of
the optimizer and its schedule."""
import math
import signal

import pytest
import torch
import torch.nn.functional as F

from trainer import config
from trainer.distributed import Launch
from trainer.train import Trainer


@pytest.fixture(autouse=True)
def keep_sigterm():
    """A Trainer takes SIGTERM over; this process gets its own handler back."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def trainer(tmp_path, world: int, args: list[str]) -> Trainer:
    cfg = config.parse(["--dataset", "synthetic", "--synthetic-size", "64", "--epochs", "4",
                        "--output-dir", str(tmp_path), *args])
    return Trainer(cfg, Launch(0, world, 0, "gloo", torch.device("cpu"), "127.0.0.1:0"))


@pytest.mark.parametrize("args, ratio", [
    (["--optimizer", "sgd"], 2 / 3),  # linear, SGD's rule
    (["--optimizer", "adam"], math.sqrt(2 / 3)),  # sqrt, Adam's rule
    (["--optimizer", "sgd", "--lr-scaling", "sqrt"], math.sqrt(2 / 3)),  # the flag wins
    (["--optimizer", "adam", "--lr-scaling", "none"], 1.0),
], ids=["sgd", "adam", "sgd-sqrt", "adam-none"])
def test_a_resume_at_another_world_size_rescales_the_optimizers_rate_and_keeps_its_schedule(tmp_path, args, ratio):
    saving = trainer(tmp_path, 3, args)
    x, y = saving.train_set.x[:8], saving.train_set.y[:8]
    F.nll_loss(saving.model(x), y).backward()
    saving.optimizer.step()  # momentum or moments to carry over
    for _ in range(2):
        saving.scheduler.step()  # two of four epochs' decay
    state = saving.snapshot(2, 0)
    saved = state["optimizer"]["param_groups"][0]
    saved_rate, saved_base = saved["lr"], saved["initial_lr"]

    resumed = trainer(tmp_path, 2, args)
    resumed.restore(state, tmp_path / "ckpt.pt")
    restored = resumed.optimizer.state_dict()
    group = restored["param_groups"][0]
    assert group["lr"] == pytest.approx(saved_rate * ratio, rel=1e-12)
    assert group["initial_lr"] == pytest.approx(saved_base * ratio, rel=1e-12)
    assert resumed.scheduler.last_epoch == 2  # the schedule's progress is kept
    for key, value in state["optimizer"]["state"].items():  # and the optimizer's own state, untouched
        for name, tensor in value.items():
            assert torch.equal(restored["state"][key][name], tensor)
    resumed.scheduler.step()
    # The third epoch's rate is the cosine schedule's at the new base.
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(
        saved_base * ratio * (1 + math.cos(math.pi * 3 / 4)) / 2, rel=1e-9)


def test_a_finished_run_taken_on_for_more_epochs_trains_them_on_a_schedule_over_the_new_span(tmp_path):
    """A 1-epoch run ends at the cosine's end, a rate of 0; its checkpoint taken on with --epochs 3
    must not train at that rate (it did: the loaded schedule kept the old span)."""
    cfg = config.parse(["--dataset", "synthetic", "--synthetic-size", "64", "--epochs", "1",
                        "--output-dir", str(tmp_path)])
    finished = Trainer(cfg, Launch(0, 1, 0, "gloo", torch.device("cpu"), "127.0.0.1:0"))
    base = finished.optimizer.param_groups[0]["lr"]
    finished.optimizer.step()  # the epoch's steps (no gradients here), then the schedule's
    finished.scheduler.step()
    assert finished.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)
    state = finished.snapshot(1, 0)

    longer = trainer(tmp_path, 1, [])  # --epochs 4
    longer.restore(state, tmp_path / "ckpt.pt")
    assert longer.scheduler.last_epoch == 1
    rates = [longer.optimizer.param_groups[0]["lr"]]
    for _ in range(3):
        longer.scheduler.step()
        rates.append(longer.optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([base * (1 + math.cos(math.pi * e / 4)) / 2 for e in (1, 2, 3, 4)], abs=1e-12)
