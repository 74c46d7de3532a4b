"""Every seed jobsets are drawn from, in one table.

A result is only honest if the jobsets it is measured on were never trained, tuned or selected
on. Jobsets come from `evaluation.make_jobsets(workload, n, seed)`, one generator per seed, so
two uses are independent exactly when their seeds differ. The held-out uses therefore own
disjoint ranges, and the streams that feed learning (training, adaptation) are formulas whose
values a test checks never land in a held-out range (tests/test_seeds.py).

| use        | seeds                                              | who draws them                               |
|------------|----------------------------------------------------|----------------------------------------------|
| selection  | 555 + round(100 x load), load < 2.22               | scripts/select_checkpoint.py                 |
| tuning     | 777 + i, i < 100 (one per load)                    | scripts/tune_tetris.py                       |
| evaluation | 12_345 + offset, offset < 400                      | evaluate.py, figures.py, adapt.py, fit test  |
| validation | 900_001 + i, i < 1_000                             | the tasks' validation jobsets                |
| adaptation | 5_000_000 + 10_007 x seed + step                   | adaptation.adapt (fine-tuning)               |
| training   | (1_000_003 x seed + iteration) x 4_099 + stream,   | the tasks' training jobsets                  |
|            |   stream < 4_099; DDP ranks > 0: a hash (below)    |                                              |

A training or adaptation seed that would land in a held-out range is moved past all of them
(+ 10^12); with the shipped configurations none does. The streams of one iteration fit between it and
the next (stream < 4_099), so no draw repeats another iteration's. DDP ranks after the first take a hash
of (seed, iteration, rank, stream) below 2^62 instead: a formula with a rank term would meet another
iteration's draws of rank 0, and rank 0 keeps the formula its documented runs used.

Figures offset the evaluation seed per load (`EVALUATION + i`, `+ 100 + i`, `+ 200 + i`; the cluster-size
figure `+ 300 + 10 x size + i`), so each point of a figure has its own unseen jobsets.
"""
from __future__ import annotations

import hashlib

from .config import ConfigError

SELECTION = 555
TUNING = 777
EVALUATION = 12_345
VALIDATION = 900_001
ADAPTATION = 5_000_000

# the held-out ranges: [start, stop)
HELD_OUT = {
    "selection": range(SELECTION, TUNING),
    "tuning": range(TUNING, TUNING + 100),
    "evaluation": range(EVALUATION, EVALUATION + 400),
    "validation": range(VALIDATION, VALIDATION + 1_000),
}


def evaluation(offset: int = 0) -> int:
    """The seed of an evaluation set; figures use one offset per load or panel."""
    return _inside("evaluation", EVALUATION + offset)


def selection(load: float, base: int = SELECTION) -> int:
    """The seed of checkpoint-selection jobsets at `load` (it follows the load, so a subset of the
    loads sees the same jobsets)."""
    seed = base + round(100 * load)
    return _inside("selection", seed) if base == SELECTION else seed


def tuning(index: int) -> int:
    """The seed of the index-th tuning set (one per load)."""
    return _inside("tuning", TUNING + index)


def adaptation(seed: int, step: int) -> int:
    """The jobsets of fine-tuning step `step` of an adaptation run seeded with `seed`."""
    return _outside(ADAPTATION + seed * 10_007 + step)


STREAMS = 4099  # the draws one training iteration may make: streams 0 .. STREAMS - 1
SAMPLER_STREAM = STREAMS - 1  # the action sampling of DDP ranks > 0 (tasks/base.py), apart from every jobset draw


def training(seed: int, iteration: int, rank: int = 0, stream: int = 0) -> int:
    """The jobsets of one training iteration on one DDP rank; `stream` (< STREAMS) separates the
    draws of one iteration (MAML: tasks, inner and outer rollouts)."""
    if not 0 <= stream < STREAMS:
        raise ConfigError(f"training seed stream {stream} is outside [0, {STREAMS}) (lightning_sched.seeds)")
    if rank == 0:
        return _outside((seed * 1_000_003 + iteration) * STREAMS + stream)
    digest = hashlib.blake2b(f"{seed},{iteration},{rank},{stream}".encode(), digest_size=8).digest()
    return _outside(int.from_bytes(digest, "big") >> 2)


def _outside(seed: int) -> int:
    return seed + 10**12 if any(seed in span for span in HELD_OUT.values()) else seed


def _inside(use: str, seed: int) -> int:
    if seed not in HELD_OUT[use]:
        span = HELD_OUT[use]
        raise ConfigError(f"{use} seed {seed} is outside its range [{span.start}, {span.stop}) (lightning_sched.seeds)")
    return seed
