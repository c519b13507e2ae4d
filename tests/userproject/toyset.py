"""Made-up data and a small model for train.py: points on either side of a fixed plane, the same
for every rank (the seed), so a run needs no download and repeats exactly; 480 points split
evenly among 1 to 6 ranks, so every rank takes as many steps."""
from __future__ import annotations

import torch

FEATURES = 8


def make(samples: int = 480, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=gen)
    plane = torch.linspace(-1.0, 1.0, FEATURES)
    return x, (x @ plane > 0).long()


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
