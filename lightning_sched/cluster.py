"""The batched cluster state machine behind `ClusterEnv` (SPEC "State and decisions").

Everything is a tensor with a leading batch dimension B; a step is a fixed sequence of tensor
operations with no Python loop over rows or jobs and no host synchronisation, so the same code
runs on a GPU. Two ideas keep a step cheap:

* Occupancy as bit planes. `occ[b, r, u]` is an int64 whose bit k says "used[k][r] >= u" for
  levels u = 0..U+1 (level 0 is all ones, level U+1 always zero). A job of demand q fits row k of
  resource r iff bit k of level U+1-q is clear, so the rows where a slot job fits are a few
  gathers and ANDs, a run of d fitting rows is found by shifting (log2 d steps), and the earliest
  offset is the lowest set bit. Placing a job moves levels up by q inside the job's rows; a time
  advance is a right shift.
* Jobs sorted by (arrival, position) once at reset. Waiting jobs are then a queue: the M slots hold
  the first M of them, the backlog is the contiguous range [queue_head, num_arrived) behind them,
  and arrivals are a searchsorted on the sorted arrival times.
"""
from __future__ import annotations

import torch

from .config import ClusterConfig
from .jobs import JobSet
from .objectives import interval_reward
from .state import NEVER, ClusterState, lowest_bit, utilization_now


def full_rows(cfg: ClusterConfig) -> int:
    """The bit word with one bit per time row of the horizon."""
    return (1 << cfg.horizon) - 1


def bits_dtype(cfg: ClusterConfig) -> torch.dtype:
    """int32 words while the horizon fits in 31 bits (half the memory traffic), else int64."""
    return torch.int32 if cfg.horizon <= 30 else torch.int64


