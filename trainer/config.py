"""Command-line options of `python -m trainer`."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

DEFAULT_MIRRORS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
]


@dataclass
class Config:
    backend: str = "auto"
    dataset: str = "digits"
    data_dir: str = ""
    mirrors: list[str] = field(default_factory=lambda: list(DEFAULT_MIRRORS))
    output_dir: str = "/opt/pytorch/output"
    epochs: int = 10
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float | None = None
    momentum: float = 0.5
    lr_scaling: str = "sqrt"
    seed: int = 1
    threads: int = 0
    rdzv_timeout: float = 300.0
    keep_checkpoints: int = 3
    resume: bool = True
    log_interval: int = 20
    synthetic_size: int = 8192
    amp: bool = False
    compile: bool = False
    channels_last: bool = False
    target_accuracy: float | None = None

    @property
    def base_lr(self) -> float:
        return self.lr if self.lr is not None else (0.01 if self.optimizer == "sgd" else 2e-3)


def parse(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="DDP training of the Kubeflow MNIST network under any launch training-operator can produce: "
                    "its env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), torchrun (PET_* variables), or a plain process.")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="collective backend; auto picks nccl when CUDA is available, else gloo")
    p.add_argument("--dataset", choices=["mnist", "digits", "synthetic"], default="digits",
                   help="mnist: IDX files from --data-dir (downloaded when missing); digits: scikit-learn's "
                        "8x8 digits scaled to 28x28 (offline); synthetic: random data for throughput")
    p.add_argument("--data-dir", default="", help="where MNIST's IDX files are (default: <output-dir>/data)")
    p.add_argument("--mirror", dest="mirrors", action="append", default=None,
                   help="MNIST download mirror, tried in order (repeatable)")
    p.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR") or "/opt/pytorch/output",
                   help="where rank 0 writes mnist_cnn.pt, metrics.json and checkpoints/ (env OUTPUT_DIR)")
    p.add_argument("--epochs", type=_positive(int), default=10)
    p.add_argument("--batch-size", type=_positive(int), default=64, help="samples per step on each rank")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                   help="adam (default recipe) or sgd (the Kubeflow example's: lr 0.01, momentum 0.5)")
    p.add_argument("--lr", type=_positive(float), default=None, help="base learning rate (adam 2e-3, sgd 0.01)")
    p.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
    p.add_argument("--lr-scaling", choices=["sqrt", "linear", "none"], default="sqrt",
                   help="scale the learning rate with the world size, since each step sees world x batch samples")
    p.add_argument("--seed", type=int, default=1, help="the same seed and world size give the same accuracies")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads per process (0: torch's default)")
    p.add_argument("--rdzv-timeout", type=_positive(float), default=300.0,
                   help="seconds to wait for the other ranks and MASTER_ADDR:MASTER_PORT")
    p.add_argument("--keep-checkpoints", type=_positive(int), default=3, help="checkpoints kept (newest)")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="ignore existing checkpoints")
    p.add_argument("--log-interval", type=_positive(int), default=20, help="steps between progress lines")
    p.add_argument("--synthetic-size", type=_positive(int), default=8192, help="samples of --dataset synthetic")
    p.add_argument("--amp", action="store_true", help="bf16 autocast on the GPU")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--channels-last", action="store_true", help="channels_last memory format (GPU)")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="stop after the first epoch whose test accuracy reaches this fraction")
    ns = p.parse_args(argv)
    cfg = Config(**{k: v for k, v in vars(ns).items() if v is not None})
    if ns.mirrors is None:
        cfg.mirrors = list(DEFAULT_MIRRORS)
    return cfg


def _positive(kind):
    def convert(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value
    convert.__name__ = kind.__name__
    return convert
