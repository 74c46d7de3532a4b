"""The queue step in torch ops (the semantics: docs/hpc_queue.md): the GPU path, the CPU fallback
where the native kernel (native_queue.c) cannot be built, and the second implementation of the
semantics that the kernel is tested against.

Every operation works on all rows at once, masked to the rows it concerns. Where nothing else can
start, the events between two decisions are settled in closed form: without backfilling a held job
starts at the first completion (in end order) that frees enough nodes, and every job submitted by
then has arrived; an empty queue (either setting) takes the completions before the next submit, then
that arrival. With EASY backfilling each event while a job is held can start others, so a Python
loop runs over those events (an arrival or one completion per iteration, for every row still
waiting on one) and over the jobs a backfilling pass starts, with one host sync per iteration; it
works on a copy of the rows still waiting, shrunk as they settle.

As the kernel does: of running jobs that end in the same second, the one started first (lowest
start_rank) ends first; and a step's bounded slowdowns are summed in start order, then added to
bsld_sum at once.
"""
from __future__ import annotations

from typing import Callable

import torch

from .config import QueueConfig
from .state import ENDED, NEVER, RUNNING, WAITING, QueueState, places


def _pick(column: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """values[b, column[b]] for every row: values [B, L], column LongTensor[B] -> [B]."""
    return values.gather(1, column[:, None]).squeeze(1)


def _next_release(state: QueueState) -> tuple[torch.Tensor, torch.Tensor]:
    """(min_end, job), LongTensor[B] each: the earliest actual end of a running job (NEVER when none
    runs) and the job that is released then (ties: the one started first)."""
    running = state.status == RUNNING
    end = torch.where(running, state.start + state.run, NEVER)
    min_end = end.min(dim=1).values
    tied = running & (end == min_end[:, None])
    return min_end, torch.where(tied, state.start_rank, NEVER).argmin(dim=1)


def _event(state: QueueState, rows: torch.Tensor) -> torch.Tensor:
    """ADVANCE on `rows` (BoolTensor[B]): the next arrival if it comes at or before the next completion
    (arrivals win ties), else one completion. Returns BoolTensor[B]: the rows where a job arrived."""
    length = state.length
    min_end, ending = _next_release(state)
    upcoming = state.next_arrival.clamp(max=length - 1)
    next_submit = _pick(upcoming, state.submit)
    arrive = rows & (state.next_arrival < length) & (next_submit <= min_end)
    release = rows & ~arrive & (min_end < NEVER)
    column = torch.where(arrive, upcoming, ending)
    old = _pick(column, state.status)
    new = torch.where(arrive, WAITING, torch.where(release, ENDED, old.long())).to(state.status.dtype)
    state.status.scatter_(1, column[:, None], new[:, None])
    event_time = torch.where(arrive, next_submit, torch.where(release, min_end, state.time))
    state.time.copy_(torch.maximum(state.time, event_time))
    state.next_arrival += arrive
    state.free_nodes += torch.where(release, _pick(ending, state.nodes), 0)
    return arrive


def _hold_until_fits(state: QueueState, rows: torch.Tensor, need: torch.Tensor) -> None:
    """The events of `rows` (BoolTensor[B]) while each holds a job needing need[b] nodes (LongTensor[B],
    more than are free) without backfilling, in closed form, mutating `state`: completions in release
    order (actual end, ties: started first) until enough nodes are free, at time T, and every arrival
    submitted at or before T (arrivals win ties; submit times rise along a row, so these are the next
    jobs). Raises RuntimeError if the running jobs could never free enough nodes (an inconsistent state)."""
    index = rows.nonzero()[:, 0]
    if index.numel() == 0:
        return
    status, start_rank, nodes = state.status[index], state.start_rank[index], state.nodes[index]
    need, next_arrival = need[index, None], state.next_arrival[index, None]  # [N, 1] each
    running = status == RUNNING
    # release order: a stable sort by end of the jobs already in start_rank order keeps that order in ties
    by_rank = torch.where(running, start_rank, NEVER).argsort(dim=1, stable=True)
    end = torch.where(running, state.start[index] + state.run[index], NEVER).gather(1, by_rank)
    by_end = end.argsort(dim=1, stable=True)
    order, end = by_rank.gather(1, by_end), end.gather(1, by_end)  # [N, L]: jobs in release order, their ends
    # free nodes after each release, never decreasing (jobs not running come last and free none), as
    # searchsorted needs
    freed = (nodes * running).gather(1, order).cumsum(dim=1) + state.free_nodes[index, None]
    if bool((freed[:, -1:] < need).any()):
        raise RuntimeError("step_torch: a held job needs more nodes than its row's running jobs can free; "
                           "the state is inconsistent")
    last = torch.searchsorted(freed, need)  # [N, 1]: the release after which it fits
    fits_at = end.gather(1, last)  # [N, 1]
    released = torch.arange(state.length, device=index.device) <= last  # [N, L] in release order
    status.masked_fill_(torch.zeros_like(released).scatter_(1, order, released) & running, ENDED)  # in job order
    arrived = torch.searchsorted(state.submit[index], fits_at, right=True)  # [N, 1]: jobs submitted by T
    arrived = torch.maximum(arrived, next_arrival)  # a guard: arrived jobs stay arrived
    job = torch.arange(state.length, device=index.device)
    status.masked_fill_((job >= next_arrival) & (job < arrived), WAITING)
    state.status[index] = status
    state.free_nodes[index] = freed.gather(1, last).squeeze(1)
    state.time[index] = torch.maximum(state.time[index], fits_at.squeeze(1))
    state.next_arrival[index] = arrived.squeeze(1)


def _refill(state: QueueState, rows: torch.Tensor) -> None:
    """An empty queue on `rows` (BoolTensor[B], each with a job still to arrive): the completions
    that come strictly before the next submit, then that one arrival (arrivals win ties)."""
    upcoming = state.next_arrival.clamp(max=state.length - 1)
    next_submit = _pick(upcoming, state.submit)
    running = state.status == RUNNING
    ends = rows[:, None] & running & (state.start + state.run < next_submit[:, None])
    state.status.masked_fill_(ends, ENDED)
    state.free_nodes += (state.nodes * ends).sum(dim=1)
    state.status.scatter_(1, upcoming[:, None], torch.where(rows, WAITING, _pick(upcoming, state.status).long())
                          .to(state.status.dtype)[:, None])
    state.time.copy_(torch.where(rows, torch.maximum(state.time, next_submit), state.time))
    state.next_arrival += rows


def bounded_slowdown(wait_and_run: torch.Tensor, run: torch.Tensor, threshold: float) -> torch.Tensor:
    """max(1, (wait + run) / max(run, threshold)), elementwise (DoubleTensors of one shape): the
    threshold keeps jobs of a few seconds from dominating the mean."""
    return (wait_and_run / run.clamp(min=float(threshold))).clamp(min=1.0)


def _start(state: QueueState, rows: torch.Tensor, job: torch.Tensor, added: torch.Tensor,
           cfg: QueueConfig) -> None:
    """START job[b] now on `rows` (BoolTensor[B]); its bounded slowdown is added to `added`."""
    submit, run = _pick(job, state.submit), _pick(job, state.run)
    wait_and_run = (state.time - submit + run).double()
    bsld = bounded_slowdown(wait_and_run, run.double(), cfg.bsld_threshold)
    added += torch.where(rows, bsld, 0.0)  # x + 0.0 == x: other rows keep their sums bit for bit
    started = (state.status >= RUNNING).sum(dim=1)  # RUNNING or ENDED: jobs started before this one
    column = job[:, None]
    for field, value in ((state.status, RUNNING), (state.start, state.time), (state.start_rank, started)):
        field.scatter_(1, column, torch.where(rows, value, _pick(job, field).long()).to(field.dtype)[:, None])
    state.free_nodes -= torch.where(rows, _pick(job, state.nodes), 0)


def requested_fit_time(state: QueueState, need: torch.Tensor) -> torch.Tensor:
    """When `need` nodes (LongTensor[B, K]) would be free if nothing else started, as a scheduler knows
    it, LongTensor[B, K]: the estimated end (start + requested) of the running job at which, counting
    running jobs in order of estimated end, that many nodes are free (EASY's shadow time of a job of
    that size; native_queue.c's requested_ends). Only for needs the cluster can hold."""
    running = state.status == RUNNING
    estimated_end, order = torch.where(running, state.start + state.requested, NEVER).sort(dim=1)
    freed = torch.where(running, state.nodes, 0).gather(1, order).cumsum(dim=1) + state.free_nodes[:, None]
    first = torch.searchsorted(freed, need).clamp(max=state.length - 1)  # freed rises along a row
    return estimated_end.gather(1, first)


def _shadow(state: QueueState, need: torch.Tensor) -> torch.Tensor:
    """EASY's shadow time of jobs needing `need` nodes (LongTensor[B]), LongTensor[B]."""
    return requested_fit_time(state, need[:, None])[:, 0]


def _backfill_pass(state: QueueState, rows: torch.Tensor, shadow: torch.Tensor, added: torch.Tensor,
                   cfg: QueueConfig) -> None:
    """One EASY pass on `rows`: waiting jobs in index order, each that fits now and ends (by its
    request) strictly before `shadow` starts. Free nodes only shrink during a pass, so a job that does
    not fit now never will in it: starting, each round, the first candidate that fits is the same
    pass in as many rounds as jobs it starts."""
    ends_in_time = state.time[:, None] + state.requested < shadow[:, None]
    candidate = rows[:, None] & (state.status == WAITING) & ends_in_time
    while True:
        candidate &= state.nodes <= state.free_nodes[:, None]
        starting = candidate.any(dim=1)
        if not starting.any():
            return
        job = candidate.to(torch.uint8).argmax(dim=1)
        _start(state, starting, job, added, cfg)
        candidate.scatter_(1, job[:, None], False)


def _until_settled(state: QueueState, pending: torch.Tensor, body: Callable, per_row: dict[str, torch.Tensor],
                   prepare: Callable) -> None:
    """Run `body(rows, per_row, still) -> still` on the `pending` rows (BoolTensor[B]) until no row is
    still pending. A few rows need many events while most need none, so the loop works on a copy of
    the pending rows, shrunk when half of them have settled, and writes them back. `per_row` holds
    [B, ...] tensors the body reads or writes (written back too); `prepare(rows, per_row)` fills
    entries computed once on the copy."""
    index = pending.nonzero()[:, 0]
    if index.numel() == 0:
        return
    rows, extra = state.rows(index), {k: v[index] for k, v in per_row.items()}
    prepare(rows, extra)
    still = torch.ones_like(index, dtype=torch.bool)

    def settle(which: torch.Tensor) -> None:
        state.put_rows(index[which], rows.rows(which))
        for k, v in per_row.items():
            v[index[which]] = extra[k][which]

    for _ in range(2 * state.length + 1):  # each event ends or brings one of the L jobs
        still = body(rows, extra, still)
        left = int(still.sum())
        if left == 0:
            return settle(torch.arange(index.numel(), device=index.device))
        if 2 * left <= index.numel():
            settle((~still).nonzero()[:, 0])
            keep = still.nonzero()[:, 0]
            rows, index, extra = rows.rows(keep), index[keep], {k: v[keep] for k, v in extra.items()}
            still = torch.ones_like(index, dtype=torch.bool)
    raise RuntimeError("step_torch: events never settled a row; the state is inconsistent")


def step_torch(state: QueueState, job: torch.Tensor, cfg: QueueConfig) -> torch.Tensor:
    """One decision per row: start `job` (LongTensor[B], index of a WAITING job of the row), holding
    it until it fits (with EASY backfilling around it when cfg.backfill == 'easy'), then refill an
    empty queue. Rows already done, and rows whose `job` is -1 (no decision), are left unchanged.
    Mutates `state` in place; returns DoubleTensor[B]: the bounded slowdowns this step added to
    state.bsld_sum (backfilled jobs included), 0 on rows left unchanged.
    Raises ValueError naming the first row whose pick is not a waiting job.
    """
    length = state.length
    job = job.reshape(-1).to(state.submit.device, torch.int64)
    active = ~state.done & (job >= 0)
    picked, job = job, torch.where(active, job, 0).clamp(max=length - 1)
    bad = active & ((picked >= length) | (_pick(job, state.status) != WAITING))
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"step_torch: row {row} picked job {int(picked[row])}, which is not waiting")
    added = torch.zeros(state.batch, dtype=torch.float64, device=state.submit.device)
    need = _pick(job, state.nodes)
    easy = cfg.backfill == "easy"

    def shadow_once(rows: QueueState, extra: dict) -> None:
        extra["shadow"] = _shadow(rows, extra["need"])

    def hold_and_backfill(rows: QueueState, extra: dict, still: torch.Tensor) -> torch.Tensor:
        _backfill_pass(rows, still, extra["shadow"], extra["added"], cfg)
        _event(rows, still)
        return still & (extra["need"] > rows.free_nodes)

    held = active & (need > state.free_nodes)
    if easy:
        _until_settled(state, held, hold_and_backfill, {"need": need, "added": added}, shadow_once)
    else:
        _hold_until_fits(state, held, need)
    _start(state, active, job, added, cfg)
    state.bsld_sum += added
    # an empty queue takes events up to the next arrival; with every job arrived, the row is done
    idle = active & ~(state.status == WAITING).any(dim=1)
    finished = idle & (state.next_arrival >= length)
    state.done |= finished
    _refill(state, idle & ~finished)
    return added


