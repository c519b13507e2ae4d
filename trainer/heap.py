"""Keep the memory a training step frees for the next step.

glibc's malloc hands large blocks back to the kernel when they are freed (blocks above an mmap
threshold it moves at run time, and the top of the heap above a trim threshold). A step frees and
reallocates the same activations every time, so a process that lands on that path pays fresh page
faults each step: measured on a 2-core CPU machine, about 2,400 minor faults and 4 ms of kernel
time in a 26 ms step, in some processes and not in others. That made one rank slower than its peer
at random, and every DDP step waits for the slowest rank. Fixing both thresholds keeps freed blocks
in the heap; the process's peak memory is unchanged, it is simply not returned between steps.

What the heap keeps above its peak use is bounded by the container's memory limit: at most an
eighth of it (and never over 1 GiB), so a process in a small container does not hold freed memory
its limit needs for something else.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from . import cgroups

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit; larger blocks still use mmap
TRIM_THRESHOLD = 1 << 30  # without a memory limit
LIMIT_SHARE = 8  # of the container's memory limit, at most this fraction is kept free in the heap
# A user who tunes malloc through its environment keeps their settings.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def _user_tunes_malloc(env) -> bool:
    return any(name in env for name in USER_SETTINGS) or "glibc.malloc." in env.get("GLIBC_TUNABLES", "")


def trim_threshold(proc: Path = Path("/proc")) -> int:
    """Bytes of freed heap top kept: 1 GiB, or an eighth of the container's memory limit if less."""
    limit = cgroups.memory_limit(proc)
    return TRIM_THRESHOLD if limit is None else min(TRIM_THRESHOLD, limit // LIMIT_SHARE)


def keep_freed_memory(env: dict | None = None, proc: Path = Path("/proc")) -> bool:
    """Set glibc's thresholds; True when they were set. Elsewhere (musl, macOS) nothing changes."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux") or _user_tunes_malloc(env):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim = trim_threshold(proc)
    # Blocks above the mmap threshold are returned at once; below the trim threshold, so a block
    # is never kept that the limit's share could not hold.
    return bool(mallopt(M_MMAP_THRESHOLD, min(MMAP_THRESHOLD, trim))) and bool(mallopt(M_TRIM_THRESHOLD, trim))
