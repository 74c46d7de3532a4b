"""The queue step in torch ops (/work/notes/queue_semantics.md, docs/hpc_queue.md): the GPU path and
the CPU fallback where the native kernel cannot be built, and the second implementation of the spec
the native kernel is tested against.

Every operation works on all B rows at once, masked to the rows it concerns; the only Python loops
run over events (an arrival or one completion per iteration, for every row still waiting on one) and
over the jobs a backfilling pass starts, so a step costs O(events x B x L) tensor work and one host
sync per loop iteration, whatever B is.

Ties between running jobs that end at the same second: the one that started first is released first,
then the lower index. RLScheduler's stable sorts of its running list release them in start order when
estimates are exact (its Lublin logs), which (start, index) reproduces unless two of them also started
at the same second out of index order.
"""
from __future__ import annotations

import torch

from ..config import ConfigError
from .config import QueueConfig
from .state import ENDED, FUTURE, RUNNING, WAITING, QueueState

NEVER = torch.iinfo(torch.int64).max  # "no such time": an empty cluster's next completion, a non-candidate's key


def init_state(submit: torch.Tensor, run: torch.Tensor, requested: torch.Tensor, processors: torch.Tensor,
               cfg: QueueConfig) -> QueueState:
    """B episodes at their start: job 0 waiting at its submit time on an empty cluster.

    submit, run, requested, processors: LongTensor[B, L] (L >= 1), jobs in arrival order.
    Refuses (ConfigError) a job wider than the cluster and submit times that decrease along a row.
    """
    submit, run, requested, processors = (torch.as_tensor(x, dtype=torch.int64)
                                          for x in (submit, run, requested, processors))
    if submit.dim() != 2 or submit.shape[1] < 1:
        raise ConfigError(f"init_state: submit must be [B, L] with L >= 1, got shape {tuple(submit.shape)}")
    for name, column in (("run", run), ("requested", requested), ("processors", processors)):
        if column.shape != submit.shape:
            raise ConfigError(f"init_state: {name} has shape {tuple(column.shape)}, submit {tuple(submit.shape)}")
    if (processors < 1).any():
        row, job = (processors < 1).nonzero()[0].tolist()
        raise ConfigError(f"init_state: processors of job {job} (row {row}) is {processors[row, job].item()}, "
                          f"must be >= 1")
    nodes = (processors + cfg.processors_per_node - 1) // cfg.processors_per_node
    if (nodes > cfg.nodes).any():
        row, job = (nodes > cfg.nodes).nonzero()[0].tolist()
        raise ConfigError(f"init_state: processors of job {job} (row {row}) is {processors[row, job].item()} "
                          f"({nodes[row, job].item()} nodes), more than QueueConfig.nodes={cfg.nodes}")
    backwards = submit[:, 1:] < submit[:, :-1]
    if backwards.any():
        row, job = backwards.nonzero()[0].tolist()
        raise ConfigError(f"init_state: submit of job {job + 1} (row {row}) is {submit[row, job + 1].item()}, "
                          f"before job {job}'s {submit[row, job].item()}; jobs must be in arrival order")
    batch, length = submit.shape
    device = submit.device
    status = torch.full((batch, length), FUTURE, dtype=torch.int8, device=device)
    status[:, 0] = WAITING
    return QueueState(
        submit=submit, run=run, requested=requested, processors=processors, nodes=nodes, status=status,
        start=torch.full((batch, length), -1, dtype=torch.int64, device=device),
        time=submit[:, 0].clone(),
        free_nodes=torch.full((batch,), cfg.nodes, dtype=torch.int64, device=device),
        next_arrival=torch.ones(batch, dtype=torch.int64, device=device),
        done=torch.zeros(batch, dtype=torch.bool, device=device),
        bsld_sum=torch.zeros(batch, dtype=torch.float64, device=device))


