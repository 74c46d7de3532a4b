"""Keeping freed memory for the next step: buffers an env keeps (`Buffers`), or glibc told to keep
what it frees (`reuse_freed_memory`).

glibc's malloc serves a block above its mmap threshold (128 KiB, growing to at most 32 MiB) with a
fresh mapping and gives it back to the kernel when freed. A batched step allocates tensors of a
few MiB (the image observation of 1,024 rows is 17.5 MiB), so with the defaults every step maps fresh pages and
faults each one in again: at DeepRM's size that, not the arithmetic, bounds the image
observation's rate. Raising the mmap and trim thresholds keeps freed blocks in the heap, where the
next step's tensors of the same size reuse them. The process then keeps its peak memory instead of
returning it, which is what a training or benchmark process wants.

It is a setting of the whole process, so the library never applies it on its own: the scripts do
(`scripts/_common.set_threads`), and a user's program may call `reuse_freed_memory()` once. The
library keeps its largest tensor, the image observation, itself instead (`Buffers`): a step's
image is drawn into one of the env's buffers that nothing outside holds any more, so the library
path needs no process setting, and an observation a user holds is never written again.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

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


class Buffers:
    """Tensors kept for reuse: `take` hands out one that nothing else refers to any more (no Python
    reference, view, autograd graph or other C++ holder: torch's reference counts say so), else a
    fresh one, kept while fewer than `keep` of its shape, dtype and device are. A tensor handed out
    is the caller's until every reference to it is gone; only then can a later `take` return it,
    to be written again. Where torch lacks the private counts (`Tensor._use_count`,
    `torch._C._storage_Use_Count`), every `take` allocates."""

    def __init__(self, keep: int = 3):
        self.keep = keep
        self._kept: dict[tuple, list[torch.Tensor]] = {}

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
        """An uninitialised tensor of `shape`, `dtype` on `device` that nobody else holds."""
        kept = self._kept.setdefault((torch.Size(shape), dtype, torch.device(device)), [])
        for index in range(len(kept)):  # by index: no reference of the loop's own
            if _only_kept(kept, index):
                return kept[index]
        fresh = torch.empty(shape, dtype=dtype, device=device)
        if len(kept) >= self.keep:  # the oldest goes: a user who keeps every step's tensor needs no copies
            kept.pop(0)
        kept.append(fresh)
        return fresh


def _references(kept: list[torch.Tensor], index: int) -> tuple[int, int, int]:
    """Python references to kept[index], C++ ones to its tensor (an autograd graph holds one) and
    to its memory (views, numpy arrays and DLPack capsules hold one): each includes the list's own
    and those made to ask, which `_ALONE` counts for a tensor in a list and nowhere else."""
    return (sys.getrefcount(kept[index]), kept[index]._use_count(),
            torch._C._storage_Use_Count(kept[index].untyped_storage()._cdata))


def _only_kept(kept: list[torch.Tensor], index: int) -> bool:
    """Whether only the list refers to kept[index] and its memory."""
    try:
        return _references(kept, index) <= _ALONE
    except AttributeError:  # a torch without the counts: never reuse
        return False


try:
    _ALONE = _references([torch.empty(0)], 0)
except AttributeError:
    _ALONE = (0, 0, 0)
