"""Where the windows (jobsets) of a split can start, kept sparse (a trace can span millions of steps).

Windows of `simu_len` steps of the (compressed) timeline become jobsets; arrivals are relative to
the window's start. 'random' windows start uniformly among the starts whose window holds a job;
'consecutive' ones are the split's non-empty tiles in time order.

    plan_windows   the split's arrival steps -> WindowPlan (starts, and the most jobs a window holds)
    pad_rows       ragged rows of job indices -> one padded LongTensor
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class WindowPlan:
    """Where a split's windows can start, kept sparse (a trace can span millions of steps).

    starts:       'consecutive': LongTensor[T], the first step of each tile holding a job, in time order.
    intervals:    'random': LongTensor[K, 2], disjoint inclusive ranges [first, last] of the starts whose
                  window holds a job, in time order; interval_end: LongTensor[K], the running count of
                  those starts (interval_end[-1] of them in all).
    most_jobs:    the most jobs any window that can be drawn holds.
    """

    most_jobs: int
    starts: torch.Tensor | None = None
    intervals: torch.Tensor | None = None
    interval_end: torch.Tensor | None = None

    @property
    def count(self) -> int:
        """Consecutive: the non-empty tiles. Random: the starts whose window holds a job."""
        return int(self.starts.numel()) if self.starts is not None else int(self.interval_end[-1])


def most_jobs(arrival: torch.Tensor, starts: torch.Tensor, length: int) -> int:
    """The most of the ascending `arrival` steps (LongTensor[N]) in a window [s, s + length) over the
    starts s (LongTensor[M])."""
    counts = torch.searchsorted(arrival, starts + length) - torch.searchsorted(arrival, starts)
    return int(counts.max())


def merge_intervals(begin: list[int], finish: list[int]) -> torch.Tensor:
    """The union of the inclusive integer ranges [begin[i], finish[i]] (begin ascending) as
    LongTensor[K, 2] of disjoint, non-adjacent ranges in order."""
    intervals, current = [], None
    for b, f in zip(begin, finish):
        if current is not None and b <= current[1] + 1:
            current[1] = max(current[1], f)
        else:
            current = [b, f]
            intervals.append(current)
    return torch.tensor(intervals, dtype=torch.long).view(-1, 2)


def plan_windows(arrival: torch.Tensor, span: tuple[int, int], length: int, windows: str) -> WindowPlan:
    """The starts of the windows of `length` steps over the split's steps span = [lo, hi), from its
    ascending `arrival` steps (LongTensor[N], all in [lo, hi)).

    'consecutive': the tiles [lo + k * length, lo + (k + 1) * length) that hold a job.
    'random': every start s in [lo, max(lo, hi - length)] (the latest keeps the window inside the
    split when it can) whose window [s, s + length) holds a job."""
    lo, hi = span
    if windows == "consecutive":
        starts = torch.unique((arrival - lo) // length) * length + lo
        return WindowPlan(most_jobs(arrival, starts, length), starts=starts)
    last = max(lo, hi - length)
    # a job arriving at a is in the windows starting in [a - length + 1, a], clamped to [lo, last]
    begin = (arrival - length + 1).clamp(min=lo, max=last)
    finish = arrival.clamp(max=last)
    intervals = merge_intervals(begin.tolist(), finish.tolist())
    # the most jobs in a window is reached at a start equal to a job's arrival (or the latest start)
    candidates = torch.unique(arrival.clamp(min=lo, max=last))
    return WindowPlan(most_jobs(arrival, candidates, length), intervals=intervals,
                      interval_end=(intervals[:, 1] - intervals[:, 0] + 1).cumsum(0))


def pad_rows(rows: list[torch.Tensor], width: int, value: int = -1) -> torch.Tensor:
    """LongTensor[len(rows), width]: each 1-D row, then `value`."""
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, :len(row)] = row
    return out