def window_torch(state: QueueState, cfg: QueueConfig) -> torch.Tensor:
    """The visible window, LongTensor[B, W] (W = cfg.window): indices of waiting jobs, -1 in empty
    slots. Up to W waiting: all of them in index (FCFS) order. More: RLScheduler's alternation
    sjf[0], small[0], sjf[1], small[1], ... without duplicates, where sjf is ordered by (requested,
    submit, index) and small by (processors, submit, index): a job's first place in that sequence is
    min(2 * sjf rank, 2 * small rank + 1), and the W smallest such keys are the window."""
    width, length = cfg.window, state.length
    waiting = state.status == WAITING
    index = torch.arange(length, device=waiting.device).expand_as(state.submit)
    place = waiting.long().cumsum(dim=1) - 1
    shown = waiting & (place < width)
    window = torch.full((state.batch, width + 1), -1, dtype=torch.int64, device=waiting.device)
    window.scatter_(1, torch.where(shown, place, width), torch.where(shown, index, -1))  # column W: discarded
    window = window[:, :width]
    crowded = waiting.sum(dim=1) > width
    if not crowded.any():
        return window

    def rank(key: torch.Tensor) -> torch.Tensor:
        """Each job's place in the order (key, submit, index) among waiting jobs: a stable sort by key
        of the index order, which is (submit, index) order (init_state refuses decreasing submits)."""
        order = torch.where(waiting, key, NEVER).sort(dim=1, stable=True).indices
        return places(order, index)

    key = torch.minimum(2 * rank(state.requested), 2 * rank(state.processors) + 1)
    alternation = torch.where(waiting, key, NEVER).topk(width, dim=1, largest=False, sorted=True).indices
    return torch.where(crowded[:, None], alternation, window)
