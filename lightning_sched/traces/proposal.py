"""A cluster at a log's own resolution (units, step length, horizon) that clips fewer than 1% of its jobs.

    propose_cluster(trace, rules, resources=..., capacity=...) -> ClusterProposal (.cluster, .seconds_per_step)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import ClusterConfig
from .files import Trace, TraceError
from .mapping import JobColumns, JobRules, cluster_capacities, drop_reasons, mapped_resources, resource_presence

# Step lengths (seconds) the proposal tries, shortest first: the finest that keeps the log's long jobs
# within the horizon wins (short steps keep short jobs short; each step costs a simulator step)
STEP_LENGTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
# what one unit of an SWF resource is counted in (a CSV column's unit is its own)
UNIT_NAMES = {"processors": "processors", "memory": "KB of memory"}
# resource_units beyond this are refused by the proposal: pick a divisor of the log's processors
MAX_PROPOSED_UNITS = 8192


@dataclass(frozen=True)
class ClusterProposal:
    """A cluster at a log's own resolution (`propose_cluster`): the ClusterConfig, the step length, and
    what they clip. `unit` is the trace quantity (processors, KB, ...) one unit of each resource stands for."""

    cluster: ClusterConfig
    seconds_per_step: float
    jobs: int
    clipped_length: int
    clipped_demand: int
    unit: dict[str, float]
    sized_share: float = 1.0

    @property
    def clipped_fraction(self) -> float:
        """Share of the jobs cut to max_job_len or max_job_units (an upper bound: a job cut in both counts twice)."""
        return (self.clipped_length + self.clipped_demand) / self.jobs

    def describe(self) -> str:
        c = self.cluster
        units = ", ".join(f"1 unit = {v:g} {UNIT_NAMES.get(k, k)}" for k, v in self.unit.items())
        return (f"proposed cluster: --num_resources {c.num_resources} --resource_units {c.resource_units} "
                f"--max_job_units {c.max_job_units} "
                f"--seconds_per_step {self.seconds_per_step:g} --max_job_len {c.max_job_len} --horizon {c.horizon} "
                f"--max_time {c.max_time} ({units}); clips {self.clipped_length} jobs by length and "
                f"{self.clipped_demand} by demand of {self.jobs} ({100 * self.clipped_fraction:.3g}%)"
                + ("" if self.sized_share == 1 else
                   f" submitted in the first {100 * self.sized_share:.3g}% of the log's time span (the train split)"))


def propose_cluster(trace: Trace, rules: JobRules = JobRules(), *, resources: tuple[str, ...] | None = None,
                    capacity: dict | tuple | None = None, num_resources: int | None = None,
                    resource_units: int | None = None,
                    seconds_per_step: float | None = None, max_clipped: float = 0.01, max_horizon: int = 128,
                    simu_len: int = 50, sized_share: float = 1.0) -> ClusterProposal:
    """A cluster that replays `trace` at its own resolution, clipping fewer than `max_clipped` of its jobs.

    The jobs are the job lines `rules` keeps; `resources`, `capacity` and `num_resources` map the trace
    onto the cluster as TraceWorkload's fields of those names do (`mapped_resources`, `cluster_capacities`).
    num_resources: by default as many as the log's resources up to the last one some job gives (`resources`,
    else the format's): 1 for a processors-only log, whose second resource would be demand 0 throughout.
    resource_units: the log's processors (the capacity of its first resource: MaxProcs, or
    --trace_capacity), or the divisor given; demands are whole units of capacity / resource_units.
    seconds_per_step: the shortest of STEP_LENGTHS (or the one given) at which fewer than max_clipped
    of the jobs are longer than a max_job_len <= max_horizon; max_job_len is the shortest such length,
    the horizon a third more (room to reserve ahead; at most max_horizon), max_time
    max(1000, 4 (simu_len + horizon)) so that windows drain. Other ClusterConfig fields: the defaults.
    sized_share: only jobs submitted in the first sized_share of the kept jobs' time span size the
    cluster (1 - test_fraction: the train split, so that a test split's jobs never choose its size).
    Raises TraceError when no step length keeps the clipping under max_clipped.
    """
    path = trace.path
    if num_resources is None:
        every = mapped_resources(trace, resources, len(resources if resources is not None else trace.resources))
        given = [i for i, flag in enumerate(resource_presence(trace, every).values()) if flag]
        num_resources = given[-1] + 1 if given else 1
    names = mapped_resources(trace, resources, num_resources)
    capacity = cluster_capacities(path, trace, names, resource_presence(trace, names), capacity)
    first = next(iter(capacity))
    units = resource_units if resource_units is not None else round(capacity[first])
    if not isinstance(units, int) or not 1 <= units <= MAX_PROPOSED_UNITS:
        raise TraceError(f"{path}: {units} units of {first!r} (capacity {capacity[first]:g}); pass "
                         f"--resource_units N (1..{MAX_PROPOSED_UNITS}), N units of capacity / N each")
    jobs = JobColumns.of(trace, names, capacity)
    keep = drop_reasons(jobs, rules) < 0
    if not 0 < sized_share <= 1:
        raise TraceError(f"{path}: sized_share must be in (0, 1], got {sized_share!r}")
    if sized_share < 1 and bool(keep.any()):  # the train split's jobs, up to its rounding to whole steps
        first, last = jobs.submit[keep].min(), jobs.submit[keep].max()
        if last > first:
            keep &= jobs.submit - first < sized_share * (last - first)
    if not bool(keep.any()):
        raise TraceError(f"{path}: no job to size the cluster by (every job line is dropped)")
    given = jobs.given()
    caps = torch.tensor([jobs.capacity[k] for k in given], dtype=torch.float64)
    clipped_demand = int(((jobs.demand[:, given] > caps * (1 + 1e-9)).any(1) & keep).sum())
    runs = jobs.run_time[keep]
    allowed = math.ceil(max_clipped * len(runs)) - 1 - clipped_demand  # strictly fewer than max_clipped
    if allowed < 0:
        raise TraceError(f"{path}: {clipped_demand} of {len(runs)} jobs ask for more than the capacity "
                         f"{capacity}, {max_clipped:g} of them or more; raise --trace_capacity, or --max_clipped to "
                         "let that many be cut (--oversize drop: dropped, counted)")
    for step in (seconds_per_step,) if seconds_per_step is not None else STEP_LENGTHS:
        steps = torch.ceil(runs / step - 1e-9).clamp(min=1).sort().values
        length = int(steps[len(steps) - 1 - allowed])  # all but `allowed` jobs are at most this long
        if length <= max_horizon:
            break
    else:
        raise TraceError(f"{path}: no step length in {STEP_LENGTHS if seconds_per_step is None else step} "
                         f"keeps {len(runs) - allowed} of {len(runs)} jobs within max_horizon={max_horizon} "
                         f"steps; pass a longer --seconds_per_step or a larger max_horizon")
    horizon = min(max_horizon, max(length, math.ceil(4 * length / 3)))
    cluster = ClusterConfig(num_resources=num_resources, resource_units=units, max_job_units=units,
                            horizon=horizon, max_job_len=length, max_time=max(1000, 4 * (simu_len + horizon)),
                            observation="none")
    return ClusterProposal(cluster, float(step), len(runs), int((steps > length).sum()), clipped_demand,
                           {k: v / units for k, v in capacity.items()}, sized_share)

