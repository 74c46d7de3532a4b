"""Rewards per time advance and episode metrics, in one place (SPEC "Rewards" and "Episode metrics").

| objective       | reward over [t, t+1)                          | undiscounted return              |
|-----------------|-----------------------------------------------|----------------------------------|
| slowdown        | -sum of 1/d_j over jobs in the system          | -(sum of slowdowns)              |
| completion_time | -(jobs in the system)                         | -(sum of completion times)       |
| makespan        | -1                                            | -(time of the last finish)       |
| utilization     | mean over r of used[0][r] / U                 | sum of per-step utilization      |
| deadline        | -(jobs with deadline t+1 unfinished at t+1)   | -(jobs that miss their deadline) |

The utilization return of an episode that ends is the same under every schedule: each unit-step of
work is counted once, so it sums to the jobs' total work over the cluster's size. As a training
objective it pays only for work done before max_time (or, with a discount below 1, work done sooner);
to raise the utilization metric (work over the makespan) train with `makespan`.

With `ClusterConfig.tardiness_weight` w > 0 (beyond SPEC) every reward also pays -w per job in the
system past its deadline (deadline_j <= t < f_j), and every return falls by w * sum_j max(0, f_j - deadline_j).
"""
from __future__ import annotations

import torch

from ..config import ClusterConfig
from .state import NEVER, ClusterState, utilization_now

METRICS = ("mean_slowdown", "mean_completion_time", "makespan", "utilization", "slo_hit_rate")
# the episode metric each objective is judged by (SPEC "Episode metrics")
OBJECTIVE_METRIC = {"slowdown": "mean_slowdown", "completion_time": "mean_completion_time", "makespan": "makespan",
                    "utilization": "utilization", "deadline": "slo_hit_rate"}


def interval_reward(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """Reward for [t, t+1) at the state's current time, before it advances: DoubleTensor[B]. The
    objective's reward, less the tardiness term when `cfg.tardiness_weight` > 0."""
    reward = objective_reward(state, cfg)
    if cfg.tardiness_weight:
        reward = reward - cfg.tardiness_weight * late_jobs(state).double()
    return reward


def late_jobs(state: ClusterState) -> torch.Tensor:
    """Jobs in the system past their deadline during [t, t+1): deadline_j <= t < f_j. LongTensor[B].
    (deadline_j >= a_j + d_j > a_j, so such a job has arrived; padding's deadline is NEVER.)"""
    length, t = state.max_jobs, state.time.unsqueeze(1)
    return ((state.deadline[:, :length] <= t) & (finish_times(state) > t)).sum(1)


def objective_reward(state: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """SPEC's reward of `cfg.objective` for [t, t+1): DoubleTensor[B].

    A job is in the system when a_j <= t < f_j: it has arrived (a prefix of the sorted jobs) and
    has not finished (the ring buffer counts finishes up to t).
    """
    if cfg.objective == "slowdown":
        arrived = state.arrived_weight.gather(1, state.num_arrived.unsqueeze(1)).squeeze(1)
        return -(arrived - state.finished_weight)
    if cfg.objective == "completion_time":
        return -(state.num_arrived - state.finished_count).double()
    if cfg.objective == "makespan":
        return torch.full_like(state.util_sum, -1.0)
    if cfg.objective == "utilization":
        return utilization_now(state, cfg)
    if cfg.objective == "deadline":
        due = state.time + 1
        if state.pending_due.shape[1]:
            # jobs due at t+1 not scheduled to finish by then, counted as they were scheduled
            # (state.ClusterState.pending_due): one column a step
            return -state.pending_due.gather(1, due.clamp(max=cfg.max_time + 1).unsqueeze(1)).squeeze(1).double()
        # a state built for another objective keeps no count: look at every job
        length = state.max_jobs
        missed = (state.deadline[:, :length] == due.unsqueeze(1)) & (finish_times(state) > due.unsqueeze(1))
        return -missed.sum(1).double()
    raise ValueError(f"unknown objective {cfg.objective!r}")  # ClusterConfig refuses it earlier


def finish_times(state: ClusterState) -> torch.Tensor:
    """f_j = s_j + d_j, NEVER while unscheduled: LongTensor[B, L] in sorted job order."""
    length = state.max_jobs
    start, duration = state.start[:, :length], state.duration[:, :length]
    return torch.where(start >= 0, start + duration, NEVER)


def episode_metrics(state: ClusterState) -> dict[str, torch.Tensor]:
    """Per-episode metrics (each DoubleTensor[B]) and per-job slowdowns (DoubleTensor[B, L], NaN
    for padding), with f_j capped at the episode's final time for unfinished jobs.

    The metrics are over the jobs that arrived before the final time; a job arriving at or after
    it never entered the episode (a truncated episode with a later arrival) and is counted in
    `num_not_arrived` instead, so no slowdown is negative. Rows without such jobs get NaN metrics;
    `num_jobs` says how many jobs each row had.
    """
    length, final = state.max_jobs, state.time.unsqueeze(1)
    arrival = state.arrival[:, :length]
    real = state.duration[:, :length] > 0
    entered = real & (arrival < final)
    finish = finish_times(state)
    capped = torch.minimum(finish, final).double()
    duration = state.duration[:, :length].double().clamp(min=1)
    n = entered.sum(1).double()
    nan = torch.full_like(capped, float("nan"))
    slowdown = torch.where(entered, (capped - arrival.double()) / duration, nan)
    completion = torch.where(entered, capped - arrival.double(), nan)
    finished = real & (finish <= final)
    met = finished & (finish <= state.deadline[:, :length])  # SPEC: unfinished jobs miss, even if due later
    return {
        "mean_slowdown": slowdown.nansum(1) / n,
        "mean_completion_time": completion.nansum(1) / n,
        "makespan": _latest(torch.where(entered, capped, float("-inf"))).where(n > 0, float("nan")),
        "utilization": (state.util_sum / state.time.clamp(min=1).double()).where(n > 0, float("nan")),
        "slo_hit_rate": met.sum(1).double() / n,
        "num_jobs": state.num_jobs,
        "num_not_arrived": (real & ~entered).sum(1),
        "final_time": state.time,
        "job_slowdown": slowdown,
        "job_duration": state.duration[:, :length],
        "job_finished": finished,
    }


def _latest(values: torch.Tensor) -> torch.Tensor:
    """Row-wise max of DoubleTensor[B, L], -inf for rows without columns (L = 0 is a valid jobset)."""
    return torch.cat([values, values.new_full((values.shape[0], 1), float("-inf"))], dim=1).amax(1)
