"""Log replay: the recorded schedule, to start a window as the log was at its first step.

By default (start_state="log") jobs recorded running at a window's start (started before, ending
after: submit + wait + run time) hold their resources until their recorded end, and jobs submitted
but not yet started wait in the queue at step 0.

    start_steps, LogState                 the recorded schedule, to start windows from the log's state
    most_jobs_from_log, fit_running       job columns with the waiting jobs; running jobs that fit
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .mapping import MAX_STEP
from .windows import WindowPlan


def start_steps(arrival: torch.Tensor, submit: list[float], wait: list[float], seconds_per_step: float,
                compression: float) -> tuple[torch.Tensor, int]:
    """(LongTensor[N]: the recorded start step floor((submit + wait - first submit) / (c S)) of each
    kept job, never before its arrival step; the jobs whose wait is unknown, which start at arrival)."""
    submit_t = torch.tensor(submit, dtype=torch.float64)
    wait_t = torch.tensor(wait, dtype=torch.float64)
    known = wait_t >= 0
    step = torch.floor((submit_t - submit[0] + wait_t.clamp(min=0)) / (compression * seconds_per_step))
    start = torch.where(known, step.clamp(max=MAX_STEP).long(), arrival).maximum(arrival)
    return start, int((~known).sum())


@dataclass
class LogState:
    """The recorded schedule of every kept job, to start a window at step s as the log was then.

    arrival, start, end: LongTensor[N] in arrival order, end = start + duration (steps, compressed
    timeline); demand: LongTensor[N, R]; by_start: LongTensor[N], the jobs in (start, arrival) order,
    sorted_start: start[by_start]; longest: the most steps any job runs, max_wait: the most steps any
    job waited.

    At s, a job with arrival < s <= start is waiting (in the queue at step 0), one with start < s < end
    is running (it holds its demand over steps [0, end - s) of the window)."""

    arrival: torch.Tensor
    start: torch.Tensor
    end: torch.Tensor
    demand: torch.Tensor
    by_start: torch.Tensor
    sorted_start: torch.Tensor
    longest: int
    max_wait: int

    @classmethod
    def of(cls, arrival: torch.Tensor, start: torch.Tensor, duration: torch.Tensor, demand: torch.Tensor) -> LogState:
        sorted_start, by_start = torch.sort(start, stable=True)
        return cls(arrival, start, start + duration, demand, by_start, sorted_start, int(duration.max()),
                   int((start - arrival).max()))

    def waiting(self, s: int) -> torch.Tensor:
        """The jobs waiting at step s, in arrival order: LongTensor[n] of indices."""
        lo = int(torch.searchsorted(self.arrival, torch.tensor(s - self.max_wait)))
        hi = int(torch.searchsorted(self.arrival, torch.tensor(s)))
        return lo + torch.nonzero(self.start[lo:hi] >= s).flatten()

    def running(self, s: int) -> torch.Tensor:
        """The jobs running at step s, in start order: LongTensor[n] of indices."""
        lo = int(torch.searchsorted(self.sorted_start, torch.tensor(s - self.longest)))
        hi = int(torch.searchsorted(self.sorted_start, torch.tensor(s)))
        candidates = self.by_start[lo:hi]
        return candidates[self.end[candidates] > s]

    def num_waiting(self, starts: torch.Tensor) -> torch.Tensor:
        """LongTensor[S]: jobs waiting at each step of `starts` (start >= arrival makes this a difference of counts)."""
        return torch.searchsorted(self.arrival, starts) - torch.searchsorted(self.sorted_start, starts)


def fit_running(demand: torch.Tensor, resource_units: int) -> torch.Tensor:
    """BoolTensor[n]: the longest prefix of the running jobs (demand LongTensor[n, R], in start order)
    that fits resource_units of every resource; the rest would overfill the cluster (rounding demands up
    to units, or a compressed timeline, can make the recorded schedule exceed it)."""
    fits = (demand.cumsum(0) <= resource_units).all(-1)
    return fits.long().cumprod(0).bool()


def most_jobs_from_log(arrival: torch.Tensor, log: LogState, plan: WindowPlan, span: tuple[int, int],
                       length: int) -> int:
    """The most jobs a window started from the log's state holds (its arrivals plus the jobs waiting at
    its start), over the plan's starts: consecutive, exactly; random, at every step where the count can
    rise (an upper bound: some of those starts hold no arrival). arrival: the split's, ascending."""
    if plan.starts is not None:
        candidates = plan.starts
    else:
        lo, last = span[0], max(span[0], span[1] - length)
        candidates = torch.cat([arrival - length + 1, log.arrival + 1, log.start + 1, torch.tensor([lo, last])])
        candidates = torch.unique(candidates.clamp(lo, last))
    window = torch.searchsorted(arrival, candidates + length) - torch.searchsorted(arrival, candidates)
    return int((window + log.num_waiting(candidates)).max())

