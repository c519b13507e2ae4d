"""Atomic checkpoints under <output-dir>/checkpoints: temp file, fsync, rename; newest complete one wins."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

from . import atomic

_NAME = re.compile(r"^ckpt-e(\d{4})-s(\d{6})\.pt$")


def path_for(directory: Path, epoch: int, step: int) -> Path:
    return directory / f"ckpt-e{epoch:04d}-s{step:06d}.pt"


def complete(directory: Path) -> list[Path]:
    """Finished checkpoints, newest first. Temp files of an interrupted write never match."""
    if not directory.is_dir():
        return []
    found = [(tuple(int(g) for g in m.groups()), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def save(directory: Path, state: dict, keep: int) -> Path:
    target = atomic.write(path_for(directory, state["epoch"], state["step"]), lambda f: torch.save(state, f))
    for old in complete(directory)[keep:]:
        old.unlink(missing_ok=True)
    return target


def load_newest(directory: Path) -> tuple[dict, Path] | None:
    """The newest checkpoint that loads; corrupt ones are skipped with a warning."""
    for path in complete(directory):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or not {"model", "optimizer", "scheduler", "epoch", "step"} <= state.keys():
                raise ValueError("missing fields")
            return state, path
        except Exception as exc:  # a torn or foreign file must not stop the resume
            print(f"warning: skipping unreadable checkpoint {path} ({type(exc).__name__}: {exc})",
                  file=sys.stderr, flush=True)
    return None
