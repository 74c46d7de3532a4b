"""The cross-entropy method for a linear queue rule (results: docs/hpc_queue_rounds.md).

A linear rule (linear_rule.py) is a handful of weights, and its objective, the mean bounded
slowdown of whole sequences, has no useful gradient: an argmin changes in jumps. The
cross-entropy method (Rubinstein, 1999) searches it directly:

    mean = F1's weights, std = sigma (the area weight fixed at 1: scaling every weight changes no argmin)
    each generation:
        draw a population of weights ~ N(mean, std^2), the first row the mean itself
        run every rule on the same training sequences (common random numbers)
        score = each sequence's bounded slowdown relative to the mean's, averaged per log,
                the logs weighing the same
        mean <- the elite's mean;  std <- 0.8 * the elite's std + 0.2 * std, at least 0.02
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..config import ConfigError, is_int, is_number
from .config import QueueConfig
from .evaluation import EVAL_LENGTH, RECENT_FRACTION, evaluate_queue
from .linear_rule import BASIC, F1_WEIGHTS, RULE_FEATURES, LinearRule
from .log import QueueLog

# the search reads jobs before this share of each log: `recent` (60-80%) stays for choosing, `heldout` for the test
SEARCH_TRAIN_FRACTION = RECENT_FRACTION


@dataclass(frozen=True)
class SearchSettings:
    """One search's population and spreads."""

    population: int = 24
    """Rules a generation runs (the current mean among them)."""
    elite: int = 6
    """The best rules the mean moves to."""
    sigma: float = 0.5
    """The first generation's spread of each weight (weights are in units of RULE_FEATURES' scales)."""
    context: bool = False
    """Also search the RULE_FEATURES that read the queue length (9 weights instead of 7)."""

    def __post_init__(self) -> None:
        for name in ("population", "elite"):
            value = getattr(self, name)
            if not is_int(value, 2):
                raise ConfigError(f"search.{name} must be an integer >= 2, got {value!r}")
        if self.elite >= self.population:
            raise ConfigError(f"search.elite must be below search.population ({self.population}), got {self.elite}")
        if not is_number(self.sigma) or not self.sigma > 0:
            raise ConfigError(f"search.sigma must be a number > 0, got {self.sigma!r}")
        if not isinstance(self.context, bool):
            raise ConfigError(f"search.context must be true or false, got {self.context!r}")


def training_starts(logs: Sequence[QueueLog], sequences: int, seed: int, length: int = EVAL_LENGTH
                    ) -> list[torch.Tensor]:
    """`sequences` start positions a log (LongTensor[S] each) of `length` jobs inside its first
    SEARCH_TRAIN_FRACTION."""
    g = torch.Generator().manual_seed(seed)
    starts = []
    for log in logs:
        starts.append(log.random_starts(SEARCH_TRAIN_FRACTION, length, sequences, g))
    return starts


def run_rules(weights: torch.Tensor, log: QueueLog, cfg: QueueConfig, starts: torch.Tensor,
              reserve: bool = False) -> torch.Tensor:
    """Every rule of `weights` [P, K] on every start [S], all as one batch: mean bounded slowdowns,
    DoubleTensor[P, S]."""
    p, s = weights.shape[0], starts.numel()
    result = evaluate_queue(LinearRule(weights.repeat_interleave(s, 0), reserve), cfg, log, starts.repeat(p))
    return result.sequences["mean_bounded_slowdown"].reshape(p, s)


def relative_scores(weights: torch.Tensor, logs, cfgs, starts, reserve: bool = False) -> torch.Tensor:
    """Each rule of `weights` [P, K] scored on every log's `starts`: its sequences' bounded slowdowns
    relative to row 0's, averaged per log, the logs weighing the same; DoubleTensor[P] (row 0: 1)."""
    per_log = (run_rules(weights, log, cfg, st, reserve) for log, cfg, st in zip(logs, cfgs, starts))
    return torch.stack([(b / b[:1]).mean(1) for b in per_log]).mean(0)


class CrossEntropyMethod(torch.optim.Optimizer):
    """The cross-entropy method (module docstring) as a torch optimizer of one parameter, the rule's
    weights [K], so that Lightning counts, checkpoints and resumes it as any optimizer (the spread and
    the generator are its state). `step(score=fn)`: fn(weights [P, K]) -> DoubleTensor[P], lower is
    better, row 0 the current weights; returns the best score. Weight 0 (F1's area) stays fixed."""

    def __init__(self, params, settings: SearchSettings, seed: int):
        super().__init__(params, {"population": settings.population, "elite": settings.elite})
        for group in self.param_groups:
            for p in group["params"]:
                std = torch.full_like(p, settings.sigma)
                std[0] = 0.0  # scaling every weight changes no argmin: the area weight stays 1
                self.state[p] = {"std": std, "generator": torch.Generator().manual_seed(seed).get_state()}

    @torch.no_grad()
    def step(self, closure=None, score=None) -> float:
        if closure is not None:
            closure()
        if score is None:
            raise ConfigError("CrossEntropyMethod.step needs score=fn(weights [P, K]) -> scores [P]")
        best = float("inf")
        for group in self.param_groups:
            for p in group["params"]:
                state, g = self.state[p], torch.Generator()
                g.set_state(state["generator"].to(torch.uint8))  # load_state_dict casts state to the weights' dtype
                draws = torch.randn(group["population"], p.numel(), generator=g, dtype=torch.double)
                weights = p.double() + state["std"].double() * draws
                weights[0] = p.double()  # the current mean runs too: the reference of every sequence
                scores = score(weights)
                elite = weights[scores.argsort()[:group["elite"]]]
                std = (0.8 * elite.std(0) + 0.2 * state["std"].double()).clamp(min=0.02)  # smoothed: few elite
                std[0] = 0.0
                p.copy_(elite.mean(0))
                state["std"], state["generator"] = std.to(p.dtype), g.get_state()
                best = min(best, float(scores.min()))
        return best


def f1_start(settings: SearchSettings) -> torch.Tensor:
    """Where a search starts: F1's weights (DoubleTensor[K], 7 or 9 with the queue length's)."""
    return torch.tensor(F1_WEIGHTS[:len(RULE_FEATURES) if settings.context else BASIC], dtype=torch.double)
