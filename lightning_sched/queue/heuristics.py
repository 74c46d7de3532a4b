"""Priority rules of the batch-scheduling literature as queue-env policies: each scores the
visible jobs, and the lowest score goes first (ties: the earlier slot, i.e. FCFS order when the
window shows the whole queue). They rank the whole queue, so evaluate them with a window as long
as the sequence (`evaluation.heuristic_config` gives it); they refuse a window that hides waiting jobs.

    fcfs    submit time
    sjf     (requested time, submit time)
    f1      log10(requested) * processors + 870 * log10(submit)  (Carastan-Santos & de Camargo, SC'17)
    wfp3    -(wait / requested)^3 * processors                    (Tang et al., 2009)
    unicep  -wait / (log2(processors) * requested)                (Tang et al., 2009)
    wfp3_rlscheduler, unicep_rlscheduler: as RLScheduler's code computes them, with the wait of a
            queued job taken as -1 - submit (its scheduled time is still -1): the rules behind its
            published WFP3 and UNICEP cells, kept only to reproduce them
    random  a uniform draw among the visible jobs
"""
from __future__ import annotations

import math

import torch
from tensordict import TensorDictBase

from ..batched import acts_on_any_batch
from ..config import ConfigError
from .config import RULES, SEQUENCE_KEYS
from .state import NEVER, places

HEURISTICS = (*RULES, "wfp3_rlscheduler", "unicep_rlscheduler", "random")


def _log10_positive(x: torch.Tensor) -> torch.Tensor:
    return torch.log10(torch.where(x > 0, x, torch.full_like(x, 0.1)))  # RLScheduler's guard for 0


def window_columns(td) -> tuple[torch.Tensor, ...]:
    """Which window slots hold a job (BoolTensor[B, W]), and each slot's submit time, requested
    time and processors (DoubleTensor[B, W] each; an empty slot shows job 0's)."""
    job = td["window_job"]
    k = job.clamp(min=0).long()
    return (job >= 0, *(td[key].gather(1, k).double() for key in SEQUENCE_KEYS))


def leading_slots(td) -> dict[str, torch.Tensor]:
    """The keys the rules read, with the window ("window_job", "job_features", "action_mask") cut
    after the longest row's queue: a window lists a queue it can hold in its first slots (and is full
    otherwise), and the rules' windows are as long as the sequence (1024 slots, mostly empty), so
    scoring the cut window costs the queue's length, not the window's. A pick is the same slot.
    The window keys come back [B, n] (n = min(W, the longest queue), at least 1), the others as in `td`."""
    missing = [key for key in SEQUENCE_KEYS if key not in td.keys()]
    if missing:  # e.g. left out with TorchRL's ExcludeTransform: only a network does without them
        raise ConfigError(f"a queue rule reads the observation's {', '.join(missing)}, which this one lacks (an "
                          "ExcludeTransform?): keep them for the rules")
    n = max(1, min(td["window_job"].shape[-1], int(td["queue_length"].max())))
    view = {key: td[key] for key in (*SEQUENCE_KEYS, "time", "queue_length")}
    return {**view, **{key: td[key][:, :n] for key in ("window_job", "job_features", "action_mask")}}


def priority(name: str, td: TensorDictBase) -> torch.Tensor:
    """Rule `name`'s score of every window slot, [B, W] (lower goes first; empty slots score
    highest): double, or for sjf an exact int64 key (requested time, then submit time)."""
    filled, submit, requested, processors = window_columns(td)
    k = td["window_job"].clamp(min=0).long()
    now = td["time"].double()
    if name == "fcfs":
        score = submit
    elif name == "sjf":  # requested time first, submit time breaks ties: one exact int64 key
        return torch.where(filled, sjf_key(td["job_requested"].gather(1, k), td["job_submit"].gather(1, k)),
                           NEVER)
    elif name == "f1":
        score = _log10_positive(requested) * processors + 870 * _log10_positive(submit)
    elif name in ("wfp3", "wfp3_rlscheduler"):
        wait = now - submit if name == "wfp3" else -1 - submit
        score = -torch.pow(wait / requested, 3) * processors
    elif name in ("unicep", "unicep_rlscheduler"):
        wait = now - submit if name == "unicep" else -1 - submit
        score = -(wait + 1e-15) / (torch.log2(processors + 1e-15) * requested)
    else:
        raise ConfigError(f"queue heuristic must be one of {', '.join(HEURISTICS)}, got {name!r}")
    return torch.where(filled, score, torch.inf)


