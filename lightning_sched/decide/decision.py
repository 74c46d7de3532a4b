"""One decision on one snapshot, under the queue environment's own rules (docs/hpc_queue.md), so that
a policy makes the same choices in a scheduler's hook as in training:

1. If the snapshot carries a held pick that now fits, it starts.
2. While jobs wait and nothing is held: the policy scores the jobs of the window it was trained with
   (the whole queue up to `window` jobs; past that, RLScheduler's alternation of shortest-requested
   and smallest jobs) and picks the highest score. A pick that fits starts now and the next pick
   follows at once; one that does not fit is held: nothing else starts before it (backfilling off),
   or EASY backfilling starts the waiting jobs, in FCFS order, that fit now and whose requested
   time ends before the held job's reserved start (its shadow time).
3. A held pick not yet fitting: under EASY one backfilling pass with its shadow, else nothing. A
   shadow that has passed (a running job outlived its expected end) is computed again, with such
   jobs ending now at the earliest (a scheduler ends a job at its time limit): the held job may
   fit any moment, so nothing that would outlast now backfills. The environment keeps its first
   shadow, as RLScheduler does; the two differ only when jobs run past their requested time.
A held pick that is no longer waiting (cancelled, or started by the scheduler) is let go and named
in the answer ("held_not_waiting").

The answer also ranks every waiting job by its score ("order"): a priority list for schedulers
that start jobs themselves. With more than `window` jobs waiting, the first of "order" may lie
outside the window, and the pick is the best-scored job of the window.

A policy that decides through the environment's own observation (an ObservingScorer:
policies.ObservingPolicy, for the rules, searched rules and networks reading rule ranks or fit
delays) makes step 2's picks itself: a reserving one may start a job its ranking does not put
first. Its "order" is its ranking of the window, then the jobs beyond the window in FCFS order with
null scores (a rule's window is the whole queue).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from ..config import is_int
from ..queue.config import BACKFILL, QUEUE_WINDOWS
from .snapshot import Snapshot, SnapshotError, read_snapshot


class Scorer(Protocol):
    """A policy as decide() uses it: scores (float [N], higher first) of N jobs' features."""

    config: dict
    """The QueueConfig fields the policy trained with (window, max_wait, max_requested, backfill)."""

    def __call__(self, job_features: np.ndarray, cluster_features: np.ndarray) -> np.ndarray:
        """job_features float32 [N, 4] (wait / max_wait, requested / max_requested, processor share,
        fits now), cluster_features float32 [2] (free node share, log1p(queue) / log1p(4 window))."""


class ObservingScorer(Protocol):
    """A policy that decides through the queue environment's own observation of the snapshot
    (policies.ObservingPolicy: rules, searched rules, networks reading rule ranks or fit delays);
    decide() tells one from a Scorer by its `pick`."""

    config: dict
    """As a Scorer's; "window" None for a policy that sees the whole queue."""

    def ranking(self, snap: Snapshot, waiting: np.ndarray, window: int | None, clock_start: float | None) -> tuple:
        """(the waiting jobs' indices, highest priority first; their scores, NaN where it scored none)."""

    def pick(self, snap: Snapshot, waiting: np.ndarray, window: int | None, clock_start: float | None) -> int:
        """The waiting job it starts next, the jobs not `waiting` (bool [Q]) having started now."""


class Window:
    """The jobs the policy sees, in slot order, as the environment's window (step_torch.window_torch):
    every waiting job up to `width`, in FCFS order; past it the `width` smallest keys
    min(2 * SJF rank, 2 * smallest rank + 1) among the waiting jobs (ranks by requested time, and by
    processors, ties in FCFS order). Both orders are sorted once a snapshot. Only a job among the
    first `width` waiting of either order can hold one of the `width` smallest keys (the first
    `width` of the SJF order alone hold keys below 2 * width), so a view sorts and reads only those
    prefixes (width + jobs started), beside a count of the waiting jobs."""

    def __init__(self, snap: Snapshot, width: int):
        self.width = width
        self.orders = [np.argsort(snap.requested, kind="stable"), np.argsort(snap.processors, kind="stable")]

    def __call__(self, waiting: np.ndarray) -> np.ndarray:
        """Slot order of the window, int64 [<= width], from `waiting` (bool [Q], the jobs still waiting)."""
        count = int(np.count_nonzero(waiting))
        if count <= self.width:
            return np.flatnonzero(waiting)
        reach = self.width + len(waiting) - count  # each job no longer waiting hides one place of a prefix
        firsts = []
        for order in self.orders:
            prefix = order[:reach]
            firsts.append(prefix[waiting[prefix]][:self.width])  # the first `width` waiting, ranks 0, 1, ...
        jobs = np.concatenate(firsts)
        keys = np.concatenate([2 * np.arange(len(firsts[0])), 2 * np.arange(len(firsts[1])) + 1])
        jobs = jobs[np.argsort(keys)]  # keys are distinct: even ones from one order, odd ones from the other
        _, first_place = np.unique(jobs, return_index=True)  # a job in both orders keeps its smaller key
        return jobs[np.sort(first_place)][:self.width]


