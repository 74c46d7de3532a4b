"""The batched rollout hot path: drive the state machine directly, without TorchRL's per-step
bookkeeping (the `ClusterEnv` wrapper is for TorchRL users and `check_env_specs`)."""
from __future__ import annotations

from typing import Callable

import torch

from .cluster import ClusterState, init_state, step_state
from .config import ClusterConfig
from .jobs import JobSet
from .observations import observe

Policy = Callable[[dict], dict]


def max_decisions(cfg: ClusterConfig, jobs: JobSet) -> int:
    """An upper bound on the steps of any episode: every job is scheduled once, time advances at
    most max_time times."""
    return jobs.max_jobs + cfg.max_time + 1


@torch.no_grad()
def play(policy: Policy, cfg: ClusterConfig, jobs: JobSet, check_every: int = 16) -> tuple[ClusterState, int]:
    """Run `policy` on every row of `jobs` until all episodes are done.

    policy: maps a dict of observation tensors (see observations.observe) to the same dict with
        "action" (LongTensor[B]) set.
    jobs: JobSet [B, L], already on the device to use.
    Returns the final state and the number of steps taken. Done rows stay absorbing, so checking
    for the end only every `check_every` steps (one host sync each) changes no result.
    """
    state = init_state(jobs, cfg)
    limit = max_decisions(cfg, jobs)
    steps = 0
    while steps < limit:
        obs = observe(state, cfg, job_start=False)
        step_state(state, policy(obs)["action"], cfg)
        steps += 1
        if steps % check_every == 0 and bool(state.done.all()):
            break
    return state, steps