def sjf_key(requested: torch.Tensor, submit: torch.Tensor) -> torch.Tensor:
    """SJF's order as one int64 key per job (LongTensor[B, W] in, the same out): requested * 2^32 +
    submit where that fits in int64 (requests below 2^31 s and submit times below 2^32 s, every log's);
    else, on the CPU (a snapshot a scheduler sends may hold any request), each job's place in the
    (requested, submit) order. On a GPU the bounds are not read back (a sync at every step), and the
    packed key assumes them: requests below 68 years, submit times below 136 years."""
    if requested.numel() == 0 or requested.device.type != "cpu" or (
            int(requested.max()) < 1 << 31 and 0 <= int(submit.min()) and int(submit.max()) < 1 << 32):
        return requested * (1 << 32) + submit
    by_submit = torch.sort(submit, dim=-1, stable=True).indices
    order = by_submit.gather(-1, torch.sort(requested.gather(-1, by_submit), dim=-1, stable=True).indices)
    return places(order)


def rule_keys(state, window_job: torch.Tensor) -> dict[str, torch.Tensor]:
    """What `priority` reads, from a QueueState and its window (IntTensor or LongTensor[B, W])."""
    return {"window_job": window_job, "job_submit": state.submit, "job_requested": state.requested,
            "job_processors": state.processors, "time": state.time.unsqueeze(1)}


def order_ranks(score: torch.Tensor) -> torch.Tensor:
    """Each slot's place (LongTensor[B, W], 0 first) in the ascending order of `score` [B, W]; ties
    keep slot order, as the rules' argmin does."""
    return places(torch.sort(score, dim=-1, stable=True).indices)


def window_ranks(td, rules) -> torch.Tensor:
    """Each visible job's place in each rule's order of the window, FloatTensor[B, W, R]:
    log1p(rank) / log1p(W), 0 for the rule's first pick and for empty slots (`order_ranks`). `td`
    holds the keys `priority` reads (a dict will do: `rule_keys`)."""
    filled = td["window_job"] >= 0
    w = filled.shape[-1]
    return torch.stack([torch.where(filled, torch.log1p(order_ranks(priority(name, td)).float()) / math.log1p(w), 0.0)
                        for name in rules], -1)


class QueueHeuristic:
    """A priority rule as a queue-env policy: td -> td with "action" (LongTensor[B], the slot of
    the job with the lowest score). `window_only`: rank the visible jobs only, as a teacher for a
    network that sees the same window (SJF's first job is always visible; other rules' may not be)."""

    def __init__(self, name: str, generator: torch.Generator | None = None, window_only: bool = False):
        if name not in HEURISTICS:
            raise ConfigError(f"queue heuristic must be one of {', '.join(HEURISTICS)}, got {name!r}")
        self.name, self.generator, self.window_only = name, generator, window_only

    @acts_on_any_batch
    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        mask = td["action_mask"]
        if self.name != "random" and not self.window_only:
            hidden = td["queue_length"].reshape(-1) > mask.shape[-1]
            if bool(hidden.any()):
                raise ConfigError(f"queue heuristic {self.name}: the window ({mask.shape[-1]} slots) hides waiting "
                                  f"jobs ({int(td['queue_length'].max())}); use a window as long as the sequence")
        if self.name != "random":
            td["action"] = self.ranking(td).argmin(-1)
        else:
            weights = mask.double()
            td["action"] = torch.multinomial(weights, 1, generator=self.generator).squeeze(-1)
        return td

    def ranking(self, td) -> torch.Tensor:
        """The rule's score of the window's leading slots (`leading_slots`), [B, n], lower first."""
        if self.name == "random":
            raise ConfigError("queue heuristic random draws its pick: it ranks nothing")
        return priority(self.name, leading_slots(td))
