"""Backfilling played by the policy's own picks: a reservation for the job a ranking puts first
(results: docs/hpc_queue_rounds.md).

With backfilling off the env starts a picked job as soon as it fits and holds everything else
until then, so a rule whose first job does not fit leaves nodes idle. A scheduler knows when its
running jobs' requests end, so it knows when that first job would fit (its reservation, EASY's
shadow time) and can start other jobs before it that cannot delay it:

    first    = the job the ranking puts first
    if first fits now: pick it
    shadow   = now + first's fit delay         (requested ends of the running jobs, as EASY reads them)
    fillers  = waiting jobs j with fit_delay(j) + requested(j) < shadow - now  (done before the reservation)
    pick the ranking's first filler that fits now; else its first filler (held only until it
         fits, and done before the shadow); else `first` (held until it fits)

It reads the env's fit-delay feature (`QueueConfig.fit_delay`), so it runs with that config;
`reserving_config` gives it.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ..batched import acts_on_any_batch
from ..config import ConfigError
from .config import JOB_FEATURES, RULES, QueueConfig
from .heuristics import QueueHeuristic, leading_slots, window_columns
from .step import span_seconds

SUFFIX = "+reserve"  # "f1+reserve": rule F1 played with its own reservation


def reserved_rule(spec: str) -> str | None:
    """The rule a name "RULE+reserve" plays with its own reservation (one of RULES), else None."""
    rule = spec[:-len(SUFFIX)] if spec.endswith(SUFFIX) else None
    return rule if rule in RULES else None


def reserving_config(cfg: QueueConfig) -> QueueConfig:
    """`cfg` with the fit-delay feature a reserving policy reads, and no rule ranks before it."""
    return replace(cfg, rule_ranks=(), fit_delay=True)


def fit_delay_seconds(td, rule_ranks: int = 0) -> torch.Tensor:
    """Each window slot's fit delay in whole seconds, LongTensor[B, W], decoded from the env's
    feature (step.fit_delay; the last job feature, after `rule_ranks` rank columns): exact to the
    second below about 10^6 s."""
    features, width = td["job_features"], JOB_FEATURES + rule_ranks + 1
    if features.shape[-1] != width:
        raise ConfigError(f"a reserving policy reads job_features [B, W, {width}] (QueueConfig.fit_delay "
                          f"true, {rule_ranks} rule_ranks), got {features.shape[-1]} features; run it with "
                          "reserving_config")
    return span_seconds(features[..., -1])


def reserve_pick(score: torch.Tensor, td, rule_ranks: int = 0) -> torch.Tensor:
    """The slot to pick, LongTensor[B], for a ranking `score` [B, W] (lower first, empty slots inf)
    of the window in `td` (module docstring), whose job features carry `rule_ranks` rank columns."""
    filled, _, requested, _ = window_columns(td)
    delay = fit_delay_seconds(td, rule_ranks)
    first = score.argmin(-1, keepdim=True)
    shadow = delay.gather(1, first)  # seconds from now; 0 when the first job fits now
    fillers = filled & (delay + requested.long() < shadow)
    fits = delay == 0
    now_fill = torch.where(fillers & fits, score, torch.inf).argmin(-1)
    later_fill = torch.where(fillers, score, torch.inf).argmin(-1)
    pick = torch.where((fillers & fits).any(-1), now_fill, torch.where(fillers.any(-1), later_fill, first.squeeze(1)))
    return pick


class ReservingRule(QueueHeuristic):
    """A priority rule of queue.heuristics with its own reservation (reserve_pick): td -> td with
    "action". Run it with `reserving_config` (the whole queue visible, as the rules)."""

    def __init__(self, name: str):
        if name not in RULES:
            raise ConfigError(f"a rule with its own reservation must be one of {', '.join(RULES)}, got {name!r}")
        super().__init__(name)

    @acts_on_any_batch
    def __call__(self, td):
        view = leading_slots(td)
        # sjf's int64 key as a double may tie jobs whose keys differ in the submit time: the earlier slot
        # wins a tie, and a rule's window is the queue in FCFS order, so the order is the key's
        td["action"] = reserve_pick(self.ranking(view).double(), view)
        return td
