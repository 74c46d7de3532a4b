"""The state of B episodes (`ClusterState`) and the read-only queries on it that the step, the
rewards and the observations share. `cluster.py` changes the state; this module only reads it,
so objectives.py and observations.py depend on it without depending on the step.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..config import ClusterConfig
from ..limits import require_memory

NEVER = 1 << 40  # arrival / finish time of what never happens (padding jobs, unscheduled jobs)


@dataclass
class ClusterState:
    """The state of B episodes. Jobs are stored sorted by (arrival, position); column L is a
    sentinel padding job that empty slots point to.

    order:        LongTensor[B, L+1]    original position of the i-th sorted job (L for the sentinel)
    arrival:      LongTensor[B, L+1]    sorted arrivals (NEVER for padding)
    duration:     IntTensor[B, L+1]     (0 for padding; int32 halves the memory traffic)
    demand:       IntTensor[B, R, L+1]  resource-major, so a slot gather is one row per resource
    deadline:     LongTensor[B, L+1]
    start:        LongTensor[B, L+1]    start time, -1 while unscheduled
    job_start:    LongTensor[B, L+1]    the same in the jobset's own order (SPEC's job_start key)
    arrived_weight: DoubleTensor[B, L+1] prefix sums of 1/d over sorted jobs (slowdown reward)
    num_jobs:     LongTensor[B]
    time:         LongTensor[B]
    num_arrived:  LongTensor[B]         sorted jobs with arrival <= time
    queue_head:   LongTensor[B]         first sorted job that has not entered a slot
    slot_job:     LongTensor[B, M]      sorted index of each slot's job, L when empty
    slot_duration: IntTensor[B, M]      the slot jobs' durations (0 when empty)
    slot_demand:  IntTensor[B, R, M]    and demands
    slot_offset:  LongTensor[B, M]      earliest feasible start offset of each slot's job, -1 when
                  none fits or the slot is empty
    used_bits:    Int/LongTensor[B, R, P, W] used[k][r] as bit planes over the time rows (cluster.py's
                  docstring): row k is bit k mod n of word k // n, n = 31 (int32 words) while the
                  horizon fits in one, else 63 (int64), W = ceil(horizon / n).
                  Up to 62 units, P = U + 2 levels, plane u: used[k][r] >= u; beyond, P =
                  U.bit_length() binary digits, plane s: bit s of used[k][r]
    finish_count: LongTensor[B, T+1]    ring buffer: jobs finishing at time f, at f mod (T+1)
    finish_weight: DoubleTensor[B, T+1] same, summing 1/d
    finished_count: LongTensor[B]       jobs with f_j <= time
    finished_weight: DoubleTensor[B]
    util_sum:     DoubleTensor[B]       sum of per-step utilization (episode metric)
    pending_due:  LongTensor[B, max_time+2] (objective "deadline" only, else [B, 0]): jobs whose
                  deadline is t and that are not scheduled to finish by it, at column min(t,
                  max_time+1); the deadline reward reads one column a step instead of every job
    terminated, truncated: BoolTensor[B]
    """

    order: torch.Tensor
    arrival: torch.Tensor
    duration: torch.Tensor
    demand: torch.Tensor
    deadline: torch.Tensor
    start: torch.Tensor
    job_start: torch.Tensor
    arrived_weight: torch.Tensor
    num_jobs: torch.Tensor
    time: torch.Tensor
    num_arrived: torch.Tensor
    queue_head: torch.Tensor
    slot_job: torch.Tensor
    slot_duration: torch.Tensor
    slot_demand: torch.Tensor
    slot_offset: torch.Tensor
    used_bits: torch.Tensor
    finish_count: torch.Tensor
    finish_weight: torch.Tensor
    finished_count: torch.Tensor
    finished_weight: torch.Tensor
    util_sum: torch.Tensor
    pending_due: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor

    @property
    def done(self) -> torch.Tensor:
        return self.terminated | self.truncated

    @property
    def max_jobs(self) -> int:
        return self.order.shape[1] - 1

    def rows(self, index) -> "ClusterState":
        """The episodes `index` (a slice or index tensor over B) as a state of their own."""
        return ClusterState(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def put_rows(self, index: torch.Tensor, other: "ClusterState") -> "ClusterState":
        """A state whose rows `index` (LongTensor[N]) are the N episodes of `other`, in order; new
        tensors throughout (observations may alias this state's)."""
        out = {}
        for f in fields(self):
            mine = getattr(self, f.name).clone()
            mine[index] = getattr(other, f.name)
            out[f.name] = mine
        return ClusterState(**out)

    def merge(self, rows: torch.Tensor, other: "ClusterState") -> "ClusterState":
        """A state whose rows where `rows` (BoolTensor[B]) is true come from `other`."""
        out = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            mask = rows.view(-1, *([1] * (mine.dim() - 1)))
            out[f.name] = torch.where(mask, theirs, mine)
        return ClusterState(**out)


WORD_BITS = {torch.int32: 31, torch.int64: 63}  # time rows a word: the sign bit stays clear
# Up to this many units the counts are kept in unary (one plane per level: a fit test is one gather,
# a placement one gather and OR); beyond, in binary (log2 U planes, compared and added bit by bit)
UNARY_MAX_UNITS = 62


def unary(cfg: ClusterConfig) -> bool:
    return cfg.resource_units <= UNARY_MAX_UNITS


def num_planes(cfg: ClusterConfig) -> int:
    """Bit planes per resource: levels 0..U+1 in unary, else enough binary digits for U."""
    return cfg.resource_units + 2 if unary(cfg) else cfg.resource_units.bit_length()


def word_dtype(cfg: ClusterConfig) -> torch.dtype:
    """int32 words while one holds the horizon (half the memory traffic), else int64."""
    return torch.int32 if cfg.horizon <= WORD_BITS[torch.int32] else torch.int64


def num_words(cfg: ClusterConfig) -> int:
    """Words per plane: one bit per time row."""
    return -(-cfg.horizon // WORD_BITS[word_dtype(cfg)])


def count_planes(bits: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """The counts that planes of 0/1 encode: bits [B, R, P, ...] -> LongTensor[B, R, ...]."""
    if unary(cfg):
        return bits.sum(2) - 1  # levels 1..U set, level 0 always is
    weight = (1 << torch.arange(bits.shape[2], device=bits.device)).view(1, 1, -1, *([1] * (bits.dim() - 3)))
    return (bits * weight).sum(2)


def used_now(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """used[0][r]: LongTensor[B, R] (bit 0 of word 0 of every plane)."""
    return count_planes(state.used_bits[..., 0] & 1, cfg)


def state_bytes(cfg: ClusterConfig, batch: int, max_jobs: int) -> int:
    """Bytes of B episodes' state plus one step's observation, estimated before allocating."""
    r, m, t = cfg.num_resources, cfg.num_slots, cfg.horizon
    per_job = 7 * 8 + 4 + 4 * r  # order, arrival, deadline, start, job_start, arrived_weight (8 B); duration; demand
    planes, words = num_planes(cfg), num_words(cfg)
    per_row = ((max_jobs + 1) * per_job + (t + 1) * 16 + r * planes * words * 8 + m * (20 + 4 * r)
               + (cfg.max_time + 2) * 8 * (cfg.objective == "deadline"))
    observation = {"image": t * cfg.image_width * 4, "compact": cfg.compact_size * 4, "none": 0}[cfg.observation]
    per_row += observation + t * r * 8 + max_jobs * 8  # the used rows and job_start published each step
    return batch * per_row


def require_state_fits(cfg: ClusterConfig, batch: int, max_jobs: int, copies: int = 1) -> None:
    """ConfigError naming the sizes when B episodes' state (`copies` times: an env replaying fixed
    jobsets keeps their first state too) would not fit in memory."""
    fields = {"batch": batch, "jobs per jobset": max_jobs, "horizon": cfg.horizon, "num_slots": cfg.num_slots,
              "observation": cfg.observation}
    if copies > 1:
        fields["states kept"] = copies
    if cfg.objective == "deadline":
        fields["max_time"] = cfg.max_time
    require_memory("the environment's state", copies * state_bytes(cfg, batch, max_jobs), fields)


def used_rows(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """used[k][r] for the whole horizon: LongTensor[B, T, R] (for observations, not the step)."""
    b, r, planes, words = state.used_bits.shape
    size = WORD_BITS[state.used_bits.dtype]
    # only the horizon's bits when it fits in one word; sums of ints come out int64 without a cast
    bit = torch.arange(min(size, cfg.horizon), device=state.used_bits.device, dtype=state.used_bits.dtype)
    rows = ((state.used_bits.unsqueeze(-1) >> bit) & 1).reshape(b, r, planes, words * bit.numel())[..., : cfg.horizon]
    return count_planes(rows, cfg).transpose(1, 2)


def divide_exactly(numerator: torch.Tensor, denominator: int) -> torch.Tensor:
    """numerator / denominator in float64, rounded once, on every device: the divisor as a tensor,
    since CUDA multiplies by the reciprocal of a Python number instead (9 / 10 one ulp off). Cast
    to float32 after, a ratio of integers with a denominator below 2**24 is the float32 nearest to
    it (no ratio of such integers lies within a float64 rounding of a float32 tie), as the CPU's
    float32 division gives. DoubleTensor, numerator's shape."""
    return numerator.double() / numerator.new_full((1,), denominator, dtype=torch.float64)


def utilization_now(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """Mean over resources of used[0][r] / U: DoubleTensor[B] (each division rounded once, on
    every device, as the CPU's mean and division round)."""
    used = used_now(state, cfg).double()
    return divide_exactly(divide_exactly(used.sum(1), used.shape[1]), cfg.resource_units)
