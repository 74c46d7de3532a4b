"""One decision of B queue episodes and the observation it leaves: the native kernel on the CPU
(native_queue.c), torch ops elsewhere (step_torch.py); both give the same state and outputs.

    step_and_observe(state, job, cfg) -> {"bsld_added", "window_job", "job_features", "cluster_features",
                                          "action_mask", "queue_length"}

A step is STEP(j), then the window. The semantics, as RLScheduler's simulator has them
(docs/hpc_queue.md):

    ADVANCE: the next arrival if its submit time is at or before the earliest actual end among the
             running jobs (arrivals win ties), else one running job ends (of jobs ending in the
             same second, the one started first).
    STEP(j): if j does not fit, hold it: [EASY: its shadow time, once: the first requested end,
             running jobs taken by start + requested time, at which j would fit] and while j does
             not fit: [EASY: start every waiting job, in FCFS order, that fits now and whose
             requested time ends before the shadow (strict)] ADVANCE. Start j. Then, while the
             queue is empty and jobs are still to arrive, ADVANCE (the episode is done when all
             have arrived and the queue is empty).

Two implementations, held equal by tests: native_queue.c (the CPU kernel, one row at a time) and
step_torch.py (torch ops on any device; tests/test_queue_step_torch.py). The decision service's
numpy twin, decide/decision.py, decides one snapshot at a time the same way while jobs end by their
requested times (tests/test_decide.py replays logs through it against the env).

With `cfg.rule_ranks`, the job features also carry each named rule's ranking of the window
(`heuristics.window_ranks`, torch ops on either path), and with `cfg.fit_delay` how long until each
job would fit (`fit_delay`; the kernel writes the same numbers); with `cfg.clock` the cluster
features also carry the time of day (`clock`).
"""
from __future__ import annotations

import math

import torch

from . import native
from .config import DAY, LOG_SPAN, MINUTE, QUEUE_WINDOWS, QueueConfig
from .heuristics import rule_keys, window_ranks
from .state import WAITING, QueueState


def step_and_observe(state: QueueState, job: torch.Tensor, cfg: QueueConfig) -> dict[str, torch.Tensor]:
    """Start job `job[b]` (LongTensor[B], an index into row b's sequence; -1: no decision, only
    the observation) in every row not done, as the queue's rules allow (docs/hpc_queue.md), mutating
    `state` in place. Returns the bounded slowdowns this step added per row, "bsld_added"
    DoubleTensor[B], and the new observation: "window_job" IntTensor[B, W] (-1 empty),
    "job_features" FloatTensor[B, W, cfg.job_features], "cluster_features" FloatTensor[B,
    cfg.cluster_features], "action_mask" BoolTensor[B, W], "queue_length" LongTensor[B]."""
    out = native.step(state, job, cfg)
    if out is None:
        from .step_torch import step_torch, window_torch  # the kernel's torch twin, loaded where needed

        added = step_torch(state, job.reshape(-1).to(device=state.status.device, dtype=torch.int64), cfg)
        out = {"bsld_added": added, **observe(state, window_torch(state, cfg), cfg)}
    extra = []  # [B, W, 4] -> [B, W, 4 + R (+ 1)]
    if cfg.rule_ranks:
        extra.append(window_ranks(rule_keys(state, out["window_job"]), cfg.rule_ranks))
    if cfg.fit_delay:  # the kernel's, or computed here from the state it left
        delay = out.pop("fit_delay") if "fit_delay" in out else fit_delay(state, out["window_job"])
        extra.append(delay.unsqueeze(-1))
    if extra:
        out["job_features"] = torch.cat([out["job_features"], *extra], -1)
    if cfg.clock:
        out["cluster_features"] = torch.cat([out["cluster_features"], clock(state.time)], -1)
    return out


def clock(time: torch.Tensor) -> torch.Tensor:
    """The time of day of `time` (LongTensor[B], seconds, the log's time 0 at midnight) as
    FloatTensor[B, 2]: sin and cos of 2 pi (time mod 86400) / 86400."""
    angle = (time % DAY).double() * (2 * math.pi / DAY)
    return torch.stack([angle.sin(), angle.cos()], -1).float()


def fit_delay(state: QueueState, window_job: torch.Tensor) -> torch.Tensor:
    """How long until each window slot's job would fit if nothing else started, FloatTensor[B, W]:
    running jobs free their nodes at their requested ends (what a scheduler knows), and the job fits
    at the first end after which enough nodes are free; `span_feature`, 0 when it fits now and for
    empty slots."""
    from .step_torch import requested_fit_time

    need = state.nodes.gather(1, window_job.clamp(min=0).long())  # [B, W]
    when = requested_fit_time(state, need)
    seconds = torch.where(need <= state.free_nodes.unsqueeze(1), 0, (when - state.time.unsqueeze(1)).clamp(min=0))
    return torch.where(window_job >= 0, span_feature(seconds), 0.0).float()


def span_feature(seconds: torch.Tensor) -> torch.Tensor:
    """Spans of seconds (any shape, integer or float) as features, log1p(seconds / MINUTE) / LOG_SPAN,
    DoubleTensor of the same shape (native_queue.c writes the same numbers)."""
    return torch.log1p(seconds.double() / MINUTE) / LOG_SPAN


def span_seconds(feature: torch.Tensor) -> torch.Tensor:
    """`span_feature` undone to whole seconds, LongTensor of `feature`'s shape: exact below about 10^6 s."""
    return (torch.expm1(feature.double() * LOG_SPAN) * MINUTE).round().long()


def observe(state: QueueState, window_job: torch.Tensor, cfg: QueueConfig) -> dict[str, torch.Tensor]:
    """The observation of the window `window_job` (LongTensor[B, W], -1 empty), as the kernel
    writes it: per slot [wait / max_wait, requested / max_requested, processors / cluster
    processors, fits now] ("job_features" FloatTensor[B, W, 4]), per row [free nodes share,
    log1p(queue length) / log1p(QUEUE_WINDOWS W)] ("cluster_features" FloatTensor[B, 2]), with
    "window_job" IntTensor[B, W], "action_mask" BoolTensor[B, W], "queue_length" LongTensor[B]."""
    filled = window_job >= 0
    k = window_job.clamp(min=0).long()
    time = state.time.unsqueeze(1)

    def slot(column: torch.Tensor) -> torch.Tensor:
        return column.gather(1, k)

    features = torch.stack([(time - slot(state.submit)).double() / cfg.max_wait,
                            slot(state.requested).double() / cfg.max_requested,
                            slot(state.processors).double() / cfg.processors,
                            (slot(state.nodes) <= state.free_nodes.unsqueeze(1)).double()], -1).float()
    features = features * filled.unsqueeze(-1)
    queue = (state.status == WAITING).sum(1)
    mask = filled.clone()
    mask[:, 0] |= state.done  # a done row takes (and ignores) slot 0, so a masked draw stays defined
    cluster = torch.stack([state.free_nodes.double() / cfg.nodes,
                           torch.log1p(queue.double()) / math.log1p(QUEUE_WINDOWS * float(cfg.window))], -1).float()
    return {"window_job": window_job.to(torch.int32), "job_features": features, "cluster_features": cluster,
            "action_mask": mask, "queue_length": queue}
