"""The pieces of DeepRM's policy-gradient update (Mao et al. 2016, section 4.2, Figure 3) as pure
functions, shared by REINFORCE (tasks/reinforce.py) and the MAML inner loop (tasks/maml.py), and
the losses of the upgraded recipe: PPO-style clipped reuse of a batch and imitation of a
heuristic (DeepRM's supervised pre-training)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..deeprm.rollout import Trajectories
from ..policies.networks import log_prob as policy_log_prob
from .baselines import Baseline, TimeIndexedBaseline


def discounted_returns(reward: torch.Tensor, gamma: float) -> torch.Tensor:
    """v_t = sum_{s >= t} gamma^(s-t) r_s along the step axis: reward, result FloatTensor[S, B]."""
    if gamma == 1.0:
        return reward.flip(0).cumsum(0).flip(0)
    returns = torch.empty_like(reward)
    running = torch.zeros_like(reward[0])
    for t in range(reward.shape[0] - 1, -1, -1):
        running = reward[t] + gamma * running
        returns[t] = running
    return returns


def sequence_advantages(reward: torch.Tensor, active: torch.Tensor, episodes: int,
                        gamma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepRM's advantages of decisions laid out [T, B], B = N*E episodes with rows b*E..b*E+E-1
    replaying one sequence: the return from decision t (rewards of steps not `active` dropped)
    minus its mean over the E episodes of the sequence (TimeIndexedBaseline). (advantage, returns),
    FloatTensor[T, B] each."""
    returns = discounted_returns(torch.where(active, reward, 0.0), gamma)
    return TimeIndexedBaseline().advantages(returns, active, None, episodes), returns


def std_scaled(advantage: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """The advantages [T, B] over their standard deviation across the active decisions (+1e-8): one
    step size then serves rewards of any magnitude (loads, sites whose slowdowns differ by orders)."""
    return advantage / (advantage[active].std() + 1e-8)


def jobset_std(advantage: torch.Tensor, active: torch.Tensor, episodes: int, centred: bool = True) -> torch.Tensor:
    """Standard deviation of the advantages of each jobset's (sequence's) decisions, per row: [1, B]
    (+1e-8); rows b*E..b*E+E-1 replay one jobset. Not `centred`: their root mean square, which a
    baseline that centres them makes about the same."""
    s, b = advantage.shape
    a = torch.where(active, advantage, 0.0).view(s, b // episodes, episodes)
    count = active.view(s, b // episodes, episodes).sum((0, 2)).clamp(min=1)
    var = a.square().sum((0, 2)) / count
    if centred:
        var = (var - (a.sum((0, 2)) / count).square()).clamp(min=0)
    return (var.sqrt() + 1e-8).repeat_interleave(episodes).unsqueeze(0)


def per_sequence_scaled(advantage: torch.Tensor, active: torch.Tensor, episodes: int) -> torch.Tensor:
    """advantage [T, B] divided by the root mean square of its sequence's advantages over the decisions
    taken (`active`, [T, B]; `jobset_std` not centred): every sequence then weighs the same, however
    far apart their slowdowns are."""
    return advantage / jobset_std(advantage, active, episodes, centred=False)


@dataclass
class PolicyGradient:
    """One policy-gradient loss over a batch of trajectories, and what it saw."""

    loss: torch.Tensor  # scalar, to minimise
    mean_return: torch.Tensor  # over episodes
    max_return: torch.Tensor
    entropy: torch.Tensor  # mean policy entropy over decisions
    decisions: int
    # the decisions themselves, for more steps on the same batch (clipped_surrogate): [D, ...]
    features: dict[str, torch.Tensor]
    action: torch.Tensor
    advantage: torch.Tensor
    old_log_prob: torch.Tensor  # log pi_old(a|s) of the policy that collected them


def policy_gradient(net, traj: Trajectories, baseline: Baseline, episodes: int, gamma: float = 1.0,
                    entropy_weight: float = 0.0, normalize_advantage: bool | str = False) -> PolicyGradient:
    """DeepRM's update direction: sum over decisions of grad log pi(a_t|s_t) (v_t - b_t).

    traj: B = N*E episodes, rows b*E..b*E+E-1 replaying jobset b. The loss is the mean over all
    decisions of -log pi * advantage (DeepRM's code divides by the number of decisions), minus
    `entropy_weight` times the mean entropy. `normalize_advantage` divides the advantages by their
    standard deviation over the decisions (not DeepRM's): the step size then no longer scales with
    the reward's magnitude, which grows with load. `normalize_advantage="jobset"` divides by the
    standard deviation within each jobset's episodes instead, so a light-load jobset (small
    returns) pulls as hard as a heavy one.
    """
    returns = discounted_returns(traj.reward, gamma)  # [S, B]
    advantage = baseline.advantages(returns, traj.active, traj.time, episodes)  # [S, B]
    active = traj.active
    if normalize_advantage == "jobset":
        advantage = advantage / jobset_std(advantage, active, episodes)
    elif normalize_advantage:
        advantage = std_scaled(advantage, active)
    features, action = traj.decisions()  # [D, ...]
    log_prob, entropy = policy_log_prob(net, features, action)
    advantage = advantage[active].detach()
    loss = -(log_prob * advantage).mean() - entropy_weight * entropy.mean()
    episode_return = returns[0]
    return PolicyGradient(loss, episode_return.mean(), episode_return.max(), entropy.mean().detach(),
                          int(active.sum()), features, action, advantage, log_prob.detach())


def clipped_surrogate(net, pg: PolicyGradient, clip: float, entropy_weight: float = 0.0) -> torch.Tensor:
    """PPO's clipped objective (Schulman et al. 2017) on the decisions of an earlier `policy_gradient`,
    for further steps on the same batch: with r = pi(a|s) / pi_old(a|s), the loss is
    -mean(min(r A, clip(r, 1-clip, 1+clip) A)) - entropy_weight * mean entropy. At r = 1 (the first
    step) its gradient is the policy gradient's; the clip stops the reuse once the policy has moved
    more than `clip` on a decision. `pg`'s decisions: features [D, ...], action, advantage and
    old_log_prob [D]; a scalar loss."""
    log_prob, entropy = policy_log_prob(net, pg.features, pg.action)
    ratio = (log_prob - pg.old_log_prob).exp()
    surrogate = torch.minimum(ratio * pg.advantage, ratio.clamp(1 - clip, 1 + clip) * pg.advantage)
    return -surrogate.mean() - entropy_weight * entropy.mean()


def imitation_loss(net, traj: Trajectories) -> torch.Tensor:
    """Cross-entropy of the network's policy against the actions a teacher took (rollout.collect
    with `teacher`): -mean over its D decisions of log pi(a_teacher | s); a scalar."""
    log_prob, _ = policy_log_prob(net, *traj.decisions())
    return -log_prob.mean()