def features(jobs: np.ndarray, snap: Snapshot, free_nodes: int, queue: int, cfg: dict) -> tuple[np.ndarray, ...]:
    """What the policy reads (the environment's observation, step.observe): float32 [N, 4] and [2]."""
    job_features = np.stack([(snap.now - snap.submit[jobs]) / cfg["max_wait"],
                             snap.requested[jobs] / cfg["max_requested"],
                             snap.processors[jobs] / float(snap.capacity),
                             (snap.nodes_needed[jobs] <= free_nodes).astype(np.float64)], -1).astype(np.float32)
    queue_share = np.log1p(float(queue)) / np.log1p(QUEUE_WINDOWS * float(cfg["window"]))
    cluster = np.array([free_nodes / snap.nodes, queue_share], dtype=np.float32)
    return job_features, cluster


def decide(snapshot: dict | Snapshot, scorer: Scorer | ObservingScorer, backfill: str | None = None,
           window: int | None = None, clock_start: float | None = None) -> dict:
    """The decision on one snapshot (a dict as docs/deploy.md shows, or a read `Snapshot`):

        {"order": [waiting ids, highest score first], "scores": [their scores],
         "start_now": [ids to start now, in start order], "backfilled": [those of them backfilled],
         "held": {"id": the pick waiting for nodes, "shadow": its reserved start} or None,
         "held_not_waiting": the passed-back held id when that job no longer waits (only then)}

    `backfill` ('off' / 'easy') and `window` default to the policy's own. Pass "held" back in the next
    snapshot: the policy keeps its pick until it fits, as in the environment. `scorer` may instead be
    an ObservingScorer, whose "scores" are null for jobs outside its window; `clock_start` (seconds on
    the snapshot's clock) is where the log's time 0 is, for those of them that read submit times or
    the time of day. SnapshotError (one line naming the field) for a bad snapshot."""
    snap = snapshot if isinstance(snapshot, Snapshot) else read_snapshot(snapshot)
    cfg = dict(scorer.config)
    backfill = cfg.get("backfill", "off") if backfill is None else backfill
    if backfill not in BACKFILL:
        raise SnapshotError(f"backfill: must be one of {', '.join(BACKFILL)}, got {backfill!r}")
    observing = hasattr(scorer, "pick")  # an ObservingScorer
    if window is not None:
        if not is_int(window, 1):
            raise SnapshotError(f"window: must be an integer >= 1, got {window!r}")
        if cfg["window"] is None:
            raise SnapshotError(f"window: a rule sees the whole queue, as in the environment; got {window}")
        cfg["window"] = window
    waiting = np.ones(len(snap.waiting_id), dtype=bool)
    free = snap.free_nodes
    # for shadow times: a job past its expected end ends now at the earliest
    ends, holding = list(np.maximum(snap.running_end, snap.now)), list(snap.running_nodes)
    started, backfilled = [], []

    def start(job: int) -> None:
        nonlocal free
        waiting[job] = False
        free -= int(snap.nodes_needed[job])
        ends.append(snap.now + snap.requested[job])
        holding.append(int(snap.nodes_needed[job]))
        started.append(job)

    everyone = np.arange(len(snap.waiting_id))
    if not len(everyone):
        order, ordered_scores = everyone, np.zeros(0)
    elif observing:
        order, ordered_scores = scorer.ranking(snap, waiting, cfg["window"], clock_start)
    else:
        all_scores = scorer(*features(everyone, snap, free, len(everyone), cfg))
        order = np.argsort(-all_scores.astype(np.float64), kind="stable")  # ties in FCFS order
        ordered_scores = all_scores[order]
    view = None if observing else Window(snap, cfg["window"])
    held, shadow = snap.held, snap.shadow
    if held is not None and snap.nodes_needed[held] <= free:
        start(held)
        held = None
    elif held is not None and shadow <= snap.now:
        shadow = _shadow(ends, holding, free, int(snap.nodes_needed[held]))
    while held is None and waiting.any():
        if observing:
            pick = scorer.pick(snap, waiting, cfg["window"], clock_start)
        else:
            slots = view(waiting)
            if len(started) == 0 and len(slots) == len(everyone):  # the first view of a queue within the window
                scores = all_scores
            else:
                scores = scorer(*features(slots, snap, free, int(waiting.sum()), cfg))
            pick = int(slots[int(np.argmax(scores))])  # the first best, as the environment's argmax
        if snap.nodes_needed[pick] <= free:
            start(pick)
            continue
        held, shadow = pick, _shadow(ends, holding, free, int(snap.nodes_needed[pick]))
    if held is not None and backfill == "easy":  # FCFS order; free nodes only shrink, so one pass suffices
        ends_in_time = waiting & (snap.now + snap.requested < shadow)
        ends_in_time[held] = False
        for job in np.flatnonzero(ends_in_time):
            if snap.nodes_needed[job] <= free:
                start(int(job))
                backfilled.append(int(job))
    ids = snap.waiting_id
    return {"order": [ids[k] for k in order], "scores": [None if np.isnan(x) else float(x) for x in ordered_scores],
            "start_now": [ids[k] for k in started], "backfilled": [ids[k] for k in backfilled],
            "held": None if held is None else {"id": ids[held], "shadow": shadow},
            **({} if snap.held_not_waiting is None else {"held_not_waiting": snap.held_not_waiting})}


def _shadow(ends: list, holding: list, free: int, need: int) -> float:
    """EASY's reserved start of a job of `need` nodes: the expected end of the running job at which,
    counting running jobs by expected end, enough nodes are free."""
    for k in np.argsort(np.asarray(ends, dtype=np.float64), kind="stable"):
        free += holding[k]
        if free >= need:
            return float(ends[k])
    raise SnapshotError(f"processors: a job needs {need} nodes, more than the cluster frees")
