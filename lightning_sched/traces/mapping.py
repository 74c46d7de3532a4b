"""A parsed trace mapped onto a virtual cluster: resources, capacities, which jobs are kept, their
size in steps and units, and the timeline (load, compression, arrival steps, train/test split).

With S = seconds_per_step and c = time compression:

    arrival step  = floor((submit - first submit) / (c * S))       (relative to the trace's first kept job)
    duration      = max(1, ceil(run_time / S))                     (a 0 s job still takes one step)
    demand units  = ceil(demand / capacity * resource_units)       (per resource; capacity = the virtual cluster's)

A job longer than `max_job_len` or with more units than `max_job_units` is clipped to the limit or
dropped (`oversize`); either way it is counted, never silently. A job whose status is not kept, or
whose submit time, run time or demand is unknown (-1), is dropped and counted. Pure functions, in
the order `TraceWorkload` calls them:

    mapped_resources                      the trace resources mapped to the cluster's, in order
    resource_presence, zero_demand_note   which cluster resources get demand 0 (a TraceWarning)
    cluster_capacities                    the virtual cluster's total per trace resource
    select_jobs                           drop (JobRules), size and clip (JobSizing) every job line -> KeptJobs
    offered_load, compression_for         the kept trace's load at c = 1, and c for a target_load
    arrival_steps                         submit times -> steps of the compressed timeline
    split_rows                            the train / test / all step range and its jobs
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import is_finite
from .files import SWF_RESOURCES, Trace, TraceError

DROP_REASONS = ("status", "unknown_submit", "unknown_run_time", "zero_run_time", "unknown_demand", "zero_demand",
                "too_long", "too_large")
CLIP_REASONS = ("length", "demand")
# Arrival steps beyond this are refused: they would not fit the int64 arithmetic of an episode.
MAX_STEP = 2 ** 40


class TraceWarning(UserWarning):
    """Something the mapping did on purpose that the user should know (e.g. a resource missing)."""


def mapped_resources(trace: Trace, resources: tuple[str, ...] | None, num_resources: int) -> tuple[str, ...]:
    """The trace resources mapped to the cluster's, in order: `resources`, else SWF's first
    `num_resources` (a CSV trace's demand columns). Raises TraceError for a name the trace lacks or
    more names than the cluster has resources."""
    if resources is not None:
        names = tuple(resources)
    else:
        names = SWF_RESOURCES[:num_resources] if trace.format == "swf" else trace.resources
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # two cluster resources fed by one trace column would count its use twice
        raise TraceError(f"{trace.path}: trace resource {repeated[0]!r} is named twice in {names}; each trace "
                         "resource maps to one cluster resource")
    unknown = [n for n in names if n not in trace.resources]
    if unknown:
        raise TraceError(f"{trace.path}: {trace.format.upper()} resources are {trace.resources}, got {unknown}")
    if len(names) > num_resources:
        raise TraceError(f"{trace.path}: {len(names)} trace resources {names} for a cluster of "
                         f"num_resources={num_resources}")
    return names


# ----- resources and capacities ----------------------------------------------------------------
def resource_presence(trace: Trace, names: tuple[str, ...]) -> dict[str, bool]:
    """{name: whether any job of the trace gives it} for the mapped trace resources `names`, in order."""
    flags = dict(zip(trace.resources, trace.present))
    return {n: flags[n] for n in names}


def zero_demand_resources(names: tuple[str, ...], present: dict[str, bool], num_resources: int) -> list[int]:
    """Indices of the cluster resources whose demand is always 0: mapped trace resources no job gives,
    then the cluster resources beyond the `names` mapped."""
    return [i for i, n in enumerate(names) if not present[n]] + list(range(len(names), num_resources))


def zero_demand_note(names: tuple[str, ...], present: dict[str, bool], num_resources: int) -> str | None:
    """Why some cluster resources get demand 0 (the TraceWarning's text after the file name), or None
    when every one of the `num_resources` gets a trace resource some job gives."""
    missing = num_resources - sum(present.values())
    if not missing:
        return None
    absent = [n for n in names if not present[n]]
    what = []
    if absent:
        what.append(f"{absent} unknown (-1) for every job")
    if len(names) < num_resources:
        what.append(f"only {len(names)} trace resources {names} for {num_resources} cluster resources")
    return f"{missing} of the cluster's {num_resources} resources get demand 0 ({'; '.join(what)})"


def _given_capacities(path: str, names: tuple[str, ...], capacity: dict | tuple | None) -> dict:
    """`capacity` as {trace resource: value}: a dict is checked for unknown names, values are taken
    in `names` order. Values are not checked here."""
    if capacity is None:
        return {}
    if isinstance(capacity, dict):
        extra = [k for k in capacity if k not in names]
        if extra:
            raise TraceError(f"{path}: capacity given for {extra}, which are not among the trace resources {names}")
        return dict(capacity)
    values = tuple(capacity)
    if len(values) != len(names):
        raise TraceError(f"{path}: {len(values)} capacities for the trace resources {names}")
    return dict(zip(names, values))


def _header_processors(header: dict[str, str]) -> float | None:
    """An SWF header's MaxProcs, else MaxNodes, as a number (its first word); None if neither reads
    as one > 0 (SWF writes -1 for unknown)."""
    for key in ("MaxProcs", "MaxNodes"):
        try:
            value = float(header[key].split()[0])
        except (KeyError, ValueError, IndexError):
            continue
        if value > 0:
            return value
    return None


# a capacity this many times the largest job's demand is no machine the jobs ran on
MAX_CAPACITY_RATIO = 10_000


def cluster_capacities(path: str, trace: Trace, names: tuple[str, ...], present: dict[str, bool],
                       capacity: dict | tuple | None) -> dict[str, float]:
    """The virtual cluster's total per mapped trace resource that some job gives, in the trace's
    units: from `capacity` ({name: value}, or values in `names` order), else, for SWF processors, the
    header's MaxProcs (or MaxNodes). Resources no job gives get none (their demand is 0).
    Raises TraceError for an unknown name, a missing capacity or one that is not a finite number > 0."""
    given = _given_capacities(path, names, capacity)
    out = {}
    for name in names:
        if not present[name]:
            continue
        value = given.get(name)
        if value is None and trace.format == "swf" and name == "processors":
            value = _header_processors(trace.header)
        if value is None:
            raise TraceError(f"{path}: no capacity for resource {name!r}: pass --trace_capacity {name}=N, the "
                             f"cluster's total in the trace's units"
                             f"{' (the SWF header has no MaxProcs or MaxNodes)' if name == 'processors' else ''}")
        if not is_finite(value) or value <= 0:
            raise TraceError(f"{path}: capacity of {name!r} must be a finite number > 0, got {value!r}")
        column = trace.resources.index(name)
        largest = max(d[column] for d in trace.demand)
        if value > MAX_CAPACITY_RATIO * largest:  # every job would round to a vanishing share of the cluster
            raise TraceError(f"{path}: capacity of {name!r} {value:g} is over {MAX_CAPACITY_RATIO:,} times the largest "
                             f"job's demand ({largest:g}): a misread header? pass --trace_capacity {name}=N")
        out[name] = float(value)
    return out


# ----- jobs: drop, size, clip ------------------------------------------------------------------
@dataclass(frozen=True)
class JobRules:
    """Which job lines are jobs (`drop_reasons`), whatever the cluster: TraceWorkload's knobs of the
    same names and defaults. `statuses` is kept as a frozenset of floats (None: every known status)."""

    statuses: frozenset[float] | tuple | None = (1,)
    keep_unknown_status: bool = True
    keep_zero_run_time: bool = False

    def __post_init__(self) -> None:
        if self.statuses is not None:  # SWF statuses are read as floats
            object.__setattr__(self, "statuses", frozenset(float(s) for s in self.statuses))


@dataclass(frozen=True)
class JobSizing:
    """How `select_jobs` sizes the kept jobs for a cluster: TraceWorkload's knobs of the same names."""

    seconds_per_step: float
    oversize: str
    num_resources: int
    resource_units: int
    max_job_len: int
    max_job_units: int


@dataclass
class KeptJobs:
    """The jobs `select_jobs` kept, sorted by submit time (ties in file order), and what it did to the rest.

    submit:   N submit times (trace seconds), ascending; line: the file line of each; wait: N waits
              from submit to start (trace seconds, -1 unknown).
    duration: LongTensor[N], steps in [1, max_job_len]; demand: LongTensor[N, num_resources], units in
              [0, max_job_units].
    dropped:  jobs dropped per reason (DROP_REASONS, in that order); clipped: kept jobs cut to a limit per
              reason (CLIP_REASONS); a job cut in both length and demand counts in each; cut_jobs: the
              kept jobs cut in either (each once).
    """

    submit: list[float]
    line: list[int]
    duration: torch.Tensor
    demand: torch.Tensor
    dropped: dict[str, int]
    clipped: dict[str, int]
    wait: list[float]
    cut_jobs: int = 0


@dataclass
class JobColumns:
    """A trace's job lines as tensors, the demand restricted to the resources mapped to the cluster's.

    status, submit, run_time: DoubleTensor[N] (-1 unknown); demand: DoubleTensor[N, K], one column per
    mapped trace resource; capacity: K capacities, None for a resource no job gives."""

    status: torch.Tensor
    submit: torch.Tensor
    run_time: torch.Tensor
    demand: torch.Tensor
    capacity: list[float | None]

    @classmethod
    def of(cls, trace: Trace, names: tuple[str, ...], capacity: dict[str, float]) -> "JobColumns":
        columns = [trace.resources.index(n) for n in names]
        demand = torch.tensor(trace.demand, dtype=torch.float64).view(trace.num_jobs, len(trace.resources))
        return cls(torch.tensor(trace.status, dtype=torch.float64), torch.tensor(trace.submit, dtype=torch.float64),
                   torch.tensor(trace.run_time, dtype=torch.float64), demand[:, columns],
                   [capacity.get(n) for n in names])

    def given(self) -> list[int]:
        """The demand columns of resources some job gives (a capacity that is not None)."""
        return [k for k, cap in enumerate(self.capacity) if cap is not None]


def drop_reasons(jobs: JobColumns, rules: JobRules) -> torch.Tensor:
    """Why each job is dropped before it is sized, as an index into DROP_REASONS (the first that
    applies, in that order), -1 to keep it: LongTensor[N]. An unknown (-1) demand on a resource no
    job gives does not drop the job."""
    unknown_status, given = jobs.status == -1, jobs.given()
    if rules.statuses is None:
        bad_status = torch.zeros_like(unknown_status)
    else:
        bad_status = ~torch.isin(jobs.status, torch.tensor(sorted(rules.statuses), dtype=torch.float64))
    tests = {"status": unknown_status if not rules.keep_unknown_status else torch.zeros_like(unknown_status),
             "unknown_submit": jobs.submit == -1,
             "unknown_run_time": jobs.run_time == -1,
             "zero_run_time": (jobs.run_time == 0) & (not rules.keep_zero_run_time),
             "unknown_demand": (jobs.demand[:, given] == -1).any(1),
             # a job that takes nothing is no real job (SWF writes 0 processors for an unknown count), and one
             # the scheduler could never delay: dropped as the queue env's log reading drops it
             "zero_demand": (jobs.demand[:, given] == 0).all(1) if given else torch.zeros_like(unknown_status)}
    tests["status"] = torch.where(unknown_status, tests["status"], bad_status)
    reason = torch.full(jobs.status.shape, -1, dtype=torch.long)
    for name in reversed(tests):  # the first reason that applies is the one counted
        reason[tests[name]] = DROP_REASONS.index(name)
    return reason


def _ceil(x: torch.Tensor) -> torch.Tensor:
    # ceil with a tolerance for binary rounding (12.8 * 10 / 128 must be 1, not 2)
    return torch.ceil(x - 1e-9).long()


def size_jobs(jobs: JobColumns, sizing: JobSizing) -> tuple[torch.Tensor, torch.Tensor]:
    """(duration LongTensor[N], units LongTensor[N, num_resources]) before the limits:
    max(1, ceil(run_time / S)) steps and ceil(demand / capacity * resource_units) units; 0 units for a
    resource with no capacity (no job gives it) and for the cluster resources beyond the mapped ones.
    Each is capped at one past its limit (max_job_len + 1, max_job_units + 1): by how much a job is
    over does not matter, and the cap (before ceil) keeps huge values inside int64."""
    duration = _ceil((jobs.run_time / sizing.seconds_per_step).clamp(max=sizing.max_job_len + 1.0)).clamp(min=1)
    units = torch.zeros(len(duration), sizing.num_resources, dtype=torch.long)
    for k, cap in enumerate(jobs.capacity):
        if cap is not None:
            units[:, k] = _ceil((jobs.demand[:, k] / cap * sizing.resource_units).clamp(max=sizing.max_job_units + 1.0))
    return duration, units


def select_jobs(path: str, trace: Trace, names: tuple[str, ...], capacity: dict[str, float], rules: JobRules,
                sizing: JobSizing) -> KeptJobs:
    """Every job line of `trace` either dropped (counted by reason: before sizing, then with
    oversize='drop' 'too_long' before 'too_large') or sized, clipped to max_job_len and max_job_units
    (counted per limit) and kept. `names` are the trace resources mapped to the cluster's, in order;
    `capacity` has those some job gives. Raises TraceError when no job is kept."""
    jobs = JobColumns.of(trace, names, capacity)
    reason = drop_reasons(jobs, rules)
    duration, units = size_jobs(jobs, sizing)
    too_long, too_large = duration > sizing.max_job_len, units.max(1).values > sizing.max_job_units
    if sizing.oversize == "drop":
        reason = torch.where((reason < 0) & too_long, DROP_REASONS.index("too_long"), reason)
        reason = torch.where((reason < 0) & too_large, DROP_REASONS.index("too_large"), reason)
    keep = reason < 0
    counts = torch.bincount(reason[~keep], minlength=len(DROP_REASONS)).tolist()
    dropped = dict(zip(DROP_REASONS, counts))
    if not bool(keep.any()):
        raise TraceError(f"{path}: no job fits the cluster: {trace.num_jobs} job lines, all dropped "
                         f"({', '.join(f'{k} {v}' for k, v in dropped.items() if v)})")
    clipped = {"length": int((too_long & keep).sum()), "demand": int((too_large & keep).sum())}
    kept = keep.nonzero().squeeze(1)
    kept = kept[torch.sort(jobs.submit[kept], stable=True).indices]  # equal submit times keep file order
    line, wait = torch.tensor(trace.line), torch.tensor(trace.wait, dtype=torch.float64)
    return KeptJobs(jobs.submit[kept].tolist(), line[kept].tolist(), duration[kept].clamp(max=sizing.max_job_len),
                    units[kept].clamp(max=sizing.max_job_units), dropped, clipped, wait[kept].tolist(),
                    int(((too_long | too_large) & keep).sum()))


# ----- time: load, compression, arrivals, split --------------------------------------------------
def offered_load(duration: torch.Tensor, demand: torch.Tensor, steps: float, resource_units: int) -> list[float]:
    """Per cluster resource, the unit-steps the jobs ask for over the capacity of `steps` steps:
    sum(duration x units) / (steps x resource_units). duration LongTensor[N], demand LongTensor[N, R]
    -> R floats."""
    work = (duration.unsqueeze(1) * demand).sum(0).double()  # [R] unit-steps offered
    return (work / (steps * resource_units)).tolist()


def span_steps(submit: list[float], seconds_per_step: float) -> float:
    """The steps (at c = 1) from the first to the last of the ascending `submit` times, at least 1:
    the time range the kept trace's natural load is measured over."""
    return max(1.0, (submit[-1] - submit[0]) / seconds_per_step)


def compression_for(path: str, natural: list[float], target_load: float | None, time_compression: float) -> float:
    """The time compression c: `time_compression`, or the c that brings the largest natural load (the
    bottleneck resource's, at c = 1) to `target_load`. Raises TraceError when no job demands anything."""
    if target_load is None:
        return time_compression
    if max(natural) <= 0:
        raise TraceError(f"{path}: no job demands any resource; target_load={target_load} cannot be reached")
    return target_load / max(natural)


def arrival_steps(path: str, submit: list[float], line: list[int], seconds_per_step: float, compression: float
                  ) -> torch.Tensor:
    """LongTensor[N]: floor((submit - submit[0]) / (c * S)) for the ascending `submit` times (trace
    seconds). Raises TraceError, naming the file `line`, for a step at or beyond MAX_STEP."""
    origin = submit[0]
    arrival = []
    for t, number in zip(submit, line):
        step = (t - origin) / (compression * seconds_per_step)
        if not step < MAX_STEP:  # also catches inf from an extreme compression
            raise TraceError(f"{path}, line {number}: submit time {t:g} maps to step {step:g}, beyond "
                             f"{MAX_STEP} (seconds_per_step={seconds_per_step:g}, compression={compression:g})")
        arrival.append(math.floor(step))
    return torch.tensor(arrival, dtype=torch.long)


def split_rows(path: str, arrival: torch.Tensor, split: str, test_fraction: float
               ) -> tuple[tuple[int, int], torch.Tensor]:
    """The split's steps [lo, hi) and its jobs (BoolTensor[N]) among the ascending `arrival` steps.

    The kept trace spans [0, end), end = the last arrival + 1; train is [0, cut), test [cut, end),
    all [0, end), with cut = floor((1 - test_fraction) * end) kept within [1, end - 1] (cut = 1 when
    end = 1). Raises TraceError when the split holds no job."""
    end = int(arrival[-1]) + 1
    cut = max(1, min(end - 1, math.floor((1 - test_fraction) * end))) if end > 1 else 1
    lo, hi = {"all": (0, end), "train": (0, cut), "test": (cut, end)}[split]
    rows = (arrival >= lo) & (arrival < hi)
    if not bool(rows.any()):
        raise TraceError(f"{path}: the {split} split (steps [{lo}, {hi}) of the trace's [0, {end})) holds no "
                         f"job; change test_fraction={test_fraction} (or the trace spans too few steps)")
    return (lo, hi), rows

