"""MNIST's IDX files, made up: the loader's real format, without the download."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import torch


def idx(array: torch.Tensor) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim()) + struct.pack(f">{array.dim()}I", *array.shape)
    return header + array.to(torch.uint8).numpy().tobytes()


def write(directory: Path, n_train=32, n_test=8, gz=True) -> dict:
    """The four files MNIST publishes, of random pixels and labels; returns the arrays."""
    g = torch.Generator().manual_seed(0)
    arrays = {
        "train-images-idx3-ubyte": torch.randint(0, 256, (n_train, 28, 28), generator=g),
        "train-labels-idx1-ubyte": torch.randint(0, 10, (n_train,), generator=g),
        "t10k-images-idx3-ubyte": torch.randint(0, 256, (n_test, 28, 28), generator=g),
        "t10k-labels-idx1-ubyte": torch.randint(0, 10, (n_test,), generator=g),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        payload = idx(array)
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(payload, mtime=0))
        else:
            (directory / name).write_bytes(payload)
    return arrays
