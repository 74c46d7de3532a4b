"""Evaluating queue policies on a log under the field's protocols (docs/hpc_queue.md):

    "rlscheduler": RLScheduler's table (Zhang et al., SC'20): the 10 sequences of 1024 jobs its
                   seeded draw gives, each on an empty cluster; the score is the mean over
                   sequences of each sequence's mean bounded slowdown.
    "heldout":     `num_sequences` sequences of 1024 jobs starting evenly over the last 20% of the
                   log's jobs (train on the first 80% only); means with 95% CIs over sequences.

Heuristics rank the whole queue, so they run with a window as long as the sequence; a network runs
with the window it was trained with.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..config import ConfigError
from ..evaluation import mean_ci95
from .config import QueueConfig
from .env import QueueEnv
from .heuristics import QueueHeuristic
from .log import QueueLog

PROTOCOLS = ("rlscheduler", "heldout")
# 0-based positions in the log's job list of RLScheduler's 10 evaluation sequences (its seeded draw)
RLSCHEDULER_STARTS = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)
EVAL_LENGTH = 1024
TRAIN_FRACTION = 0.8  # heldout: training sees jobs [0, 80%), evaluation starts in [80%, end - 1024]
METRICS = ("mean_bounded_slowdown", "mean_wait", "mean_slowdown", "utilization", "makespan")


def train_positions(log: QueueLog, length: int, fraction: float = TRAIN_FRACTION) -> tuple[int, int]:
    """Start positions of training sequences of `length` jobs inside the first `fraction` of the log."""
    return log.positions(0, int(log.num_jobs * fraction), length)


def protocol_starts(log: QueueLog, protocol: str, num_sequences: int = 100) -> torch.Tensor:
    """The evaluation sequences' start positions (LongTensor[N]) of `protocol` on `log`."""
    if protocol == "rlscheduler":
        starts = torch.tensor(RLSCHEDULER_STARTS)
        log.sequences(starts, EVAL_LENGTH)  # refuses a log too short for them
        return starts
    if protocol == "heldout":
        lo, hi = log.positions(int(log.num_jobs * TRAIN_FRACTION), log.num_jobs, EVAL_LENGTH)
        return torch.from_numpy(np.unique(np.linspace(lo, hi, num_sequences).round().astype(np.int64)))
    raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")


@dataclass
class QueueResult:
    """Per-sequence metrics (DoubleTensor[N] each) of one policy, and their summary."""

    sequences: dict[str, torch.Tensor]
    summary: dict[str, float]


def evaluate_queue(policy: Callable, cfg: QueueConfig, log: QueueLog, starts: torch.Tensor,
                   device="cpu") -> QueueResult:
    """Run `policy` (td -> td with "action") once on each sequence of `cfg.sequence_length` jobs
    starting at `starts` (LongTensor[N]), all N at once; every sequence runs to its end."""
    env = QueueEnv(cfg, log, batch_size=[len(starts)], starts=starts, device=device)
    td = env.reset()
    decisions = 0
    with torch.no_grad():
        while not bool(td["done"].all()):
            td = env.step(policy(td))["next"]
            decisions += 1
    m = env.episode_metrics()
    sequences = {k: m[k].double().cpu() for k in METRICS}
    summary: dict[str, float] = {}
    for name in METRICS:
        summary[name], summary[f"{name}_ci95"] = mean_ci95(sequences[name])
    summary.update(num_sequences=len(starts), jobs=len(starts) * cfg.sequence_length, decision_steps=decisions)
    return QueueResult(sequences, summary)


def heuristic_config(cfg: QueueConfig) -> QueueConfig:
    """The config heuristics run with: a window that shows the whole queue."""
    return replace(cfg, window=cfg.sequence_length)


def compare_queue(policies: Mapping[str, tuple[Callable, QueueConfig]], log: QueueLog, starts: torch.Tensor,
                  device="cpu") -> dict[str, QueueResult]:
    """{name: (policy, its config)} -> {name: QueueResult}, all on the same sequences."""
    return {name: evaluate_queue(policy, cfg, log, starts, device) for name, (policy, cfg) in policies.items()}


def heuristic_policies(names, cfg: QueueConfig, seed: int = 0) -> dict[str, tuple[Callable, QueueConfig]]:
    """{name: (QueueHeuristic, the whole-queue config)} for each rule name."""
    full = heuristic_config(cfg)
    return {n: (QueueHeuristic(n, torch.Generator().manual_seed(seed)), full) for n in names}


def paired(a: QueueResult, b: QueueResult, metric: str = "mean_bounded_slowdown") -> tuple[float, float]:
    """a - b over the sequences both ran: (mean, 95% CI half-width)."""
    if a.sequences[metric].shape != b.sequences[metric].shape:
        raise ConfigError("paired: the two results ran different sequences")
    return mean_ci95(a.sequences[metric] - b.sequences[metric])
