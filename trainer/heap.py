"""Keep the memory a training step frees for the next step.

glibc's malloc hands large blocks back to the kernel when they are freed (blocks above an mmap
threshold it moves at run time, and the top of the heap above a trim threshold). A step frees and
reallocates the same activations every time, so a process that lands on that path pays fresh page
faults each step: measured on a 2-core CPU machine, about 2,400 minor faults and 4 ms of kernel
time in a 26 ms step, in some processes and not in others. That made one rank slower than its peer
at random, and every DDP step waits for the slowest rank. Fixing both thresholds keeps freed blocks
in the heap; the process's peak memory is unchanged, it is simply not returned between steps.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit; larger blocks still use mmap
TRIM_THRESHOLD = 1 << 30
# A user who tunes malloc through its environment keeps their settings.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def _user_tunes_malloc(env) -> bool:
    return any(name in env for name in USER_SETTINGS) or "glibc.malloc." in env.get("GLIBC_TUNABLES", "")


def keep_freed_memory(env: dict | None = None) -> bool:
    """Set glibc's thresholds; True when they were set. Elsewhere (musl, macOS) nothing changes."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux") or _user_tunes_malloc(env):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