def init_state(jobs: JobSet, cfg: ClusterConfig) -> ClusterState:
    """State at time 0 for B jobsets (validated by the caller)."""
    device = jobs.device
    b, length = jobs.arrival.shape
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
    words = bits_dtype(cfg)
    occ = torch.zeros(b, cfg.num_resources, cfg.resource_units + 2, dtype=words, device=device)
    occ[:, :, 0] = full_rows(cfg)
    m = cfg.num_slots
    state = ClusterState(
        order=order,
        arrival=arrival.contiguous(),
        duration=duration,
        demand=demand,
        deadline=deadline,
        start=torch.full((b, length + 1), -1, dtype=torch.long, device=device),
        arrived_weight=arrived_weight,
        num_jobs=real.sum(1),
        time=zeros.clone(),
        num_arrived=zeros.clone(),
        queue_head=zeros.clone(),
        slot_job=torch.full((b, m), length, dtype=torch.long, device=device),
        slot_duration=torch.zeros(b, m, dtype=torch.int32, device=device),
        slot_demand=torch.zeros(b, cfg.num_resources, m, dtype=torch.int32, device=device),
        slot_window=torch.zeros(b, m, dtype=words, device=device),
        used_now=torch.zeros(b, cfg.num_resources, dtype=torch.long, device=device),
        occ=occ,
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
    attributes, their feasible start offsets, used[0]."""
    length = state.max_jobs
    m = torch.arange(state.slot_job.shape[1], device=state.slot_job.device)
    filled = (state.slot_job < length).sum(1, keepdim=True)
    candidate = state.queue_head.unsqueeze(1) + (m - filled)
    take = (m >= filled) & (candidate < state.num_arrived.unsqueeze(1))
    state.slot_job = torch.where(m < filled, state.slot_job, torch.where(take, candidate, length))
    state.queue_head = state.queue_head + take.sum(1)
    state.slot_duration = state.duration.gather(1, state.slot_job)
    state.slot_demand = torch.stack([state.demand[:, r].gather(1, state.slot_job) for r in range(cfg.num_resources)], 1)
    state.slot_window = feasible_windows(state, cfg)
    # bit 0 of each level says used[0][r] >= u; level 0 is always set, level U+1 never
    state.used_now = (state.occ & 1).sum(-1) - 1


def feasible_windows(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """For every slot, a word whose bit k is set when its job fits at offset k for all d rows
    (k <= T - d); 0 for empty slots. Int/LongTensor[B, M]. Bit arithmetic on the occupancy planes
    (module docstring)."""
    duration, demand = state.slot_duration, state.slot_demand
    full = full_rows(cfg)
    fits = torch.full_like(state.slot_window, full)  # bit k: the job fits row k on every resource
    for r in range(cfg.num_resources):
        level = (cfg.resource_units + 1 - demand[:, r]).long()  # rows with used >= level are too full
        fits = fits & ~state.occ[:, r].gather(1, level)
    # window bit k: rows k..k+d-1 all fit. AND runs of length 1, 2, 4, ... per set bit of d.
    window = fits.masked_fill(duration == 0, 0)
    shift = torch.zeros_like(fits)
    bits = torch.iinfo(fits.dtype).bits
    run, length = fits, 1
    while length <= cfg.max_job_len:
        part = (duration & length).to(fits.dtype)
        unused = (part - 1) >> (bits - 1)  # all ones when d lacks this bit (arithmetic shift of -1), else 0
        window = window & ((run >> shift) | unused)
        shift = shift + part
        run = run & (run >> length)
        length *= 2
    # bits beyond the horizon are zero, so windows that would run past T never qualify
    return window


def step_state(state: ClusterState, action: torch.Tensor, cfg: ClusterConfig) -> torch.Tensor:
    """Apply one decision per row in place; return the reward, FloatTensor[B].

    action: LongTensor[B], 0..M-1 schedules that slot, M (or anything invalid) advances time.
    """
    length, m_slots = state.max_jobs, cfg.num_slots
    action = action.reshape(-1).long()
    active = ~state.done
    slot = action.clamp(0, m_slots - 1).unsqueeze(1)
    window = state.slot_window.gather(1, slot).squeeze(1)
    schedule = active & (action >= 0) & (action < m_slots) & (window != 0)
    advance = active & ~schedule

    # --- schedule the slot's job at its earliest offset; time stays frozen ---
    job = torch.where(schedule, state.slot_job.gather(1, slot).squeeze(1), length)
    duration = state.slot_duration.gather(1, slot).squeeze(1) * schedule
    demand = state.slot_demand.gather(2, slot.unsqueeze(1).expand(-1, cfg.num_resources, 1)) * schedule.view(-1, 1, 1)
    offset = lowest_bit(window).clamp(min=0)
    start = state.time + offset
    state.start.scatter_(1, job.unsqueeze(1), torch.where(schedule, start, -1).unsqueeze(1))
    if cfg.objective == "deadline":  # a job that will finish by its deadline no longer counts as pending
        deadline = state.deadline.gather(1, job.unsqueeze(1)).squeeze(1)
        meets = schedule & (start + duration <= deadline)
        column = deadline.clamp(0, cfg.max_time + 1).unsqueeze(1)
        state.pending_due.scatter_add_(1, column, -meets.long().unsqueeze(1))
    one = torch.ones_like(window)
    rows = (((one << duration.to(one.dtype)) - 1) << offset.to(one.dtype)).view(-1, 1, 1)  # 0 when not scheduling
    levels = torch.arange(cfg.resource_units + 2, device=action.device)
    source = (levels - demand).clamp(min=0)  # level u inside the job's rows was level u - q before
    # levels are nested (used >= u implies used >= u - q), so OR-ing level u - q in suffices
    state.occ = state.occ | (state.occ.gather(2, source) & rows)
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
    top = torch.zeros_like(state.occ[0, 0])
    top[0] = 1 << (cfg.horizon - 1)  # the empty row entering at the bottom: only level 0 is set
    moved = advance.view(-1, 1, 1).to(state.occ.dtype)
    state.occ = (state.occ >> moved) | (top * moved)
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
