"""Baselines for policy-gradient training: pluggable objects that turn returns into advantages.

A baseline sees the returns of E episodes of each of N jobsets, laid out decision by decision,
and returns the advantages v - b. It must not depend on the actions taken at a decision (then
the policy gradient stays unbiased).
"""
from __future__ import annotations

import torch

from ..config import ConfigError


class Baseline:
    """advantages(returns, active, time, episodes) -> FloatTensor[S, B]."""

    def advantages(self, returns: torch.Tensor, active: torch.Tensor, time: torch.Tensor,
                   episodes: int) -> torch.Tensor:
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


class ClusterTimeBaseline(Baseline):
    """A baseline indexed by cluster time instead of decision count: for a decision taken at time
    t, b is the mean over the E episodes of the jobset of the return from each episode's first
    decision at time >= t (0 for an episode that ended before t).

    DeepRM's b_t compares the t-th decisions of the episodes, which happen at different cluster
    times once the episodes diverge (one scheduled three jobs in a step, another one), and it
    zero-pads the shorter episodes: late decisions of long episodes get biased advantages.
    Comparing returns at the same cluster time compares like with like. Decisions within one
    time step share their return (rewards come when time advances), so they share b too.
    """

    def advantages(self, returns, active, time, episodes):
        s, b = returns.shape
        last = int(time[active].max()) if bool(active.any()) else 0
        # per episode, the index of its first decision at time >= tau, for tau = 0..last: [B, last+1]
        times = torch.where(active, time, last + 1).T.contiguous()  # [B, S], non-decreasing in s
        taus = torch.arange(last + 1, device=time.device).expand(b, -1).contiguous()
        first = torch.searchsorted(times, taus)  # == S when the episode ended before tau
        padded = torch.cat([torch.where(active, returns, 0.0), returns.new_zeros(1, b)]).T  # [B, S+1]
        at_time = padded.gather(1, first)  # [B, last+1]: the episode's return from time tau on
        mean = at_time.view(b // episodes, episodes, -1).mean(1, keepdim=True)  # [N, 1, last+1]
        baseline = mean.expand(-1, episodes, -1).reshape(b, -1).gather(1, time.T.clamp(0, last)).T  # [S, B]
        return torch.where(active, returns - baseline, 0.0)


BASELINES = {cls.__name__: cls for cls in (TimeIndexedBaseline, ClusterTimeBaseline, NoBaseline)}


def make_baseline(name: str) -> Baseline:
    """The baseline a record names (e.g. a meta-policy's inner loop: AdaptationSettings.baseline)."""
    if name not in BASELINES:
        raise ConfigError(f"baseline {name!r} is not one of {', '.join(BASELINES)} (a baseline of your own: pass "
                          "the object to learning.adaptation.adapt)")
    return BASELINES[name]()
