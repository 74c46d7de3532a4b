"""Keeping freed memory for the next step.

glibc's malloc serves a block above its mmap threshold (128 KiB, growing to at most 32 MiB) with a
fresh mapping and gives it back to the kernel when freed. A batched step allocates tensors of a
few MiB (the image observation of 1,024 rows is 17.5 MiB), so with the defaults every step maps fresh pages and
faults each one in again: at DeepRM's size that, not the arithmetic, bounds the image
observation's rate. Raising the mmap and trim thresholds keeps freed blocks in the heap, where the
next step's tensors of the same size reuse them. The process then keeps its peak memory instead of
returning it, which is what a training or benchmark process wants.

It is a setting of the whole process, so the library never applies it on its own: the scripts do
(`scripts/_common.set_threads`), and a user's program may call `reuse_freed_memory()` once.
"""
from __future__ import annotations

import ctypes
import ctypes.util

from .config import ConfigError

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def reuse_freed_memory(max_block_bytes: int = 1 << 30) -> bool:
    """Ask glibc to serve blocks up to `max_block_bytes` from its heap and to keep freed memory.

    Returns whether it applied: False where the C library is not glibc (macOS, Windows, musl), or
    where mallopt refused the values; nothing else changes then.
    """
    if max_block_bytes < 1:
        raise ConfigError(f"reuse_freed_memory: max_block_bytes must be >= 1, got {max_block_bytes}")
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    value = min(max_block_bytes, 2**31 - 1)
    return bool(mallopt(_M_MMAP_THRESHOLD, value)) and bool(mallopt(_M_TRIM_THRESHOLD, value))
