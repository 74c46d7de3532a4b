"""Baselines for policy-gradient training: pluggable objects that turn returns into advantages.

A baseline sees the returns of E episodes of each of N jobsets, laid out decision by decision,
and returns the advantages v - b. It must not depend on the actions taken at a decision (then
the policy gradient stays unbiased).
"""
from __future__ import annotations

import torch


class Baseline:
    """advantages(returns, active, time, episodes) -> FloatTensor[S, B]."""

    def advantages(self, returns: torch.Tensor, active: torch.Tensor, time: torch.Tensor, episodes: int) -> torch.Tensor:
        """returns, active, time: [S, B] with rows b*E..b*E+E-1 replaying jobset b (E = episodes)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TimeIndexedBaseline(Baseline):
    """DeepRM's baseline (Mao et al. 2016, section 4.2, Figure 3): b_t is the mean, over the E
    episodes of the same jobset, of the return from decision t, episodes shorter than t counting
    as 0 (DeepRM zero-pads them)."""

    def advantages(self, returns, active, time, episodes):
        s, b = returns.shape
        padded = torch.where(active, returns, 0.0)
        baseline = padded.view(s, b // episodes, episodes).mean(-1, keepdim=True)
        return (padded.view(s, b // episodes, episodes) - baseline).view(s, b)


class NoBaseline(Baseline):
    """b = 0: the plain REINFORCE estimator (high variance; for comparisons)."""

    def advantages(self, returns, active, time, episodes):
        return torch.where(active, returns, 0.0)
