"""A log replayed through decide() as a scheduler would call it: one snapshot at every event (an
arrival, or one job ending) where the policy has something to decide, the answer's jobs started at
once, the held pick passed back. It runs the queue environment's event order (docs/hpc_queue.md:
arrivals win ties, jobs ending in the same second end in start order), so with the same policy it
gives the environment's schedule: a check of the service path, and a dry run of a policy on a site's
own log before it is wired in."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .decision import decide


def replay(jobs: dict[str, np.ndarray], nodes: int, processors_per_node: int, scorer, backfill: str | None = None,
           window: int | None = None, on_decision: Callable[[dict, dict], None] | None = None,
           clock_start: float = 0) -> np.ndarray:
    """Start times (int64 [L]) of the jobs `jobs` ("submit", "run", "requested", "processors": int
    arrays [L] in arrival order) on a cluster of `nodes` x `processors_per_node`, each decision taken
    by decide(snapshot, scorer, backfill, window, clock_start) (the snapshots are on the jobs' clock,
    whose 0 is the log's: `clock_start` 0); `on_decision(snapshot, answer)` sees each one."""
    submit, run, requested, processors = (np.asarray(jobs[k], dtype=np.int64)
                                          for k in ("submit", "run", "requested", "processors"))
    length = len(submit)
    start = np.full(length, -1, dtype=np.int64)
    rank = np.full(length, -1, dtype=np.int64)
    capacity = {"nodes": nodes, "processors_per_node": processors_per_node}
    time, waiting, running, arrived, held = int(submit[0]), [0], [], 1, None

    def release() -> None:
        """The running job that ends first (ties: the one started first) ends; time moves to its end."""
        nonlocal time
        end = start[running] + run[running]
        first = min(range(len(running)), key=lambda k: (end[k], rank[running[k]]))
        time = max(time, int(end[first]))
        running.pop(first)

    def arrive() -> None:
        nonlocal time, arrived
        time = max(time, int(submit[arrived]))
        waiting.append(arrived)
        arrived += 1

    def arrival_first() -> bool:
        """The next event is an arrival: one is left and it comes no later than the first end."""
        return arrived < length and (not running or submit[arrived] <= min(start[j] + run[j] for j in running))

    while True:
        snapshot = {"now": time, "capacity": capacity,
                    "running": [{"id": int(j), "processors": int(processors[j]),
                                 "expected_end": int(start[j] + requested[j])} for j in running],
                    "waiting": [{"id": int(j), "submit": int(submit[j]), "requested_time": int(requested[j]),
                                 "processors": int(processors[j])} for j in waiting],
                    "held": held}
        answer = decide(snapshot, scorer, backfill, window, clock_start)
        if on_decision is not None:
            on_decision(snapshot, answer)
        for job in map(int, answer["start_now"]):
            start[job], rank[job] = time, int((rank >= 0).sum())
            waiting.remove(job)
            running.append(job)
        held = answer["held"]
        if waiting:  # a held pick: the next event, then the policy again
            arrive() if arrival_first() else release()
            continue
        if arrived == length:
            return start
        while not arrival_first():  # an empty queue: time runs to the next arrival
            release()
        arrive()
