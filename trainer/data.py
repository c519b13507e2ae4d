"""Data sets as whole tensors (no per-sample Python in the hot loop) and per-rank shards."""
from __future__ import annotations

import gzip
import hashlib
import math
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from . import atomic

MEAN, STD = 0.1307, 0.3081  # MNIST's pixel statistics, used for every data set

# name -> md5 of the gzipped file, as published with the data set
MNIST_FILES = {
    "train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c",
}


class DataError(RuntimeError):
    """Data that cannot be had or read; the message says how to provide it."""


@dataclass
class Split:
    x: torch.Tensor  # float32 [N, 1, 28, 28], normalised
    y: torch.Tensor  # int64 [N]

    def __len__(self) -> int:
        return self.y.shape[0]

    def to(self, device: torch.device) -> "Split":
        return Split(self.x.to(device), self.y.to(device))


def steps_per_rank(n: int, world_size: int, batch_size: int) -> int:
    """Every rank takes the same number of steps, so DDP never waits on a rank that ran out."""
    return max(1, math.ceil(n / (world_size * batch_size)))


def shard(n: int, epoch: int, seed: int, rank: int, world_size: int, batch_size: int, start: int = 0) -> torch.Tensor:
    """This rank's sample indices for one epoch from position `start` on, shaped [steps, batch].

    One permutation per epoch, the same on every rank and for every world size, padded by wrapping
    around; position p of it goes to rank p % world_size. So the first k steps of any world size take
    exactly positions [0, k x world x batch), and an epoch stopped at one world size resumes at
    another from the position reached: no sample of the epoch is skipped or taken twice, but for
    the padding that makes every rank's step count equal."""
    steps = steps_per_rank(n - start, world_size, batch_size)
    end = start + steps * world_size * batch_size
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    perm = torch.randperm(n, generator=g)
    if end > n:
        perm = perm.repeat(math.ceil(end / n))[:end]
    return perm[start:end][rank::world_size].reshape(steps, batch_size)


def eval_shard(n: int, rank: int, world_size: int) -> torch.Tensor:
    """Disjoint, together complete: the whole test set is evaluated exactly once."""
    return torch.arange(n)[rank::world_size]


def _normalise(images: torch.Tensor) -> torch.Tensor:
    return ((images.float() / 255.0) - MEAN) / STD


def digits(seed: int = 0) -> tuple[Split, Split]:
    """scikit-learn's 8x8 digits, scaled into MNIST's 20x20 box centred in 28x28; a fixed 80/20 split."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.pad(F.interpolate(images, size=(20, 20), mode="bilinear", align_corners=False), (4, 4, 4, 4))
    x = (images.clamp(0, 1) - MEAN) / STD
    y = torch.tensor(bunch.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    cut = int(len(y) * 0.8)
    train, test = perm[:cut], perm[cut:]
    return Split(x[train], y[train]), Split(x[test], y[test])


def synthetic(n: int, seed: int) -> tuple[Split, Split]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    cut = max(1, n // 8)
    return Split(x[cut:], y[cut:]), Split(x[:cut], y[:cut])


def read_idx(path: Path) -> torch.Tensor:
    """An IDX file (gzipped or raw) as a uint8 tensor of its declared shape."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file; delete it so it is downloaded again")
    dims = raw[3]
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    body = raw[4 + 4 * dims:]
    if len(body) != math.prod(shape):
        raise DataError(f"{path} is truncated ({len(body)} bytes for shape {shape}); delete it so it is downloaded again")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).view(*shape)


def _find(data_dir: Path, name: str) -> Path | None:
    for candidate in (data_dir / name, data_dir / f"{name}.gz", data_dir / "MNIST" / "raw" / name,
                      data_dir / "MNIST" / "raw" / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def mnist_missing(data_dir: Path) -> list[str]:
    return [name for name in MNIST_FILES if _find(data_dir, name) is None]


def download_mnist(data_dir: Path, mirrors: list[str], timeout: float = 30.0) -> None:
    """Fetch the missing files from the first mirror that has them, checking each md5."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in mnist_missing(data_dir):
        errors = []
        for mirror in mirrors:
            url = mirror.rstrip("/") + f"/{name}.gz"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    payload = response.read()
            except (urllib.error.URLError, OSError, ValueError) as exc:
                errors.append(f"{url}: {getattr(exc, 'reason', exc)}")
                continue
            digest = hashlib.md5(payload).hexdigest()
            if digest != MNIST_FILES[name]:
                errors.append(f"{url}: checksum {digest} does not match {MNIST_FILES[name]}")
                continue
            atomic.write(data_dir / f"{name}.gz", lambda f, data=payload: f.write(data))
            break
        else:
            raise DataError(
                f"could not download {name}.gz from any mirror (this machine looks offline or the mirrors are "
                f"unreachable): {'; '.join(errors)}. Put the four MNIST IDX files ({', '.join(MNIST_FILES)}, "
                f"gzipped or raw) in {data_dir}, pass --mirror URL for a reachable copy, or use --dataset digits")


def mnist(data_dir: Path) -> tuple[Split, Split]:
    missing = mnist_missing(data_dir)
    if missing:
        raise DataError(f"MNIST files missing in {data_dir}: {', '.join(missing)}")

    def load(images: str, labels: str) -> Split:
        x = read_idx(_find(data_dir, images))
        y = read_idx(_find(data_dir, labels))
        if x.dim() != 3 or x.shape[1:] != (28, 28) or y.dim() != 1 or len(x) != len(y):
            raise DataError(f"{images}/{labels} in {data_dir} do not hold matching 28x28 images and labels")
        return Split(_normalise(x).unsqueeze(1), y.long())

    return load("train-images-idx3-ubyte", "train-labels-idx1-ubyte"), load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
