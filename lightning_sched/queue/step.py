"""One decision of B queue episodes and the observation it leaves: the native kernel on the CPU
(native_queue.c), torch ops elsewhere (step_torch.py); both give the same state and outputs.

    advance(state, job, cfg) -> {"bsld_added", "window_job", "job_features", "cluster_features",
                                 "action_mask", "queue_length"}

With `cfg.rule_ranks`, the job features also carry each named rule's ranking of the window
(`heuristics.window_ranks`), computed with torch ops on either path.
"""
from __future__ import annotations

import math

import torch

from . import native
from .config import QueueConfig
from .heuristics import window_ranks
from .state import WAITING, QueueState


def advance(state: QueueState, job: torch.Tensor, cfg: QueueConfig) -> dict[str, torch.Tensor]:
    """Start job `job[b]` (LongTensor[B], an index into row b's sequence; -1: no decision, only
    the observation) in every row not done, as the queue's rules allow (docs/hpc_queue.md), mutating
    `state` in place. Returns the bounded slowdowns this step added per row (DoubleTensor[B]) and
    the new observation (see native.step for the shapes)."""
    out = native.step(state, job, cfg)
    if out is None:
        from .step_torch import step_torch, window_torch  # the kernel's torch twin, loaded where needed

        added = step_torch(state, job.reshape(-1).to(device=state.status.device, dtype=torch.int64), cfg)
        out = {"bsld_added": added, **observe(state, window_torch(state, cfg), cfg)}
    if cfg.rule_ranks:  # [B, W, 4] -> [B, W, 4 + R]
        keys = {"window_job": out["window_job"], "job_submit": state.submit, "job_requested": state.requested,
                "job_processors": state.processors, "time": state.time.unsqueeze(1)}
        out["job_features"] = torch.cat([out["job_features"], window_ranks(keys, cfg.rule_ranks)], -1)
    return out


def observe(state: QueueState, window_job: torch.Tensor, cfg: QueueConfig) -> dict[str, torch.Tensor]:
    """The observation of the window `window_job` (LongTensor[B, W], -1 empty), as the kernel
    writes it: per slot [wait / max_wait, requested / max_requested, processors / cluster
    processors, fits now], per row [free nodes share, log1p(queue length) / log1p(4 W)]."""
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
                           torch.log1p(queue.double()) / math.log1p(4.0 * cfg.window)], -1).float()
    return {"window_job": window_job.to(torch.int32), "job_features": features, "cluster_features": cluster,
            "action_mask": mask, "queue_length": queue}
