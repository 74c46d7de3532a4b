"""`cluster.step_state` on the CPU as one native call instead of ~70 small torch ops (native_step.c),
and DeepRM's image drawn in one pass (native_image.c).

The C sources are compiled at first use with the system C compiler into one library in a cache
folder (keyed by a hash of the sources and the flags) and loaded with ctypes, which releases the
GIL. Built with OpenMP where the compiler has it: the library then needs libgomp.so.1, which torch
ships and has loaded already, so the loader reuses torch's and the rows are split over the very
threads torch's own ops run on (a second team of threads would compete with torch's for the cores
while those spin waiting for work). Without OpenMP one thread steps every row. `step` returns None
wherever the kernel does not apply, and the caller runs the torch step: no compiler (one warning),
LIGHTNING_SCHED_NATIVE=0, a state off the CPU, or a state whose tensors are not laid out as
`init_state` makes them (the image: also resource_units > 62, the binary layout). The results are
the torch step's exactly (tests/test_native_step.py compares every field).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

from ..allocator import Buffers
from ..config import OBJECTIVES, ClusterConfig
from ..threads import follow_load
from .state import ClusterState, num_planes, num_words, unary, word_dtype

# one library: the step and the image render
C_SOURCES = (Path(__file__).with_name("native_step.c"), Path(__file__).with_name("native_image.c"))
C_HEADERS = (Path(__file__).parent.parent / "native_rows.h",)  # part of what the cached library is keyed by
COMPILER = os.environ.get("CC", "cc")
# no -march=native: the cache may be shared by machines with different CPUs, and the kernel is
# scalar code; no fused multiply-adds, which would round rewards differently from torch
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c11", "-ffp-contract=off")
OPENMP = ("-fopenmp",)  # tried first: rows split over torch's own OpenMP threads (see run_rows)
SWITCH = "LIGHTNING_SCHED_NATIVE"  # "0" runs the torch step (benchmarks side by side, tests)
MIN_CHUNK_ROWS = 256  # rows per thread below which handing rows to another thread costs more than it saves

# StepArgs of native_step.c, in its order: the sizes, then pointers to what it reads (state fields and
# the action), to the state fields the torch step mutates in place, to fresh tensors for the fields
# the torch step replaces (observations may alias the old ones), to the reward, and to KEYS
SIZES = ("batch", "max_jobs", "num_slots", "num_resources", "num_planes", "num_words", "horizon", "word_bytes",
         "resource_units", "max_time", "objective", "pending_width", "max_track_since_new")
READ = ("order", "arrival", "duration", "demand", "deadline", "arrived_weight", "num_jobs", "action", "time",
        "num_arrived", "queue_head", "slot_job", "slot_duration", "slot_demand", "slot_offset", "used_bits",
        "finished_count", "finished_weight", "util_sum", "terminated", "truncated")
IN_PLACE = ("start", "job_start", "pending_due", "finish_count", "finish_weight")
REPLACED = ("time", "num_arrived", "queue_head", "slot_job", "slot_duration", "slot_demand", "slot_offset",
            "used_bits", "finished_count", "finished_weight", "util_sum", "terminated", "truncated")
# observation keys of the state the step leaves, which the kernel has at hand (observations.py
# defines them; observe() takes them from `observed_keys`), after the reward: (key, dtype, trailing shape)
KEYS = (("action_mask", torch.bool, lambda cfg: (cfg.num_slots + 1,)),
        ("slot_deadline", torch.int64, lambda cfg: (cfg.num_slots,)),
        ("free_now", torch.int64, lambda cfg: (cfg.num_resources,)),
        ("since_new", torch.float32, lambda cfg: (1,)))
# the tensors the keys derive from that a step replaces: the keys hold while these are the state's
SOURCES = ("time", "num_arrived", "slot_job", "slot_offset", "used_bits")
_KEYS_ATTRIBUTE = "_native_keys"  # where a state keeps the keys its last native step wrote
NUM_ARGS = len(SIZES) + len(READ) + len(IN_PLACE) + len(REPLACED) + 1 + len(KEYS)

LONG, INT, DOUBLE, BOOL = torch.int64, torch.int32, torch.float64, torch.bool
DTYPES = {"order": LONG, "arrival": LONG, "duration": INT, "demand": INT, "deadline": LONG, "start": LONG,
          "job_start": LONG, "arrived_weight": DOUBLE, "num_jobs": LONG, "time": LONG, "num_arrived": LONG,
          "queue_head": LONG, "slot_job": LONG, "slot_duration": INT, "slot_demand": INT, "slot_offset": LONG,
          "finish_count": LONG, "finish_weight": DOUBLE, "finished_count": LONG, "finished_weight": DOUBLE,
          "util_sum": DOUBLE, "pending_due": LONG, "terminated": BOOL, "truncated": BOOL}


def private(path: Path) -> bool:
    """Whether `path` is this user's and nobody else may write to it: a library loaded from a place
    another user can write would run their code."""
    try:
        status = path.stat()
    except OSError:
        return False
    return status.st_uid == os.getuid() and not status.st_mode & 0o022


def safe_ancestors(path: Path) -> bool:
    """Whether no other user can replace `path` through a folder above it: each is this user's or
    root's, and not writable by others unless sticky (as /tmp is, where only owners rename)."""
    for folder in path.resolve().parents:
        try:
            status = folder.stat()
        except OSError:
            return False
        if status.st_uid not in (0, os.getuid()) or status.st_mode & 0o022 and not status.st_mode & stat.S_ISVTX:
            return False
    return True