def _pick(state: QueueState, column: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """values[b, column[b]] for every row: values [B, L], column LongTensor[B] -> [B]."""
    return values.gather(1, column[:, None]).squeeze(1)


def _next_release(state: QueueState) -> tuple[torch.Tensor, torch.Tensor]:
    """(min_end, job), LongTensor[B] each: the earliest actual end of a running job (NEVER when none
    runs) and the job that is released then (ties: earliest start, then lowest index; module doc)."""
    running = state.status == RUNNING
    end = torch.where(running, state.start + state.run, NEVER)
    min_end = end.min(dim=1).values
    tied = running & (end == min_end[:, None])
    first_start = torch.where(tied, state.start, NEVER).min(dim=1).values
    tied &= state.start == first_start[:, None]
    return min_end, tied.to(torch.uint8).argmax(dim=1)  # argmax returns the first maximum: lowest index


def _event(state: QueueState, rows: torch.Tensor) -> torch.Tensor:
    """ADVANCE on `rows` (BoolTensor[B]): the next arrival if it comes at or before the next completion
    (arrivals win ties), else one completion. Returns BoolTensor[B]: the rows where a job arrived."""
    length = state.length
    min_end, ending = _next_release(state)
    upcoming = state.next_arrival.clamp(max=length - 1)
    next_submit = _pick(state, upcoming, state.submit)
    arrive = rows & (state.next_arrival < length) & (next_submit <= min_end)
    release = rows & ~arrive & (min_end < NEVER)
    column = torch.where(arrive, upcoming, ending)
    old = _pick(state, column, state.status)
    new = torch.where(arrive, WAITING, torch.where(release, ENDED, old.long())).to(state.status.dtype)
    state.status.scatter_(1, column[:, None], new[:, None])
    event_time = torch.where(arrive, next_submit, torch.where(release, min_end, state.time))
    state.time.copy_(torch.maximum(state.time, event_time))
    state.next_arrival += arrive
    state.free_nodes += torch.where(release, _pick(state, ending, state.nodes), 0)
    return arrive


def _start(state: QueueState, rows: torch.Tensor, job: torch.Tensor, added: torch.Tensor,
           cfg: QueueConfig) -> None:
    """START job[b] now on `rows` (BoolTensor[B]); its bounded slowdown goes to bsld_sum and `added`."""
    submit, run = _pick(state, job, state.submit), _pick(state, job, state.run)
    wait_and_run = (state.time - submit + run).double()
    bsld = (wait_and_run / run.double().clamp(min=float(cfg.bsld_threshold))).clamp(min=1.0)
    bsld = torch.where(rows, bsld, 0.0)  # x + 0.0 == x: untouched rows keep their sums bit for bit
    state.bsld_sum += bsld
    added += bsld
    column = job[:, None]
    status = torch.where(rows, RUNNING, _pick(state, job, state.status).long()).to(state.status.dtype)
    state.status.scatter_(1, column, status[:, None])
    state.start.scatter_(1, column, torch.where(rows, state.time, _pick(state, job, state.start))[:, None])
    state.free_nodes -= torch.where(rows, _pick(state, job, state.nodes), 0)


def _shadow(state: QueueState, need: torch.Tensor) -> torch.Tensor:
    """EASY's shadow time, LongTensor[B]: the estimated end (start + requested) of the running job at
    which, counting running jobs in order of estimated end, `need` (LongTensor[B]) nodes are free."""
    running = state.status == RUNNING
    estimated_end, order = torch.where(running, state.start + state.requested, NEVER).sort(dim=1)
    freed = torch.where(running, state.nodes, 0).gather(1, order).cumsum(dim=1) + state.free_nodes[:, None]
    enough = (freed >= need[:, None]).to(torch.uint8).argmax(dim=1)
    return _pick(state, enough, estimated_end)


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


def _move_forward(state: QueueState, rows: torch.Tensor) -> None:
    """After a start on `rows`: an empty queue is refilled by events up to the next arrival, or the
    row is done when every job has arrived."""
    idle = rows & ~(state.status == WAITING).any(dim=1)
    finished = idle & (state.next_arrival >= state.length)
    state.done |= finished
    pending = idle & ~finished
    for _ in range(2 * state.length + 1):  # each event ends or brings one of the L jobs
        if not pending.any():
            return
        pending &= ~_event(state, pending)
    raise RuntimeError("step_torch: the queue never refilled; the state is inconsistent")


def step_torch(state: QueueState, job: torch.Tensor, cfg: QueueConfig) -> torch.Tensor:
    """One decision per row: start `job` (LongTensor[B], index of a WAITING job of the row), holding
    it until it fits (with EASY backfilling around it when cfg.backfill == 'easy'), then refill an
    empty queue. Rows already done are left unchanged (their `job` is ignored). Mutates `state` in
    place; returns DoubleTensor[B]: the bounded slowdowns this step added to state.bsld_sum (backfilled
    jobs included), 0 on done rows.
    Raises ValueError naming the first row whose pick is not a waiting job.
    """
    length = state.length
    active = ~state.done
    job = torch.where(active, job.to(state.submit.device, torch.int64), 0)
    inside = (job >= 0) & (job < length)
    job = job.clamp(0, length - 1)
    bad = active & ~(inside & (_pick(state, job, state.status) == WAITING))
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"step_torch: row {row} picked job {int(job[row])}, which is not waiting")
    added = torch.zeros(state.batch, dtype=torch.float64, device=state.submit.device)
    need = _pick(state, job, state.nodes)
    held = active & (need > state.free_nodes)
    shadow = _shadow(state, need) if cfg.backfill == "easy" and bool(held.any()) else None
    for _ in range(2 * length + 1):  # each event ends or brings one of the L jobs
        if not held.any():
            break
        if shadow is not None:
            _backfill_pass(state, held, shadow, added, cfg)
        _event(state, held)
        held &= need > state.free_nodes
    else:
        raise RuntimeError("step_torch: a held job never fit; the state is inconsistent")
    _start(state, active, job, added, cfg)
    _move_forward(state, active)
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
    by_submit = state.submit.sort(dim=1, stable=True).indices  # (submit, index) order

    def rank(key: torch.Tensor) -> torch.Tensor:
        """Each job's place in the order (key, submit, index) among waiting jobs."""
        within = torch.where(waiting, key, NEVER).gather(1, by_submit).sort(dim=1, stable=True).indices
        order = by_submit.gather(1, within)
        return torch.empty_like(order).scatter_(1, order, index)

    key = torch.minimum(2 * rank(state.requested), 2 * rank(state.processors) + 1)
    alternation = torch.where(waiting, key, NEVER).topk(width, dim=1, largest=False, sorted=True).indices
    return torch.where(crowded[:, None], alternation, window)
