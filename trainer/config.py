"""The trainer's one typed config. Every default lives here, on its field; the command line is
built from the fields, so an option cannot drift from the value it sets."""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field

DEFAULT_MIRRORS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
]

# Where rank 0 writes without OUTPUT_DIR: the image's own folder (trainer/Dockerfile makes it, uid
# 1000's), which the chart's output.mountPath mounts over by default. The generator reads both from here.
OUTPUT_ENV = "OUTPUT_DIR"
DEFAULT_OUTPUT_DIR = "/opt/pytorch/output"


def _opt(default, help: str, **extra):
    """A field with its command-line help: choices, positive, env, flag, dest and repeat as options."""
    meta = {"help": help, **extra}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Config:
    backend: str = _opt("auto", "collective backend; auto picks nccl when CUDA is available, else gloo",
                        choices=["auto", "gloo", "nccl"])
    dataset: str = _opt("digits", "mnist: IDX files from --data-dir (downloaded when missing); digits: scikit-learn's "
                        "8x8 digits scaled to 28x28 (offline); synthetic: random data for throughput",
                        choices=["mnist", "digits", "synthetic"])
    data_dir: str = _opt("", "where MNIST's IDX files are (default: <output-dir>/data)")
    mirrors: list[str] = _opt(DEFAULT_MIRRORS, "MNIST download mirror, tried in order (repeatable)", flag="--mirror")
    output_dir: str = _opt(DEFAULT_OUTPUT_DIR, "where rank 0 writes mnist_cnn.pt, metrics.json and checkpoints/",
                           env=OUTPUT_ENV)
    epochs: int = _opt(10, "passes over the training set", positive=True)
    batch_size: int = _opt(64, "samples per step on each rank", positive=True)
    optimizer: str = _opt("adam", "adam (default recipe) or sgd (the Kubeflow example's: lr 0.01, momentum 0.5)",
                          choices=["adam", "sgd"])
    lr: float | None = _opt(None, "base learning rate (adam 2e-3, sgd 0.01)", type=float, positive=True)
    momentum: float = _opt(0.5, "SGD momentum")
    lr_scaling: str = _opt("auto", "scale the learning rate with the world size, since each step sees world x batch "
                           "samples; auto is linear for sgd and sqrt for adam (the conventions for each), and a "
                           "resume at another world size rescales by the same rule",
                           choices=["auto", "sqrt", "linear", "none"])
    seed: int = _opt(1, "the same seed and world size give the same accuracies")
    threads: int = _opt(0, "torch CPU threads per process (0: torch's default, lowered to the CPUs this container may "
                        "use by its CPU limit and affinity; OMP_NUM_THREADS or MKL_NUM_THREADS, when set, wins)")
    allreduce: str = _opt("backend", "how gradients are summed: backend is gloo's (nccl's on GPUs) own all-reduce, as "
                          "any DDP script does; shm sums CPU ranks through one shared /dev/shm, which only helps when "
                          "several ranks run on one host (torchrun's processes in one pod), and falls back to the "
                          "backend on every rank when any rank cannot open it", choices=["backend", "shm"])
    rdzv_timeout: float = _opt(300.0, "seconds to wait for the other ranks and MASTER_ADDR:MASTER_PORT", positive=True)
    keep_checkpoints: int = _opt(3, "checkpoints kept (newest)", positive=True)
    resume: bool = _opt(True, "ignore existing checkpoints", flag="--no-resume")
    log_interval: int = _opt(20, "steps between progress lines", positive=True)
    synthetic_size: int = _opt(8192, "samples of --dataset synthetic", positive=True)
    amp: bool = _opt(False, "bf16 autocast on the GPU")
    compile: bool = _opt(False, "torch.compile the model")
    channels_last: bool = _opt(False, "channels_last memory format (GPU)")
    target_accuracy: float | None = _opt(None, "stop after the first epoch whose test accuracy reaches this fraction",
                                         type=float)

    @property
    def lr_rule(self) -> str:
        """How the learning rate follows the world size: linear for SGD (Goyal et al.), sqrt for
        Adam, whose step size does not grow with the gradient's batch."""
        if self.lr_scaling != "auto":
            return self.lr_scaling
        return "linear" if self.optimizer == "sgd" else "sqrt"

    @property
    def base_lr(self) -> float:
        return self.lr if self.lr is not None else (0.01 if self.optimizer == "sgd" else 2e-3)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="DDP training of the Kubeflow MNIST network under any launch training-operator can produce: "
                    "its env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), torchrun (PET_* variables), or a plain process.")
    for f in dataclasses.fields(Config):
        meta = dict(f.metadata)
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        help_text = meta["help"]
        if isinstance(default, bool):
            # True defaults are turned off by a --no-... flag, False ones on by --name.
            p.add_argument(flag, dest=f.name, action="store_false" if default else "store_true", help=help_text)
            continue
        if isinstance(default, list):
            p.add_argument(flag, dest=f.name, action="append", default=None, help=help_text)
            continue
        kind = meta.get("type") or type(default)
        if meta.get("positive"):
            kind = _positive(kind)
        if meta.get("env"):
            help_text += f" (env {meta['env']})"
        if default not in (None, "") and not meta.get("choices"):
            help_text += f" (default: {default})"
        p.add_argument(flag, dest=f.name, type=kind, choices=meta.get("choices"), default=None, help=help_text)
    return p


def parse(argv: list[str] | None = None) -> Config:
    ns = vars(parser().parse_args(argv))
    given = {k: v for k, v in ns.items() if v is not None}
    for f in dataclasses.fields(Config):
        env = f.metadata.get("env")
        if f.name not in given and env and os.environ.get(env):
            given[f.name] = os.environ[env]
    return Config(**given)


def _positive(kind):
    def convert(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value
    convert.__name__ = kind.__name__
    return convert