@functools.lru_cache(maxsize=None)
def private_temp_dir() -> Path:
    """A folder of this process's own (0700), for when no private cache folder can be had; removed
    when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="lightning_sched-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def cache_dir() -> Path:
    """Where the compiled kernel is kept: $XDG_CACHE_HOME/lightning_sched or ~/.cache/lightning_sched,
    made 0700 (also when an earlier version made it with the umask's mode); a private temporary
    folder instead when there is no home, or the folder is another user's or sits in one others can
    write (never a shared one such as /tmp/lightning_sched)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no HOME and no passwd entry (a container's arbitrary user)
            return private_temp_dir()
    folder = Path(base) / "lightning_sched"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.stat().st_uid == os.getuid() and not private(folder):
            folder.chmod(0o700)
    except OSError:
        return private_temp_dir()
    return folder if private(folder) and safe_ancestors(folder) else private_temp_dir()


def build(compiler: str, flags: tuple[str, ...], sources: tuple[Path, ...] = C_SOURCES,
          headers: tuple[Path, ...] = C_HEADERS, name: str = "native_step") -> Path:
    """Compile `sources` (which include `headers`) into one library `name`, once per source text,
    compiler and flags; the library's path. Raises OSError or subprocess.CalledProcessError."""
    texts = [path.read_bytes() for path in sources + headers]
    key = hashlib.sha256(b"\0".join([*texts, compiler.encode(), *(f.encode() for f in flags),
                                     platform.machine().encode()])).hexdigest()[:16]
    folder = cache_dir()
    library = folder / f"{name}-{key}.so"
    if library.exists() and private(library):
        return library
    # into a temporary file, then renamed: processes building at once never load a half-written file
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=library.stem, suffix=".tmp")
    os.close(handle)
    try:
        subprocess.run([compiler, *flags, "-o", temporary, *map(str, sources)], check=True, capture_output=True,
                       timeout=120)
        os.replace(temporary, library)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return library


def build_and_load(compiler: str, flags: tuple[str, ...], sources: tuple[Path, ...] = C_SOURCES,
                   headers: tuple[Path, ...] = C_HEADERS, name: str = "native_step", what: str = "native CPU step",
                   symbols: tuple[str, ...] = ()):
    """`build` then load the library, with OpenMP where the compiler has it, else without; None (with
    one warning naming `what`) when neither can be built or loaded, or the library lacks one of
    `symbols` (a damaged or stale file under the cache's name: a robustness check, made after the
    load; `cache_dir` and `build`'s ownership checks are what keep others' libraries out)."""
    failure = None
    for extra in (OPENMP, ()):
        try:
            path = build(compiler, flags + extra, sources, headers, name)
            library = ctypes.CDLL(str(path))
            missing = [symbol for symbol in symbols if not hasattr(library, symbol)]
            if missing:
                raise OSError(f"{path} lacks {missing[0]} (a damaged or foreign library: remove it)")
            return library
        except (OSError, subprocess.SubprocessError) as error:
            failure = error
    detail = getattr(failure, "stderr", None) or b""
    warnings.warn(f"the {what} could not be built with {compiler!r} ({type(failure).__name__}: "
                  f"{failure} {detail.decode(errors='replace')[-500:]}); stepping with torch ops instead", stacklevel=4)
    return None


@contextlib.contextmanager
def stepping_with_torch(torch_step: bool = True):
    """While inside, the torch step instead of the native kernels (both envs'), with torch_step; the
    switch's earlier value comes back on leaving."""
    before = os.environ.get(SWITCH)
    if torch_step:
        os.environ[SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = before


# the functions of native_step.c this module calls
SYMBOLS = ("lightning_sched_step_rows", "lightning_sched_step_all", "lightning_sched_render_rows",
           "lightning_sched_render_all", "lightning_sched_openmp", "lightning_sched_step_args",
           "lightning_sched_render_args")


@functools.lru_cache(maxsize=None)
def load(compiler: str, flags: tuple[str, ...]):
    """The kernels' library with their argument types, or None (with one warning) when it cannot be
    built or loaded. Built with OpenMP where the compiler has it (`library.openmp`), else without."""
    library = build_and_load(compiler, flags, symbols=SYMBOLS)
    if library is None:
        return None
    for name, scalars in (("step", [ctypes.c_double]), ("render", [])):
        rows, every = getattr(library, f"lightning_sched_{name}_rows"), getattr(library, f"lightning_sched_{name}_all")
        rows.argtypes = [ctypes.c_void_p, *scalars, ctypes.c_int64, ctypes.c_int64]
        every.argtypes = [ctypes.c_void_p, *scalars, ctypes.c_int64, ctypes.c_int64]
        rows.restype = every.restype = ctypes.c_int
    library.openmp = bool(library.lightning_sched_openmp())
    library.lightning_sched_step_args.restype = library.lightning_sched_render_args.restype = ctypes.c_int64
    # the argument arrays below must lay out the C structs field by field
    if (library.lightning_sched_step_args(), library.lightning_sched_render_args()) != (
            NUM_ARGS, len(IMAGE_SIZES) + len(IMAGE_READ) + 2):
        raise RuntimeError("native.py's argument lists and the C structs StepArgs/ImageArgs differ")
    return library


def kernels():
    """The library, or None when switched off (LIGHTNING_SCHED_NATIVE=0) or unavailable."""
    if os.environ.get(SWITCH, "1") == "0":
        return None
    return load(COMPILER, FLAGS)


def available() -> bool:
    return kernels() is not None


def supports(state: ClusterState, cfg: ClusterConfig) -> bool:
    """Whether the step's kernel covers this state: on the CPU, the dtypes and sizes of `init_state`
    (either plane layout), and the fields mutated in place contiguous (a copy would lose the mutation)."""
    if state.used_bits.device.type != "cpu":
        return False
    b, length = state.order.shape[0], state.max_jobs
    if state.used_bits.dtype != word_dtype(cfg) or state.used_bits.shape != (
            b, cfg.num_resources, num_planes(cfg), num_words(cfg)):
        return False
    if any(getattr(state, name).dtype != dtype for name, dtype in DTYPES.items()):
        return False
    pending = cfg.max_time + 2 if cfg.objective == "deadline" else state.pending_due.shape[1]
    shapes = {"arrival": (b, length + 1), "duration": (b, length + 1), "deadline": (b, length + 1),
              "demand": (b, cfg.num_resources, length + 1), "start": (b, length + 1), "job_start": (b, length + 1),
              "arrived_weight": (b, length + 1), "slot_job": (b, cfg.num_slots), "slot_duration": (b, cfg.num_slots),
              "slot_demand": (b, cfg.num_resources, cfg.num_slots), "slot_offset": (b, cfg.num_slots),
              "finish_count": (b, cfg.horizon + 1), "finish_weight": (b, cfg.horizon + 1),
              "pending_due": (b, pending)}
    if any(getattr(state, name).shape != shape for name, shape in shapes.items()):
        return False
    return all(getattr(state, name).is_contiguous() for name in IN_PLACE)


def run_rows(library, kernel: str, args, batch: int, *scalars, min_rows: int = MIN_CHUNK_ROWS) -> None:
    """Kernel `kernel` ("step", "render", "queue") over rows 0..B-1: spread over torch's OpenMP
    threads in chunks of at least `min_rows` where the library has OpenMP, else on this thread alone
    (a pool of threads of our own competes with torch's spinning workers for the cores)."""
    pointer = ctypes.addressof(args)
    follow_load()  # under threads.use_free_cores, the thread count the free cores allow
    if library.openmp:
        failed = getattr(library, f"lightning_sched_{kernel}_all")(pointer, *scalars, batch, min_rows)
    else:
        failed = getattr(library, f"lightning_sched_{kernel}_rows")(pointer, *scalars, 0, batch)
    if failed:
        raise MemoryError(f"the native {kernel} kernel could not allocate its scratch memory")


def step(state: ClusterState, action: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor | None:
    """cluster.step_state through the kernel: the reward, FloatTensor[B], with the state updated
    as the torch step updates it; None (nothing changed) where the kernel does not apply."""
    library = kernels()
    if library is None or not supports(state, cfg):
        return None
    batch = state.order.shape[0]
    action = action.reshape(-1)
    if action.numel() != batch or action.device.type != "cpu":
        return None  # the torch step says what is wrong
    action = action.long().contiguous()
    read = {name: getattr(state, name).contiguous() for name in READ if name != "action"}
    read["action"] = action
    fresh = {name: torch.empty_like(read[name]) for name in REPLACED}
    reward = torch.empty(batch, dtype=torch.float32)
    keys = {key: torch.empty(batch, *shape(cfg), dtype=dtype) for key, dtype, shape in KEYS}
    sizes = (batch, state.max_jobs, cfg.num_slots, cfg.num_resources, num_planes(cfg), num_words(cfg), cfg.horizon,
             state.used_bits.element_size(), cfg.resource_units, cfg.max_time, OBJECTIVES.index(cfg.objective),
             state.pending_due.shape[1], cfg.max_track_since_new)
    pointers = ([read[name].data_ptr() for name in READ] + [getattr(state, name).data_ptr() for name in IN_PLACE]
                + [fresh[name].data_ptr() for name in REPLACED] + [reward.data_ptr()]
                + [tensor.data_ptr() for tensor in keys.values()])
    args = (ctypes.c_int64 * NUM_ARGS)(*sizes, *pointers)
    run_rows(library, "step", args, batch, float(cfg.tardiness_weight))
    for name, tensor in fresh.items():
        setattr(state, name, tensor)
    # not a dataclass field: rows() and merge() leave it behind, and observed_keys checks its sources
    state.__dict__[_KEYS_ATTRIBUTE] = (tuple(fresh[name] for name in SOURCES), keys)
    return reward



def observed_keys(state: ClusterState) -> dict[str, torch.Tensor]:
    """The observation keys the last native step computed for `state` ({} when the state has
    changed since, e.g. a torch step or rows reset, or no native step made it)."""
    entry = state.__dict__.get(_KEYS_ATTRIBUTE)
    if entry is None or any(source is not getattr(state, name) for source, name in zip(entry[0], SOURCES)):
        return {}
    return entry[1]


# ImageArgs of native_image.c, in its order: the sizes, the state fields it reads, since_new, then
# the image and the used rows it writes
IMAGE_SIZES = ("batch", "horizon", "num_resources", "resource_units", "num_slots", "max_job_units", "num_planes",
               "num_words", "word_bytes", "backlog_size", "backlog_width", "image_width")
IMAGE_READ = ("used_bits", "slot_duration", "slot_demand", "num_arrived", "queue_head", "since_new")


def render(state: ClusterState, cfg: ClusterConfig, since_new: torch.Tensor,
           buffers: Buffers | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(DeepRM's image FloatTensor[B, T, W], the used rows LongTensor[B, T, R]) of `state`, as
    observations.render_image and state.used_rows make them, in one native pass that writes each
    cell once; None where the kernel does not apply (the caller renders with torch ops).
    since_new: FloatTensor[B], the observation key (the image's last column); buffers: where the
    two outputs come from (fresh tensors without)."""
    library = kernels()
    if library is None or not unary(cfg) or not supports(state, cfg):  # the image exists only for small U
        return None
    batch = state.order.shape[0]
    take = buffers.take if buffers is not None else lambda shape, dtype, device: torch.empty(shape, dtype=dtype)
    image = take((batch, cfg.horizon, cfg.image_width), torch.float32, "cpu")
    used = take((batch, cfg.horizon, cfg.num_resources), torch.long, "cpu")
    read = [getattr(state, name).contiguous() for name in IMAGE_READ[:-1]]
    read.append(since_new.reshape(-1).to(torch.float32).contiguous())
    sizes = (batch, cfg.horizon, cfg.num_resources, cfg.resource_units, cfg.num_slots, cfg.max_job_units,
             num_planes(cfg), num_words(cfg), state.used_bits.element_size(), cfg.backlog_size, cfg.backlog_width,
             cfg.image_width)
    args = (ctypes.c_int64 * (len(IMAGE_SIZES) + len(IMAGE_READ) + 2))(
        *sizes, *(t.data_ptr() for t in read), image.data_ptr(), used.data_ptr())
    run_rows(library, "render", args, batch)
    return image, used
