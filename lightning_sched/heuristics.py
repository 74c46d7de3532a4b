"""Batched heuristic schedulers (SPEC "Heuristics"). Each is a callable `policy(td) -> td` that
writes `td["action"]` (LongTensor[B]) from the structured keys every observation mode carries
(`td` may be a TensorDict or a plain dict of tensors).

All but `random` are work-conserving: candidates are the slot jobs that fit now (earliest offset
0); the best score wins, ties go to the lowest slot, and with no candidate the action is void (M).
"""
from __future__ import annotations

import torch
from tensordict import TensorDictBase

from .batched import acts_on_any_batch
from .config import ClusterConfig, ConfigError

# Tetris's knob: weight of the short-job term against the normalised packing term. Tuned with
# `python scripts/tune_tetris.py` on the default workload at loads 0.3..1.5 (docs/library.md, "Tetris's knob").
TETRIS_SHORT_WEIGHT = 100.0


def packing_score(td: TensorDictBase) -> torch.Tensor:
    """sum over r of free units now * demand (DeepRM's Packer, Tetris's alignment): [B, M]."""
    return (td["free_now"].unsqueeze(1) * td["slot_demand"]).sum(-1).double()


def choose_best(td: TensorDictBase, score: torch.Tensor) -> torch.Tensor:
    """Work-conserving argmax of `score` [B, M] over the slot jobs that fit now; void if none."""
    fits_now = td["slot_offset"] == 0
    masked = torch.where(fits_now, score, float("-inf"))
    best = masked.argmax(-1)  # the first maximum: ties go to the lowest slot
    return torch.where(fits_now.any(-1), best, fits_now.shape[-1])


class Heuristic:
    """A scoring rule over the slots; subclasses define `score(td) -> [B, M]` (higher is better)."""

    name = "heuristic"

    def __init__(self, cfg: ClusterConfig):
        self.cfg = cfg

    def score(self, td: TensorDictBase) -> torch.Tensor:
        raise NotImplementedError

    @acts_on_any_batch
    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        td["action"] = choose_best(td, self.score(td))
        return td

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SJF(Heuristic):
    """Shortest job first: highest 1/d_j."""

    name = "sjf"

    def score(self, td):
        return 1.0 / td["slot_duration"].clamp(min=1).double()


class Packer(Heuristic):
    """Highest alignment of the job's demand with the free resources now."""

    name = "packer"

    def score(self, td):
        return packing_score(td)


class Tetris(Heuristic):
    """Tetris (Grandl et al., SIGCOMM 2014) as DeepRM combines it: packing plus short-job preference,

        score = packing / (R * U * MU)  +  short_weight * (1 / d_j)

    both terms in [0, 1]. short_weight = 0 is Packer; a large one is SJF with packing as tie-break.
    """

    name = "tetris"

    def __init__(self, cfg: ClusterConfig, short_weight: float = TETRIS_SHORT_WEIGHT):
        super().__init__(cfg)
        if not short_weight >= 0:
            raise ConfigError(f"tetris short_weight must be >= 0, got {short_weight}")
        self.short_weight = short_weight

    def score(self, td):
        cfg = self.cfg
        packing = packing_score(td) / (cfg.num_resources * cfg.resource_units * cfg.max_job_units)
        return packing + self.short_weight / td["slot_duration"].clamp(min=1).double()

    def __repr__(self):
        return f"Tetris(short_weight={self.short_weight})"


class EDF(Heuristic):
    """Earliest deadline first among the jobs that fit now."""

    name = "edf"

    def score(self, td):
        return -td["slot_deadline"].double()


class Random:
    """Uniform over all M+1 actions, invalid picks act as void (as in DeepRM's code)."""

    name = "random"

    def __init__(self, cfg: ClusterConfig, generator: torch.Generator | None = None):
        self.cfg, self.generator = cfg, generator

    @acts_on_any_batch
    def __call__(self, td):
        like = td["slot_offset"]  # any per-row key: works on TensorDicts and plain dicts alike
        td["action"] = torch.randint(self.cfg.num_actions, like.shape[:1], device=like.device, generator=self.generator)
        return td

    def __repr__(self):
        return "Random()"


HEURISTICS = {"sjf": SJF, "packer": Packer, "tetris": Tetris, "edf": EDF, "random": Random}


def make_heuristic(name: str, cfg: ClusterConfig, **kwargs):
    """A batched heuristic policy by name: sjf, packer, tetris, edf or random."""
    if name not in HEURISTICS:
        raise ConfigError(f"unknown heuristic {name!r}; choose one of {sorted(HEURISTICS)}")
    return HEURISTICS[name](cfg, **kwargs)
