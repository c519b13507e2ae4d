"""What a finished run leaves in its output folder: the model's weights and metrics.json, each
written atomically by rank 0."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from . import atomic
from .config import Config
from .distributed import Launch
from .progress import Progress


def write(cfg: Config, launch: Launch, model: torch.nn.Module, history: dict, steps: int, out_dir: Path,
          progress: Progress, summing: str) -> None:
    model_path = atomic.write(out_dir / "mnist_cnn.pt", lambda f: torch.save(model.state_dict(), f))
    seconds = history["train_seconds"]
    metrics = {
        "dataset": cfg.dataset,
        "backend": launch.backend,
        "world_size": launch.world_size,
        "batch_size": cfg.batch_size,
        "epochs": len(history["epoch_accuracies"]),
        "steps_per_rank": steps,
        "epoch_accuracies": history["epoch_accuracies"],
        "epoch_losses": history["epoch_losses"],
        "final_accuracy": history["epoch_accuracies"][-1] if history["epoch_accuracies"] else None,
        "train_seconds": round(seconds, 3),
        "elapsed_seconds": round(history["elapsed_seconds"], 3),
        "samples_per_second": round(history["samples"] / seconds, 1) if seconds > 0 else 0.0,
        "threads": torch.get_num_threads(),
        "allreduce": summing,
        "seed": cfg.seed,
    }
    atomic.write(out_dir / "metrics.json", lambda f: f.write((json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()))
    progress.line(f"wrote {model_path} and {out_dir / 'metrics.json'}")
