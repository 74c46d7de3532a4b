"""The batched rollout hot path: drive the state machine directly, without TorchRL's per-step
bookkeeping (the `ClusterEnv` wrapper is for TorchRL users and `check_env_specs`).

`play` runs any policy to the end of every episode; `collect` also records what policy-gradient
training needs (the network's features, actions, rewards), decision by decision.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..config import ClusterConfig
from ..jobs import JobSet
from ..policies.acting import SAMPLED, Acting
from ..policies.networks import PolicyNetwork
from .cluster import init_state, step_state
from .observations import observe
from .state import ClusterState

Policy = Callable[[dict], dict]


def max_decisions(cfg: ClusterConfig, jobs: JobSet) -> int:
    """An upper bound on the steps of any episode: every job is scheduled once, time advances at
    most max_time times."""
    return jobs.max_jobs + cfg.max_time + 1


# the cost of one decision of `play` on one CPU core, measured with the random heuristic (the
# cheapest policy): a fixed part, a part per row and one per row and job column; a network adds
# about 9 us a row (DeepRM's and the slot network, greedy; 3 us taken, a lower estimate)
STEP_SECONDS, ROW_SECONDS, COLUMN_SECONDS, NETWORK_SECONDS = 4e-5, 1e-7, 2e-10, 3e-6


def rollout_seconds(max_jobs: int, rows: int, network: bool = False) -> float:
    """A lower estimate of the seconds `play` takes on `rows` episodes of `max_jobs` job columns
    with a heuristic (a network policy with `network`): an episode takes at least one decision per
    job, about `max_jobs` (DeepRM's workload on 100,000 units: 190,170 columns, one row: 15 s
    estimated, 18-33 s measured with tetris; 50 columns: 4 times as many decisions, as time advances)."""
    row = ROW_SECONDS + COLUMN_SECONDS * max_jobs + (NETWORK_SECONDS if network else 0.0)
    return max_jobs * (STEP_SECONDS + rows * row)


@torch.no_grad()
def play(policy: Policy, cfg: ClusterConfig, jobs: JobSet, check_every: int = 16,
         record: Callable | None = None) -> tuple[ClusterState, int]:
    """Run `policy` on every row of `jobs` until all episodes are done.

    policy: maps a dict of observation tensors (see observations.observe) to the same dict with
        "action" (LongTensor[B]) set.
    jobs: JobSet [B, L], already on the device to use.
    record: called after each decision as record(obs, active, reward, time), where active
        (BoolTensor[B]) says which rows were not done yet and time (LongTensor[B]) is the cluster
        time at the decision.
    Returns the final state and the number of steps taken. Done rows stay absorbing, so checking
    for the end only every `check_every` steps (one host sync each) changes no result.
    """
    state = init_state(jobs, cfg)
    limit = max_decisions(cfg, jobs)
    steps = 0
    while steps < limit:
        obs = observe(state, cfg, job_start=False)
        active, time = ~state.done, state.time
        reward = step_state(state, policy(obs)["action"], cfg)
        if record is not None:
            record(obs, active, reward, time)
        steps += 1
        if steps % check_every == 0 and bool(state.done.all()):
            break
    return state, steps


@dataclass
class Trajectories:
    """S decisions of B episodes, stacked along a leading step axis.

    features: dict of the network's features, each [S, B, ...] (see the policy's `encode`)
    action:   LongTensor[S, B]
    reward:   FloatTensor[S, B]  (0 for steps after a row is done)
    active:   BoolTensor[S, B]   the row was not done when it decided
    time:     LongTensor[S, B]   cluster time at the decision
    state:    the final ClusterState (episode metrics: objectives.episode_metrics)
    """

    features: dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    active: torch.Tensor
    time: torch.Tensor
    state: ClusterState

    @property
    def num_decisions(self) -> int:
        return int(self.active.sum())

    def decisions(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(features, actions) of the D decisions of rows not yet done: each [D, ...]."""
        return {k: v[self.active] for k, v in self.features.items()}, self.action[self.active]

    def split(self, rows: list[int]) -> list["Trajectories"]:
        """Consecutive blocks of rows (e.g. the tasks of a meta-batch), each a Trajectories of its own."""
        out, start = [], 0
        for n in rows:
            block = slice(start, start + n)
            out.append(Trajectories({k: v[:, block] for k, v in self.features.items()}, self.action[:, block],
                                    self.reward[:, block], self.active[:, block], self.time[:, block],
                                    self.state.rows(block)))
            start += n
        return out


@torch.no_grad()
def collect(net: PolicyNetwork, cfg: ClusterConfig, jobs: JobSet, acting: Acting = SAMPLED,
            generator: torch.Generator | None = None, teacher: Policy | None = None) -> Trajectories:
    """Roll out a policy network on every row of `jobs`, recording each decision. `net` has
    `encode(obs) -> features` and `frozen() -> (features -> logits)` (policies.PolicyNetwork).
    The network acts as `acting` says (default: draws from its softmax); with `teacher` (e.g. a heuristic)
    the teacher acts instead and the network's features of the states it visits are recorded
    (imitation learning)."""
    features, actions, rewards, actives, times = [], [], [], [], []
    logits = net.frozen()  # the weights do not change during a rollout

    def policy(obs):
        f = net.encode(obs)
        obs["action"] = teacher(obs)["action"] if teacher else acting.choose(logits(f), obs, generator)
        features.append(f)
        actions.append(obs["action"])
        return obs

    def record(obs, active, reward, time):
        rewards.append(reward)
        actives.append(active)
        times.append(time)

    state, _ = play(policy, cfg, jobs, record=record)
    stacked = {k: torch.stack([f[k] for f in features]) for k in features[0]}
    return Trajectories(stacked, torch.stack(actions), torch.stack(rewards), torch.stack(actives),
                        torch.stack(times), state)
