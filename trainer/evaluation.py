"""Scoring the model on the whole test set, each rank its own slice, and the precision and memory
layout a step and the evaluation share."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import data
from .config import Config
from .distributed import Launch


def evaluate(model: torch.nn.Module, test: data.Split, launch: Launch, cfg: Config) -> tuple[float, float]:
    """Accuracy and mean loss over the whole test set, each rank scoring its own slice."""
    model.eval()
    idx = data.eval_shard(len(test), launch.rank, launch.world_size).to(test.y.device)
    totals = torch.zeros(3, dtype=torch.float64, device=test.y.device)
    with torch.no_grad(), autocast(cfg, launch):
        for chunk in idx.split(1024):
            x, y = prepare(test.x[chunk], cfg), test.y[chunk]
            out = model(x).float()
            totals[0] += (out.argmax(1) == y).sum()
            totals[1] += F.nll_loss(out, y, reduction="sum")
            totals[2] += len(chunk)
    if launch.distributed:
        dist.all_reduce(totals)
    model.train()
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def autocast(cfg: Config, launch: Launch):
    enabled = cfg.amp and launch.device.type == "cuda"
    return torch.autocast(device_type=launch.device.type, dtype=torch.bfloat16, enabled=enabled)


def prepare(x: torch.Tensor, cfg: Config) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if cfg.channels_last else x
