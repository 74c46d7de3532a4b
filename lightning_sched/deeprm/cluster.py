"""The batched cluster state machine behind `ClusterEnv` (SPEC "State and decisions").

Everything is a tensor with a leading batch dimension B; a step is a fixed sequence of tensor
operations with no Python loop over rows or jobs, and on an accelerator no host synchronisation
(on the CPU the slot search first finds the slots that hold a job, `slot_offsets`), so the same
code runs on a GPU. Three ideas keep a step cheap at any cluster size:

* Occupancy as bit planes over the time rows, 63 rows an int64 word, so a horizon of any length
  takes ceil(T / 63) words. Up to 62 units the planes are levels (plane u, bit k: used[k][r] >= u):
  a job of demand q fits row k iff bit k of level U+1-q is clear, one gather for all rows, and a
  placement moves levels up by q inside the job's rows. Beyond, U + 2 planes would make a step
  cost grow with U, so the planes are binary digits (plane s, bit k: bit s of used[k][r]): S =
  U.bit_length() planes, a fit test compares used[k][r] with U - q digit by digit from the top for
  all rows at once, and a placement adds q with a ripple carry. A time advance shifts every plane.
* A run of d fitting rows is two overlapping runs of the largest power of two <= d, and runs of
  length 1, 2, 4, ... come from AND-ing shifted copies; the earliest offset is the lowest set bit.
* Jobs sorted by (arrival, position) once at reset. Waiting jobs are then a queue: the M slots hold
  the first M of them, the backlog is the contiguous range [queue_head, num_arrived) behind them,
  and arrivals are a searchsorted on the sorted arrival times.
"""
from __future__ import annotations

import functools
import warnings

import torch

from ..config import ClusterConfig
from ..jobs import JobSet
from . import native
from .objectives import interval_reward
from .state import (
    NEVER,
    WORD_BITS,
    ClusterState,
    num_planes,
    num_words,
    require_state_fits,
    unary,
    utilization_now,
    word_dtype,
)


def init_state(jobs: JobSet, cfg: ClusterConfig) -> ClusterState:
    """State at time 0 for B jobsets (validated by the caller)."""
    device = jobs.device
    b, length = jobs.arrival.shape
    require_state_fits(cfg, b, length)
    real = jobs.duration > 0
    # stable sort by arrival, padding last: ties keep jobset order, as SPEC's slot order asks
    key = torch.where(real, jobs.arrival, torch.full_like(jobs.arrival, NEVER))
    sorted_key, order = torch.sort(key, dim=1, stable=True)

    def sort_and_pad(x: torch.Tensor, pad_value: int) -> torch.Tensor:
        """[B, L] -> sorted [B, L+1] with the sentinel job at column L."""
        x = x.gather(1, order)
        return torch.cat([x, x.new_full((b, 1), pad_value)], dim=1)

    arrival = torch.cat([sorted_key, sorted_key.new_full((b, 1), NEVER)], dim=1)
    duration = sort_and_pad(jobs.duration * real, 0).int()
    demand = torch.stack([sort_and_pad(jobs.demand[:, :, r] * real, 0) for r in range(cfg.num_resources)], 1).int()
    # padding never falls due
    deadline = sort_and_pad(torch.where(real, jobs.deadlines(cfg.slo_slowdown), NEVER), NEVER)
    weight = torch.where(duration > 0, 1.0 / duration.clamp(min=1).double(), 0.0)
    arrived_weight = torch.cat([weight.new_zeros(b, 1), weight[:, :length].cumsum(1)], dim=1)
    zeros = torch.zeros(b, dtype=torch.long, device=device)
    m, r = cfg.num_slots, cfg.num_resources
    state = ClusterState(
        order=torch.cat([order, order.new_full((b, 1), length)], dim=1),
        arrival=arrival.contiguous(),
        duration=duration,
        demand=demand,
        deadline=deadline,
        start=torch.full((b, length + 1), -1, dtype=torch.long, device=device),
        job_start=torch.full((b, length + 1), -1, dtype=torch.long, device=device),
        arrived_weight=arrived_weight,
        num_jobs=real.sum(1),
        time=zeros.clone(),
        num_arrived=zeros.clone(),
        queue_head=zeros.clone(),
        slot_job=torch.full((b, m), length, dtype=torch.long, device=device),
        slot_duration=torch.zeros(b, m, dtype=torch.int32, device=device),
        slot_demand=torch.zeros(b, r, m, dtype=torch.int32, device=device),
        slot_offset=torch.full((b, m), -1, dtype=torch.long, device=device),
        used_bits=occupied_cluster(jobs, cfg),
        finish_count=torch.zeros(b, cfg.horizon + 1, dtype=torch.long, device=device),
        finish_weight=torch.zeros(b, cfg.horizon + 1, dtype=torch.float64, device=device),
        finished_count=zeros.clone(),
        finished_weight=torch.zeros(b, dtype=torch.float64, device=device),
        util_sum=torch.zeros(b, dtype=torch.float64, device=device),
        pending_due=_pending_due(deadline, duration, cfg),
        terminated=torch.zeros(b, dtype=torch.bool, device=device),
        truncated=torch.zeros(b, dtype=torch.bool, device=device),
    )
    state.num_arrived = _count_arrived(state, state.time)
    _update_slots(state, cfg)
    return state


