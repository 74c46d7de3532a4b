"""The queue step and its observation on the CPU as one native call (native_queue.c), built and
loaded as DeepRM's kernels are (lightning_sched/deeprm/native.py: compiled at first use with the system
compiler, cached, rows split over torch's own OpenMP threads). `step` returns None wherever the
kernel does not apply (no compiler, LIGHTNING_SCHED_NATIVE=0, a state off the CPU or not laid out as
`init_state` makes it, 2^24 jobs a sequence or nodes) and the caller steps with torch ops
(step_torch.py), which give the same state and observation (tests/test_queue_env.py).
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch

from ..deeprm import native as deeprm_native
from .config import CLUSTER_FEATURES, JOB_FEATURES, QueueConfig
from .state import QueueState

SOURCES = (Path(__file__).with_name("native_queue.c"),)
HEADERS = (Path(__file__).parent.parent / "native_rows.h",)
# QueueArgs of native_queue.c, in its order
SIZES = ("batch", "length", "window", "backfill", "nodes", "processors")
SCALARS = ("threshold", "max_wait", "max_requested")
READ = ("submit", "run", "requested", "processors", "nodes", "job")
IN_PLACE = ("status", "start", "start_rank", "time", "free_nodes", "next_arrival", "done", "bsld_sum", "sjf_order",
            "size_order", "order_count", "order_arrival")
OUT = ("bsld_added", "window_job", "job_features", "cluster_features", "action_mask", "queue_length", "fit_delay")
NUM_ARGS = len(SIZES) + len(SCALARS) + len(READ) + len(IN_PLACE) + len(OUT)
MIN_CHUNK_ROWS = 64  # a queue row costs more than a DeepRM row: smaller chunks still pay for a thread
PACKED_BITS = 24  # native_queue.c's INDEX_BITS: sort keys hold a job index or a node count in their low 24 bits
DTYPES = {"submit": torch.int64, "run": torch.int64, "requested": torch.int64, "processors": torch.int64,
          "nodes": torch.int64, "status": torch.int8, "start": torch.int64, "start_rank": torch.int64,
          "time": torch.int64,
          "free_nodes": torch.int64, "next_arrival": torch.int64, "done": torch.bool, "bsld_sum": torch.float64,
          "sjf_order": torch.int32, "size_order": torch.int32, "order_count": torch.int64, "order_arrival": torch.int64}


# the functions of native_queue.c this module calls
SYMBOLS = ("lightning_sched_queue_rows", "lightning_sched_queue_all", "lightning_sched_queue_args",
           "lightning_sched_queue_openmp")


@functools.lru_cache(maxsize=None)
def load(compiler: str, flags: tuple[str, ...], sources: tuple[Path, ...] = SOURCES,
         headers: tuple[Path, ...] = HEADERS, name: str = "native_queue"):
    """The kernel's library (built from `sources`: another commit's, to compare), or None (with one
    warning) when it cannot be built or loaded."""
    library = deeprm_native.build_and_load(compiler, flags, sources, headers, name, "native queue step",
                                           symbols=SYMBOLS)
    if library is None:
        return None
    for name in ("lightning_sched_queue_rows", "lightning_sched_queue_all"):
        getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_double, ctypes.c_int64, ctypes.c_int64]
        getattr(library, name).restype = ctypes.c_int
    library.lightning_sched_queue_args.restype = ctypes.c_int64
    if library.lightning_sched_queue_args() != NUM_ARGS:
        raise RuntimeError("queue/native.py's argument lists and the C struct QueueArgs differ")
    library.openmp = bool(library.lightning_sched_queue_openmp())
    return library


def kernel():
    """The library, or None when switched off (LIGHTNING_SCHED_NATIVE=0) or unavailable."""
    if os.environ.get(deeprm_native.SWITCH, "1") == "0":
        return None
    return load(deeprm_native.COMPILER, deeprm_native.FLAGS)


def supports(state: QueueState) -> bool:
    """Whether the kernel covers this state: on the CPU, contiguous, with init_state's dtypes."""
    if state.status.device.type != "cpu":
        return False
    return all(getattr(state, k).dtype == d and getattr(state, k).is_contiguous() for k, d in DTYPES.items())


def step(state: QueueState, job: torch.Tensor, cfg: QueueConfig) -> dict[str, torch.Tensor] | None:
    """One decision per row (job: LongTensor[B], the picked job's index; -1 builds the observation
    only) through the kernel, mutating the state in place; the outputs: "bsld_added" DoubleTensor[B],
    "window_job" IntTensor[B, W], "job_features" FloatTensor[B, W, 4], "cluster_features"
    FloatTensor[B, 2], "action_mask" BoolTensor[B, W], "queue_length" LongTensor[B], and with
    `cfg.fit_delay` "fit_delay" FloatTensor[B, W] (step.fit_delay). None where the kernel does not
    apply (nothing changed)."""
    library = kernel()
    if library is None or not supports(state) or max(state.length, cfg.nodes) >= 1 << PACKED_BITS:
        return None
    b, length, w = state.batch, state.length, cfg.window
    job = job.reshape(-1).to(torch.int64).contiguous()
    out = {"bsld_added": torch.empty(b, dtype=torch.float64), "window_job": torch.empty(b, w, dtype=torch.int32),
           "job_features": torch.empty(b, w, JOB_FEATURES, dtype=torch.float32),
           "cluster_features": torch.empty(b, CLUSTER_FEATURES, dtype=torch.float32),
           "action_mask": torch.empty(b, w, dtype=torch.bool), "queue_length": torch.empty(b, dtype=torch.int64)}
    if cfg.fit_delay:
        out["fit_delay"] = torch.empty(b, w, dtype=torch.float32)
    read = [state.submit, state.run, state.requested, state.processors, state.nodes, job]
    sizes = (b, length, w, int(cfg.backfill == "easy"), cfg.nodes, cfg.processors)
    scalars = (float(cfg.bsld_threshold), float(cfg.max_wait), float(cfg.max_requested))
    pointers = [t.data_ptr() for t in read] + [getattr(state, k).data_ptr() for k in IN_PLACE] + \
        [out[k].data_ptr() if k in out else 0 for k in OUT]  # 0: NULL, an output not asked for
    args = (ctypes.c_int64 * NUM_ARGS)(*sizes, *[_double_bits(x) for x in scalars], *pointers)
    deeprm_native.run_rows(library, "queue", args, b, 0.0, min_rows=MIN_CHUNK_ROWS)
    return out


def _double_bits(x: float) -> int:
    """A double's 8 bytes as the int64 slot of the argument array that holds it."""
    return ctypes.c_int64.from_buffer(ctypes.c_double(x)).value
