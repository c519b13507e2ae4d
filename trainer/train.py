"""The training loop: sharded steps, checkpoints and resume (scoring: evaluation.py; stopping on
SIGTERM: stopping.py; the finished run's files: results.py)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from . import allreduce, checkpoint, data, distributed, results
from .config import Config
from .distributed import Launch
from .evaluation import autocast, evaluate, prepare
from .model import Net
from .progress import Progress, RunProgress
from .reporting import Reporter
from .sigterm import EXIT as SIGTERM_EXIT
from .stopping import Stop, StopAgreement


def load_data(cfg: Config, launch: Launch) -> tuple[data.Split, data.Split]:
    if cfg.dataset == "digits":
        return data.digits()
    if cfg.dataset == "synthetic":
        return data.synthetic(cfg.synthetic_size, cfg.seed)
    data_dir = Path(cfg.data_dir or Path(cfg.output_dir) / "data")
    # One download per node: local rank 0 fetches while the others wait at the barrier.
    if launch.local_rank == 0 and data.mnist_missing(data_dir):
        data.download_mnist(data_dir, cfg.mirrors)
    if launch.distributed:
        dist.barrier()
    return data.mnist(data_dir)


def scaled_lr(cfg: Config, world_size: int) -> float:
    factor = {"none": 1.0, "sqrt": math.sqrt(world_size), "linear": float(world_size)}[cfg.lr_rule]
    return cfg.base_lr * factor


class Trainer:
    """One training run in named steps: build, resume, run epochs, finish. State a checkpoint
    must carry lives on the object, so snapshot() and resume() stay each other's inverse."""

    def __init__(self, cfg: Config, launch: Launch):
        self.cfg, self.launch = cfg, launch
        self.stop = Stop()
        self.out_dir = Path(cfg.output_dir)
        self.ckpt_dir = self.out_dir / "checkpoints"
        if launch.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self.progress = Progress(launch.is_main, 1, cfg.log_interval)
        self.run_progress = RunProgress(self.progress, cfg.epochs, 1, 0, None)  # run() sets the real one up

        train_set, test_set = load_data(cfg, launch)
        self.train_set, self.test_set = train_set.to(launch.device), test_set.to(launch.device)

        torch.manual_seed(cfg.seed)
        self.model = Net().to(launch.device)
        if cfg.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.lr = scaled_lr(cfg, launch.world_size)
        if cfg.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr, momentum=cfg.momentum)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=cfg.epochs)
        self.history: dict = {"epoch_accuracies": [], "epoch_losses": [], "train_seconds": 0.0, "samples": 0}
        self.start_epoch, self.start_position = 0, 0  # position: samples of the epoch's order already taken
        self.steps = data.steps_per_rank(len(self.train_set), launch.world_size, cfg.batch_size)
        self.net = self.model
        self.shared: allreduce.SharedMemoryAllReduce | None = None
        self.agreement: StopAgreement | None = None
        if cfg.allreduce == "shm" and launch.distributed and launch.backend != "gloo":
            self.progress.line(f"note: --allreduce shm sums CPU ranks' gradients; {launch.backend} sums them here")
        ignored = [flag for flag, on in (("--amp", cfg.amp), ("--channels-last", cfg.channels_last)) if on]
        if ignored and launch.device.type != "cuda":
            many = len(ignored) > 1
            self.progress.line(f"note: {' and '.join(ignored)} only {'act' if many else 'acts'} on a GPU; on the "
                               f"{launch.device.type} {'they do' if many else 'it does'} nothing")

    def resume(self) -> None:
        resumed = _resume(self.cfg, self.launch, self.ckpt_dir)
        if resumed is not None:
            self.restore(*resumed)

    def restore(self, state: dict, where: Path) -> None:
        """Take up a snapshot(): the model, the optimizer's state and the schedule's progress, at
        this world size."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.history = state["history"]
        world, saved_world = self.launch.world_size, state.get("world_size", self.launch.world_size)
        self.start_epoch = state["epoch"]
        self.start_position = state.get("position", state["step"] * saved_world * state.get("batch_size", self.cfg.batch_size))
        self.progress.line(f"resumed from {where} at epoch {self.start_epoch + 1}, step {state['step']}")
        if self.scheduler.T_max != self.cfg.epochs:
            self._respan_schedule()
        if saved_world != world:
            self._rescale_lr(saved_world)

    def _respan_schedule(self) -> None:
        """The checkpoint's schedule spanned its run's --epochs, and loading it brought that span
        back: a finished 1-epoch run taken on to 2 epochs would train its second at the cosine's
        end, a rate of 0, and learn nothing. The schedule spans this run's epochs instead, at the
        same progress; the rate is the cosine's at that point of the new span."""
        sched, span = self.scheduler, self.cfg.epochs
        saved = sched.T_max
        sched.T_max = span
        for group, base in zip(self.optimizer.param_groups, sched.base_lrs, strict=True):
            group["lr"] = sched.eta_min + (base - sched.eta_min) * (1 + math.cos(math.pi * sched.last_epoch / span)) / 2
        self.progress.line(f"the learning rate schedule spans {span} epochs (the checkpoint's {saved}): "
                           f"{self.optimizer.param_groups[0]['lr']:.4g} from epoch {sched.last_epoch + 1}")

    def _rescale_lr(self, saved_world: int) -> None:
        """The learning rate was scaled for the world that saved the checkpoint; scale it, and the
        schedule it follows, for this one by the optimizer's rule (Config.lr_rule). The
        schedule's progress (its last epoch) is kept."""
        ratio = scaled_lr(self.cfg, self.launch.world_size) / scaled_lr(self.cfg, saved_world)
        before = self.optimizer.param_groups[0]["lr"]
        for group in self.optimizer.param_groups:
            group["lr"] *= ratio
            group["initial_lr"] *= ratio  # the scheduler's base, kept in every group
        self.scheduler.base_lrs = [lr * ratio for lr in self.scheduler.base_lrs]
        self.progress.line(f"world size {self.launch.world_size}, the checkpoint's {saved_world}: learning rate "
                           f"{before:.4g} -> {self.optimizer.param_groups[0]['lr']:.4g} ({self.cfg.lr_rule} rule), "
                           f"the epoch goes on from sample {self.start_position} of {len(self.train_set)}")

    def wrap(self) -> None:
        """DDP over the model (and torch.compile over that), after resuming the bare model."""
        launch = self.launch
        if launch.distributed:
            if launch.backend == "gloo" and self.cfg.allreduce == "shm":
                # Every rank is given the same arguments, so every rank takes part in the set-up.
                self.shared = allreduce.SharedMemoryAllReduce.connect(
                    dist.group.WORLD, launch.rank, launch.world_size, allreduce.slot_bytes_for(self.model),
                    self.cfg.rdzv_timeout)
            cap = allreduce.bucket_cap_mb(self.shared.slot_bytes) if self.shared else None
            self.net = DistributedDataParallel(self.model, gradient_as_bucket_view=True, bucket_cap_mb=cap,
                                               device_ids=[launch.device.index] if launch.device.type == "cuda" else None)
            if self.shared is not None:
                self.net.register_comm_hook(self.shared, allreduce.ddp_hook)
        self.agreement = StopAgreement(self.stop, launch)
        if self.cfg.compile:
            self.net = torch.compile(self.net)

    def close(self) -> None:
        """Let go of everything that holds the process group or its pending work (DDP's wrapper,
        whose reducer and comm hook hold the group; the stop agreement's exchange; the shared
        memory) before the group is destroyed (distributed.shutdown), so that destroying it joins
        gloo's threads then, while this interpreter is whole, not whenever the wrapper goes. A failed
        run leaves the exchange in flight: it is dropped, never waited for, as a hung peer would
        make that wait its timeout. Called again on the way out, it does nothing more."""
        if self.shared is not None:
            self.shared.close()
        self.agreement = None
        self.net = self.model

    @property
    def summing(self) -> str:
        """How gradients are summed, for metrics.json."""
        if self.shared is not None:
            return "shared-memory"
        return self.launch.backend if self.launch.distributed else "none"

    def snapshot(self, epoch: int, step: int, position: int = 0) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "epoch": epoch, "step": step, "position": position,
                "rng": torch.get_rng_state(), "history": self.history, "world_size": self.launch.world_size,
                "batch_size": self.cfg.batch_size, "seed": self.cfg.seed}

    def run(self) -> int:
        """Returns the process exit code: 0 done, 143 stopped by SIGTERM after a checkpoint."""
        cfg, launch = self.cfg, self.launch
        self.progress.steps = self.steps
        how = f"{launch.backend}, {launch.device.type}" + (", gradients summed in shared memory" if self.shared else "")
        self.progress.line(f"training on {cfg.dataset}: {len(self.train_set)} samples, world size {launch.world_size} "
                           f"({how}), {self.steps} steps per rank per epoch, lr {self.lr:.4g}")
        started = time.perf_counter()
        reporter = Reporter.from_env(self.progress.line) if launch.is_main else None
        first = self.start_position // (cfg.batch_size * launch.world_size)
        self.run_progress = RunProgress(self.progress, cfg.epochs, self.steps,
                                        self.start_epoch * self.steps + min(first, self.steps), reporter)
        for epoch in range(self.start_epoch, cfg.epochs):
            start = self.start_position if epoch == self.start_epoch else 0
            if not self.train_epoch(epoch, start):
                return SIGTERM_EXIT
            if self.end_epoch(epoch):
                break
        self.history["elapsed_seconds"] = self.history.get("elapsed_seconds", 0.0) + time.perf_counter() - started
        if launch.is_main:
            results.write(cfg, launch, self.model, self.history, self.steps, self.out_dir, self.progress, self.summing)
        self.run_progress.finish()
        self.leave()
        return 0

    def leave(self) -> None:
        """The run's outcome is decided: drop what holds the group, then leave it with the others."""
        self.close()
        distributed.finish(self.launch)

    def train_epoch(self, epoch: int, start: int) -> bool:
        """One epoch's steps from sample position `start`; False when SIGTERM stopped it (after a checkpoint)."""
        cfg, launch = self.cfg, self.launch
        per_step = cfg.batch_size * launch.world_size
        batches = data.shard(len(self.train_set), epoch, cfg.seed, launch.rank, launch.world_size, cfg.batch_size, start)
        batches = batches.to(launch.device)
        # Steps are numbered from the epoch's start, as an uninterrupted run at this world size would.
        first = start // per_step
        self.progress.steps = first + len(batches)
        self.progress.epoch_start()
        t0 = time.perf_counter()
        for step in range(first, first + len(batches)):
            if self.agreement.now():
                self.history["train_seconds"] += time.perf_counter() - t0
                if launch.is_main:
                    position = start + (step - first) * per_step
                    saved = checkpoint.save(self.ckpt_dir, self.snapshot(epoch, step, position), cfg.keep_checkpoints)
                    self.progress.line(f"stopping at epoch {epoch + 1}, step {step}: checkpoint {saved}")
                self.leave()
                return False
            idx = batches[step - first]
            x, y = prepare(self.train_set.x[idx], cfg), self.train_set.y[idx]
            self.optimizer.zero_grad(set_to_none=True)
            with autocast(cfg, launch):
                loss = F.nll_loss(self.net(x).float(), y)
            loss.backward()
            self.optimizer.step()
            if self.progress.due(step):  # loss.item() waits for the device: only when a line is printed
                value = loss.item()
                rate = self.progress.step(epoch, step, value, (step + 1 - first) * cfg.batch_size * launch.world_size)
                self.run_progress.step(epoch, step + 1, value, rate)
        self.agreement.settle()
        self.scheduler.step()
        self.history["train_seconds"] += time.perf_counter() - t0
        self.history["samples"] += len(batches) * per_step
        return True

    def end_epoch(self, epoch: int) -> bool:
        """Evaluate, checkpoint; True when the target accuracy is reached."""
        cfg = self.cfg
        accuracy, test_loss = evaluate(self.net if not cfg.compile else self.model, self.test_set, self.launch, cfg)
        self.history["epoch_accuracies"].append(accuracy)
        self.history["epoch_losses"].append(test_loss)
        self.progress.line(f"epoch {epoch + 1}/{cfg.epochs}: test accuracy {accuracy:.4f}, test loss {test_loss:.4f}")
        reached = cfg.target_accuracy is not None and accuracy >= cfg.target_accuracy
        if not reached:  # else the run ends here, and finish() reports its end
            self.run_progress.epoch_end(epoch, accuracy)
        if self.launch.is_main:
            checkpoint.save(self.ckpt_dir, self.snapshot(epoch + 1, 0), cfg.keep_checkpoints)
        if reached:
            self.progress.line(f"reached target accuracy {cfg.target_accuracy} after epoch {epoch + 1}")
        return reached


def train(cfg: Config, launch: Launch) -> int:
    """Returns the process exit code: 0 done, 143 stopped by SIGTERM after a checkpoint."""
    trainer = Trainer(cfg, launch)
    trainer.resume()
    try:
        trainer.wrap()
        return trainer.run()
    finally:
        trainer.close()


def _resume(cfg: Config, launch: Launch, ckpt_dir: Path):
    """Rank 0 reads the newest complete checkpoint and hands it to every rank, so Workers
    resume even when the output volume is mounted on the Master alone."""
    if not cfg.resume:
        return None
    found = checkpoint.load_newest(ckpt_dir) if launch.is_main else None
    if launch.distributed:
        box = [found]
        dist.broadcast_object_list(box, src=0)
        found = box[0]
    return found