def _pending_due(deadline: torch.Tensor, duration: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """Jobs falling due at each time, none scheduled yet: LongTensor[B, max_time+2] ([B, 0] unless
    the objective is "deadline"). Deadlines past max_time+1 share the last column, never read."""
    b = deadline.shape[0]
    if cfg.objective != "deadline":
        return deadline.new_zeros(b, 0)
    due = deadline.new_zeros(b, cfg.max_time + 2)
    column = deadline[:, :-1].clamp(0, cfg.max_time + 1)
    return due.scatter_add_(1, column, (duration[:, :-1] > 0).long())  # padding adds 0


# ----- pieces of a step ------------------------------------------------------------------------
def _count_arrived(state: ClusterState, time: torch.Tensor) -> torch.Tensor:
    """Sorted jobs with arrival <= time: LongTensor[B]."""
    return torch.searchsorted(state.arrival, time.unsqueeze(1), right=True).squeeze(1)


def _update_slots(state: ClusterState, cfg: ClusterConfig) -> None:
    """Move jobs from the front of the backlog into the empty slots at the end (slots stay
    compact), then refresh what depends on the slots and the occupancy: the slot jobs'
    attributes and their earliest feasible start offsets."""
    length = state.max_jobs
    m = torch.arange(state.slot_job.shape[1], device=state.slot_job.device)
    filled = (state.slot_job < length).sum(1, keepdim=True)
    candidate = state.queue_head.unsqueeze(1) + (m - filled)
    take = (m >= filled) & (candidate < state.num_arrived.unsqueeze(1))
    state.slot_job = torch.where(m < filled, state.slot_job, torch.where(take, candidate, length))
    state.queue_head = state.queue_head + take.sum(1)
    state.slot_duration = state.duration.gather(1, state.slot_job)
    state.slot_demand = state.demand.gather(2, state.slot_job.unsqueeze(1).expand(-1, cfg.num_resources, -1))
    state.slot_offset = slot_offsets(state, cfg)


def slot_offsets(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """Earliest feasible start offset of every slot's job, -1 when none fits or the slot is empty:
    LongTensor[B, M].

    On the CPU only the slots holding a job are searched: finding them is a host sync, free there,
    and often most slots are empty (clusters with long horizons see few arrivals a step). On an
    accelerator a sync would stall the queue, so every slot is searched.
    """
    duration, demand = state.slot_duration, state.slot_demand
    if duration.device.type != "cpu":
        return earliest_offsets(fitting_rows(state.used_bits, demand, cfg), duration, cfg)
    row, slot = (duration > 0).nonzero(as_tuple=True)
    fits = fitting_rows(state.used_bits, demand[row, :, slot].unsqueeze(-1), cfg, episode=row)  # [N, 1, W]
    offset = torch.full_like(state.slot_offset, -1)
    offset[row, slot] = earliest_offsets(fits, duration[row, slot].unsqueeze(1), cfg).squeeze(1)
    return offset


def empty_cluster(batch: int, cfg: ClusterConfig, device) -> torch.Tensor:
    """used_bits of B idle clusters: [B, R, P, W] words (level 0 set in unary, all clear in binary)."""
    bits = torch.zeros(batch, cfg.num_resources, num_planes(cfg), num_words(cfg), dtype=word_dtype(cfg), device=device)
    if unary(cfg):
        bits[:, :, 0] = horizon_words(cfg, device)
    return bits


def occupied_cluster(jobs: JobSet, cfg: ClusterConfig) -> torch.Tensor:
    """used_bits at time 0: empty, then each job already running (jobs.running_left, running_demand)
    placed over rows 0 .. left-1. [B, R, P, W]; exactly empty_cluster without running jobs."""
    bits = empty_cluster(jobs.batch_size, cfg, jobs.device)
    if jobs.running_left is None:
        return bits
    zero = torch.zeros(jobs.batch_size, dtype=bits.dtype, device=bits.device)
    for k in range(jobs.running_left.shape[1]):  # K columns, once per reset
        rows = row_words(zero, jobs.running_left[:, k].to(bits.dtype), bits.shape[-1])
        bits = add_demand(bits, rows, jobs.running_demand[:, k], cfg)
    return bits


# ----- rows as bits ----------------------------------------------------------------------------
# Rows are bits 0..n-1 of int32 (n = 31) or int64 (n = 63) words: the sign bit stays clear, so a
# right shift is a logical one, and a left shift is masked back to n bits.
def _word_bits(words: torch.Tensor) -> int:
    return WORD_BITS[words.dtype]


@functools.lru_cache(maxsize=64)
def horizon_words(cfg: ClusterConfig, device) -> torch.Tensor:
    """Rows 0..T-1 set: [W] words (one tensor per cluster and device: a constant of every step)."""
    zero = torch.zeros((), dtype=word_dtype(cfg), device=device)
    return row_words(zero, zero + cfg.horizon, num_words(cfg))


def row_words(first: torch.Tensor, count: torch.Tensor, words: int) -> torch.Tensor:
    """Words with the bits of rows first .. first+count-1 set: [..., words] of first's dtype."""
    if words == 1:  # count <= n here, and 1 << n wraps to the sign bit, so the - 1 gives n ones
        return (((torch.ones_like(first) << count) - 1) << first).unsqueeze(-1)
    n = _word_bits(first)
    base = torch.arange(words, device=first.device, dtype=first.dtype) * n
    low = (first.unsqueeze(-1) - base).clamp(0, n)
    high = ((first + count).unsqueeze(-1) - base).clamp(0, n)
    one = torch.ones_like(low)
    return ((one << high) - 1) ^ ((one << low) - 1)


def shift_rows(words: torch.Tensor, n: int) -> torch.Tensor:
    """Row k + n moved to row k (rows shifted in past the end are empty), over the last dim."""
    count, size = words.shape[-1], _word_bits(words)
    skip, bits = divmod(n, size)
    if skip >= count:
        return torch.zeros_like(words)
    if count == 1:
        return words >> bits
    here = words if skip == 0 else torch.nn.functional.pad(words[..., skip:], (0, skip))
    after = torch.nn.functional.pad(words[..., skip + 1 :], (0, skip + 1))
    return (here >> bits) | ((after << (size - bits)) & ((1 << size) - 1))


def shift_rows_by(words: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """shift_rows with a shift per element: n [...] (0 <= n < horizon, broadcast to words[..., 0])."""
    count, size = words.shape[-1], _word_bits(words)
    n = n.to(words.dtype).unsqueeze(-1)
    if count == 1:
        return words >> n
    skip, bits = n // size, n % size
    padded = torch.nn.functional.pad(words, (0, count + 1))  # rows past the end read as empty
    at = (torch.arange(count, device=words.device) + skip.long()).expand(words.shape)
    here, after = padded.gather(-1, at), padded.gather(-1, at + 1)
    return (here >> bits) | ((after << (size - bits)) & ((1 << size) - 1))


def lowest_bit(word: torch.Tensor) -> torch.Tensor:
    """Index of the lowest set bit, -1 for 0: LongTensor of word's shape."""
    lowest = (word & -word).to(torch.float64 if word.dtype == torch.int64 else torch.float32)
    return torch.frexp(lowest).exponent.long() - 1  # a power of two converts to float exactly


def lowest_row(words: torch.Tensor) -> torch.Tensor:
    """The lowest set row of words [..., W], -1 when none: LongTensor[...]."""
    if words.shape[-1] == 1:
        return lowest_bit(words[..., 0])
    first = (words != 0).to(torch.uint8).argmax(-1, keepdim=True)  # first word with a set bit
    bit = lowest_bit(words.gather(-1, first)).squeeze(-1)
    return torch.where(bit >= 0, first.squeeze(-1) * _word_bits(words) + bit, -1)


# ----- where slot jobs fit ---------------------------------------------------------------------
def fitting_rows(used_bits: torch.Tensor, demand: torch.Tensor, cfg: ClusterConfig,
                 episode: torch.Tensor | None = None) -> torch.Tensor:
    """Per slot, the rows where its job fits on every resource (used[k][r] + q_r <= U), as words
    [B, M, W]; rows past the horizon are clear.

    used_bits: [B, R, S, W]; demand: [B, R, M]. With `episode` (LongTensor[N]), the slots are N jobs
    of demand [N, R, 1], job i in episode episode[i], and the result is [N, 1, W].
    """
    words = used_bits.shape[-1]
    limit = cfg.resource_units - demand.long()  # the most a row may already use, [B or N, R, M]
    if unary(cfg):  # too full where used >= limit + 1
        if episode is None:
            too_full = used_bits.gather(2, (limit + 1).unsqueeze(-1).expand(-1, -1, -1, words))
        else:  # read the one level each job needs, not every level of its episode
            resource = torch.arange(used_bits.shape[1], device=used_bits.device)
            too_full = used_bits[episode.unsqueeze(1), resource, limit[..., 0] + 1].unsqueeze(2)
        fits = ~too_full
    else:
        fits = at_most(used_bits if episode is None else used_bits[episode], limit.to(used_bits.dtype))
    rows = fits[:, 0]
    for r in range(1, fits.shape[1]):
        rows = rows & fits[:, r]
    return rows & horizon_words(cfg, rows.device)


def at_most(digits: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """Rows where the binary count is <= limit: digits [B, R, S, W], limit [B, R, M] -> [B, R, M, W]."""
    planes = digits.shape[2]
    digit = torch.arange(planes, device=limit.device, dtype=limit.dtype)
    limit_bits = -((limit.unsqueeze(-1) >> digit) & 1)  # all ones / zeros
    # from the top digit: `below` once the first digit where they differ is 0 in the count and 1 in
    # the limit; `equal` while no digit has differed yet
    below = equal = None
    for s in reversed(range(planes)):
        plane, bit = digits[:, :, s].unsqueeze(2), limit_bits[..., s, None]  # [B, R, 1, W], [B, R, M, 1]
        differ = plane ^ bit
        if equal is None:
            below, equal = differ & bit, ~differ
        else:
            differ = differ & equal
            below = below | (differ & bit)
            equal = equal ^ differ
    return below | equal


def add_demand(used_bits: torch.Tensor, rows: torch.Tensor, demand: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """used[k][r] + q_r on the rows set in `rows`: used_bits [B, R, P, W], rows [B, W], demand [B, R]."""
    rows = rows[:, None, None, :]
    planes, words = used_bits.shape[2], used_bits.shape[3]
    if unary(cfg):
        # level u inside the job's rows was level u - q before; levels are nested (used >= u implies
        # used >= u - q), so OR-ing level u - q in suffices
        source = level_below(cfg, rows.device).index_select(0, demand.long().flatten()).view(*demand.shape, planes)
        return used_bits | (used_bits.gather(2, source.unsqueeze(-1).expand(-1, -1, -1, words)) & rows)
    digit = torch.arange(planes, device=rows.device, dtype=rows.dtype)
    added = rows & -((demand.to(rows.dtype).unsqueeze(-1) >> digit) & 1).unsqueeze(-1)
    carry, digits = None, []
    for s in range(planes):  # ripple carry
        digit, add = used_bits[:, :, s], added[:, :, s]
        odd = digit ^ add
        digits.append(odd if carry is None else odd ^ carry)
        carry = digit & add if carry is None else (digit & add) | (carry & odd)
    return torch.stack(digits, 2)  # no carry leaves the top digit: used never exceeds U


@functools.lru_cache(maxsize=64)
def level_below(cfg: ClusterConfig, device) -> torch.Tensor:
    """source[q, u] = max(u - q, 0), the level that level u comes from when q units are added:
    LongTensor[max_job_units + 1, U + 2] (cached: a lookup is one op where computing it is three)."""
    level = torch.arange(num_planes(cfg), device=device)
    return (level - torch.arange(cfg.max_job_units + 1, device=device).unsqueeze(1)).clamp(min=0)


@functools.lru_cache(maxsize=64)
def largest_power_of_two(cfg: ClusterConfig, device) -> torch.Tensor:
    """p[d] = the largest power of two <= d, p[0] = 0: LongTensor[max_job_len + 1] (cached)."""
    d = torch.arange(cfg.max_job_len + 1, device=device)
    return torch.where(d > 0, 1 << (torch.frexp(d.double()).exponent.long() - 1), 0)


def earliest_offsets(fits: torch.Tensor, duration: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """Earliest offset k <= T - d at which rows k .. k+d-1 all fit, -1 when none or d = 0:
    LongTensor[B, M]. fits: [B, M, W] (fitting_rows); duration: [B, M].

    A run of d rows is two overlapping runs of p rows, p the largest power of two <= d: at k and at
    k + d - p. Runs of length 1, 2, 4, ... come from AND-ing a run with itself shifted.
    """
    d = duration.long()
    power = largest_power_of_two(cfg, d.device)[d]
    run, length = fits, 1  # bit k of run: rows k .. k+length-1 all fit
    chosen = torch.zeros_like(fits)
    while length <= cfg.max_job_len:
        chosen = torch.where((power == length).unsqueeze(-1), run, chosen)
        if 2 * length <= cfg.max_job_len:
            run = run & shift_rows(run, length)
        length *= 2
    # rows past the horizon are clear, so windows that would run past T never qualify
    return lowest_row(chosen & shift_rows_by(chosen, d - power))


def step_state(state: ClusterState, action: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """Apply one decision per row in place; return the reward, FloatTensor[B].

    action: LongTensor[B], 0..M-1 schedules that slot, M (or anything invalid) advances time.
    On the CPU one native call does it where the kernel applies (native.py), else the torch ops of
    `step_state_torch`, with the same results.
    """
    reward = native.step(state, action, cfg)
    return step_state_torch(state, action, cfg) if reward is None else reward


def step_state_torch(state: ClusterState, action: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """step_state as tensor operations (any device, any layout): the definition native_step.c matches.
    It assigns new tensors to the fields it changes, except start, job_start, pending_due,
    finish_count and finish_weight, changed in place (observations alias the others)."""
    length, m_slots = state.max_jobs, cfg.num_slots
    action = action.reshape(-1).long()
    active = ~state.done
    slot = action.clamp(0, m_slots - 1).unsqueeze(1)
    offset = state.slot_offset.gather(1, slot).squeeze(1)
    schedule = active & (action >= 0) & (action < m_slots) & (offset >= 0)
    advance = active & ~schedule

    # --- schedule the slot's job at its earliest offset; time stays frozen ---
    job = torch.where(schedule, state.slot_job.gather(1, slot).squeeze(1), length)
    duration = state.slot_duration.gather(1, slot).squeeze(1) * schedule
    demand = state.slot_demand.gather(2, slot.unsqueeze(1).expand(-1, cfg.num_resources, 1)).squeeze(2)
    demand = demand * schedule.unsqueeze(1)  # [B, R], 0 when not scheduling
    offset = offset.clamp(min=0)
    start = state.time + offset
    started = torch.where(schedule, start, -1).unsqueeze(1)
    state.start.scatter_(1, job.unsqueeze(1), started)
    state.job_start.scatter_(1, state.order.gather(1, job.unsqueeze(1)), started)
    if cfg.objective == "deadline":  # a job that will finish by its deadline no longer counts as pending
        deadline = state.deadline.gather(1, job.unsqueeze(1)).squeeze(1)
        meets = schedule & (start + duration <= deadline)
        column = deadline.clamp(0, cfg.max_time + 1).unsqueeze(1)
        state.pending_due.scatter_add_(1, column, -meets.long().unsqueeze(1))
    words = state.used_bits
    rows = row_words(offset.to(words.dtype), duration.to(words.dtype), words.shape[-1])  # [B, W], 0 if not scheduling
    state.used_bits = add_demand(state.used_bits, rows, demand, cfg)
    finish_at = ((start + duration) % (cfg.horizon + 1)).unsqueeze(1)
    state.finish_count.scatter_add_(1, finish_at, schedule.long().unsqueeze(1))
    weight = torch.where(schedule, 1.0 / duration.clamp(min=1).double(), 0.0)
    state.finish_weight.scatter_add_(1, finish_at, weight.unsqueeze(1))
    m = torch.arange(m_slots, device=action.device)
    close_gap = (m >= slot) & schedule.unsqueeze(1)  # slots behind the taken one move up
    padded = torch.cat([state.slot_job, state.slot_job.new_full((len(action), 1), length)], dim=1)
    state.slot_job = padded.gather(1, m + close_gap)

    # --- advance time by one step: pay the interval's reward, shift the horizon ---
    reward = torch.where(advance, interval_reward(state, cfg), 0.0)
    state.util_sum = state.util_sum + torch.where(advance, utilization_now(state, cfg), 0.0)
    state.time = state.time + advance.long()
    state.used_bits = torch.where(advance.view(-1, 1, 1, 1), shift_rows(state.used_bits, 1), state.used_bits)
    if unary(cfg):  # level 0 (used >= 0) holds in every row, the empty one entering too
        state.used_bits[:, :, 0] = horizon_words(cfg, state.used_bits.device)
    ring = (state.time % (cfg.horizon + 1)).unsqueeze(1)
    now_finished = state.finish_count.gather(1, ring).squeeze(1) * advance
    now_weight = state.finish_weight.gather(1, ring).squeeze(1) * advance
    state.finished_count = state.finished_count + now_finished
    state.finished_weight = state.finished_weight + now_weight
    state.finish_count.scatter_add_(1, ring, -now_finished.unsqueeze(1))  # empty the slot just read
    state.finish_weight.scatter_add_(1, ring, -now_weight.unsqueeze(1))
    state.num_arrived = _count_arrived(state, state.time)
    terminated = advance & (state.finished_count == state.num_jobs)
    state.truncated = state.truncated | (advance & ~terminated & (state.time >= cfg.max_time))
    state.terminated = state.terminated | terminated

    _update_slots(state, cfg)
    return reward.float()


def compiled_step(state: ClusterState, cfg: ClusterConfig):
    """step_state_torch compiled by torch.compile (inductor) where that works here, else step_state
    itself (the native step where it applies), with a warning: a function with step_state's signature.

    Compiling takes tens of seconds, on a trial step of a copy of `state` (so a compiler that fails
    leaves nothing half-applied); the slot search varies in size, so its second size compiles once
    more, for any size. Vectorized code is off (`cpp.simdlen` 1): inductor's vectorized int32 to
    int64 conversions do not build with torch 2.13's C++ headers. Optional: nothing else needs a compiler.
    """
    compiled = torch.compile(step_state_torch, options={"cpp.simdlen": 1})
    trial = state.rows(torch.arange(state.time.shape[0], device=state.time.device))  # a copy
    try:
        compiled(trial, torch.full_like(state.time, cfg.num_slots), cfg)
    except Exception as error:  # noqa: BLE001 - any compiler failure means running eagerly
        warnings.warn(f"torch.compile of step_state failed ({type(error).__name__}); stepping eagerly",
                      stacklevel=2)
        return step_state
    return compiled
