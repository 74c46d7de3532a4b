"""Real job traces as workloads: a parsed trace mapped onto the cluster and cut into `JobSet` windows.

`lightning_sched.trace_files` reads a Standard Workload Format or CSV file into a `Trace` (the jobs
as recorded). This module maps that onto a virtual cluster (steps, resource units, job limits) and
serves windows of it through the workload protocol: `TraceWorkload`, which `ClusterEnv`, `evaluate`
and the scripts take like `DeepRMWorkload`. `TraceWorkload.report` (a `TraceReport`) says what the
mapping did.

Mapping a job to the cluster, with S = seconds_per_step, c = time compression:

    arrival step  = floor((submit - first submit) / (c * S))       (relative to the trace's first kept job)
    duration      = max(1, ceil(run_time / S))                     (a 0 s job still takes one step)
    demand units  = ceil(demand / capacity * resource_units)       (per resource; capacity = the virtual cluster's)

A job longer than `max_job_len` or with more units than `max_job_units` is clipped to the limit or
dropped (`oversize`); either way it is counted in `report`, never silently. A job whose status is
not kept, or whose submit time, run time or demand is unknown (-1), is dropped and counted.
Windows of `simu_len` steps of the (compressed) timeline become jobsets; arrivals are relative to
the window's start. By default a window starts as the log was at its first step: jobs recorded
running then (started before, ending after: submit + wait + run time) hold their resources until
their recorded end, and jobs submitted but not yet started wait in the queue at step 0
(`start_state="log"`; "empty" starts idle). `propose_cluster` proposes a cluster at the log's own
resolution (units, step length, horizon) that clips fewer than 1% of its jobs.

The mapping is a sequence of pure functions, in the order `TraceWorkload` calls them:

    resource_presence, zero_demand_note   which cluster resources get demand 0 (a TraceWarning)
    cluster_capacities                    the virtual cluster's total per trace resource
    select_jobs                           drop, size and clip every job line, counted by reason -> KeptJobs
    offered_load, compression_for         the kept trace's load at c = 1, and c for a target_load
    arrival_steps                         submit times -> steps of the compressed timeline
    split_rows                            the train / test / all step range and its jobs
    plan_windows                          where windows can start, and the most jobs one holds
    start_steps, LogState                 the recorded schedule, to start windows from the log's state
    most_jobs_from_log, fit_running       job columns with the waiting jobs; running jobs that fit
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config import ClusterConfig, ConfigError
from .jobs import JobSet
from .trace_files import SWF_RESOURCES, Trace, TraceError, read_csv, read_swf, trace_format

OVERSIZE = ("clip", "drop")
SPLITS = ("all", "train", "test")
WINDOWS = ("random", "consecutive")
START_STATES = ("log", "empty")
DROP_REASONS = ("status", "unknown_submit", "unknown_run_time", "zero_run_time", "unknown_demand", "too_long",
                "too_large")
CLIP_REASONS = ("length", "demand")
# Arrival steps beyond this are refused: they would not fit the int64 arithmetic of an episode.
MAX_STEP = 2 ** 40


class TraceWarning(UserWarning):
    """Something the mapping did on purpose that the user should know (e.g. a resource missing)."""


@functools.lru_cache(maxsize=4)
def _read_cached(reader, path: str, stamp: tuple, *args) -> Trace:
    return reader(path, *args)


def read_once(reader, path: str, *args) -> Trace:
    """reader(path, *args), parsed once per file version: a script that proposes a cluster and builds
    its train and test workloads from one log reads it once. The Trace is shared: never modified."""
    try:
        info = Path(path).stat()
        stamp = (info.st_mtime_ns, info.st_size)
    except OSError:  # the reader names the file in its error
        return reader(path, *args)
    return _read_cached(reader, str(path), stamp, *args)


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
    """An SWF header's MaxProcs, else MaxNodes, as a number (its first word); None if neither reads."""
    for key in ("MaxProcs", "MaxNodes"):
        try:
            return float(header[key].split()[0])
        except (KeyError, ValueError, IndexError):
            continue
    return None


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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise TraceError(f"{path}: capacity of {name!r} must be a finite number > 0, got {value!r}")
        out[name] = float(value)
    return out


# ----- jobs: drop, size, clip ------------------------------------------------------------------
@dataclass(frozen=True)
class JobRules:
    """Which jobs `select_jobs` keeps and how it sizes them: TraceWorkload's knobs of the same names,
    except `statuses`, here a set of floats (None: every known status is kept)."""

    seconds_per_step: float
    statuses: frozenset[float] | None
    keep_unknown_status: bool
    keep_zero_run_time: bool
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
              reason (CLIP_REASONS); a job cut in both length and demand counts in each.
    """

    submit: list[float]
    line: list[int]
    duration: torch.Tensor
    demand: torch.Tensor
    dropped: dict[str, int]
    clipped: dict[str, int]
    wait: list[float]


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
    applies: status, then unknown submit, run time, demand, then a 0 s run), -1 to keep it:
    LongTensor[N]. An unknown (-1) demand on a resource no job gives does not drop the job."""
    unknown_status = jobs.status == -1
    if rules.statuses is None:
        bad_status = torch.zeros_like(unknown_status)
    else:
        bad_status = ~torch.isin(jobs.status, torch.tensor(sorted(rules.statuses), dtype=torch.float64))
    tests = {"status": unknown_status if not rules.keep_unknown_status else torch.zeros_like(unknown_status),
             "unknown_submit": jobs.submit == -1,
             "unknown_run_time": jobs.run_time == -1,
             "zero_run_time": (jobs.run_time == 0) & (not rules.keep_zero_run_time),
             "unknown_demand": (jobs.demand[:, jobs.given()] == -1).any(1)}
    tests["status"] = torch.where(unknown_status, tests["status"], bad_status)
    reason = torch.full(jobs.status.shape, -1, dtype=torch.long)
    for name in reversed(tests):  # the first reason that applies is the one counted
        reason[tests[name]] = DROP_REASONS.index(name)
    return reason


def _ceil(x: torch.Tensor) -> torch.Tensor:
    # ceil with a tolerance for binary rounding (12.8 * 10 / 128 must be 1, not 2)
    return torch.ceil(x - 1e-9).long()


def size_jobs(jobs: JobColumns, rules: JobRules) -> tuple[torch.Tensor, torch.Tensor]:
    """(duration LongTensor[N], units LongTensor[N, num_resources]) before the limits:
    max(1, ceil(run_time / S)) steps and ceil(demand / capacity * resource_units) units; 0 units for a
    resource with no capacity (no job gives it) and for the cluster resources beyond the mapped ones.
    Each is capped at one past its limit (max_job_len + 1, max_job_units + 1): by how much a job is
    over does not matter, and the cap (before ceil) keeps huge values inside int64."""
    duration = _ceil((jobs.run_time / rules.seconds_per_step).clamp(max=rules.max_job_len + 1.0)).clamp(min=1)
    units = torch.zeros(len(duration), rules.num_resources, dtype=torch.long)
    for k, cap in enumerate(jobs.capacity):
        if cap is not None:
            units[:, k] = _ceil((jobs.demand[:, k] / cap * rules.resource_units).clamp(max=rules.max_job_units + 1.0))
    return duration, units


def select_jobs(path: str, trace: Trace, names: tuple[str, ...], capacity: dict[str, float], rules: JobRules
                ) -> KeptJobs:
    """Every job line of `trace` either dropped (counted by reason: before sizing, then with
    oversize='drop' 'too_long' before 'too_large') or sized, clipped to max_job_len and max_job_units
    (counted per limit) and kept. `names` are the trace resources mapped to the cluster's, in order;
    `capacity` has those some job gives. Raises TraceError when no job is kept."""
    jobs = JobColumns.of(trace, names, capacity)
    reason = drop_reasons(jobs, rules)
    duration, units = size_jobs(jobs, rules)
    too_long, too_large = duration > rules.max_job_len, units.max(1).values > rules.max_job_units
    if rules.oversize == "drop":
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
    return KeptJobs(jobs.submit[kept].tolist(), line[kept].tolist(), duration[kept].clamp(max=rules.max_job_len),
                    units[kept].clamp(max=rules.max_job_units), dropped, clipped, wait[kept].tolist())


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


# ----- windows -----------------------------------------------------------------------------------
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


# ----- the log's own state at a window's start ---------------------------------------------------
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


def pad_rows(rows: list[torch.Tensor], width: int, value: int = -1) -> torch.Tensor:
    """LongTensor[len(rows), width]: each 1-D row, then `value`."""
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, :len(row)] = row
    return out


# ----- a cluster for a log ------------------------------------------------------------------------
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

    @property
    def clipped_fraction(self) -> float:
        """Share of the jobs cut to max_job_len or max_job_units (an upper bound: a job cut in both counts twice)."""
        return (self.clipped_length + self.clipped_demand) / self.jobs

    def describe(self) -> str:
        c = self.cluster
        units = ", ".join(f"1 unit = {v:g} {UNIT_NAMES.get(k, k)}" for k, v in self.unit.items())
        return (f"proposed cluster: --resource_units {c.resource_units} --max_job_units {c.max_job_units} "
                f"--seconds_per_step {self.seconds_per_step:g} --max_job_len {c.max_job_len} --horizon {c.horizon} "
                f"--max_time {c.max_time} ({units}); clips {self.clipped_length} jobs by length and "
                f"{self.clipped_demand} by demand of {self.jobs} ({100 * self.clipped_fraction:.3g}%)")


def propose_cluster(workload: TraceWorkload | None = None, *, path: str | Path | None = None,
                    resource_units: int | None = None, seconds_per_step: float | None = None,
                    max_clipped: float = 0.01, max_horizon: int = 128, simu_len: int = 50,
                    **params) -> ClusterProposal:
    """A cluster that replays a log at its own resolution, clipping fewer than `max_clipped` of its jobs.

    resource_units: the log's processors (the capacity of its first resource: MaxProcs, or
    --trace_capacity), or the divisor given; demands are whole units of capacity / resource_units.
    seconds_per_step: the shortest of STEP_LENGTHS (or the one given) at which fewer than max_clipped
    of the jobs are longer than a max_job_len <= max_horizon; max_job_len is the shortest such length,
    the horizon a third more (room to reserve ahead; at most max_horizon), max_time
    max(1000, 4 (simu_len + horizon)) so that windows drain. Other ClusterConfig fields: the defaults.
    `params` are TraceWorkload's (capacity, resources, statuses, ...); `path` the trace.
    Raises TraceError when no step length keeps the clipping under max_clipped.
    """
    if workload is None:
        # only the log's jobs and capacities are read off this workload, not its steps or windows; its
        # warnings (resources the log lacks, ...) are the replayed workload's to give, once
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)
            workload = TraceWorkload(path=str(path), seconds_per_step=1.0, simu_len=simu_len, start_state="empty",
                                     **params)
    trace, names = workload.trace, workload.resources
    present = resource_presence(trace, names)
    capacity = cluster_capacities(workload.path, trace, names, present, workload.capacity)
    first = next(iter(capacity))
    units = resource_units if resource_units is not None else round(capacity[first])
    if not isinstance(units, int) or not 1 <= units <= MAX_PROPOSED_UNITS:
        raise TraceError(f"{workload.path}: {units} units of {first!r} (capacity {capacity[first]:g}); pass "
                         f"--resource_units N (1..{MAX_PROPOSED_UNITS}), N units of capacity / N each")
    rules = JobRules(seconds_per_step=1.0, statuses=workload._job_rules().statuses,
                     keep_unknown_status=workload.keep_unknown_status,
                     keep_zero_run_time=workload.keep_zero_run_time, oversize="clip",
                     num_resources=workload.num_resources, resource_units=units, max_job_len=2 ** 62,
                     max_job_units=units)
    jobs = JobColumns.of(trace, names, capacity)
    keep = drop_reasons(jobs, rules) < 0
    if not bool(keep.any()):
        raise TraceError(f"{workload.path}: no job to size the cluster by (every job line is dropped)")
    given = jobs.given()
    caps = torch.tensor([jobs.capacity[k] for k in given], dtype=torch.float64)
    clipped_demand = int(((jobs.demand[:, given] > caps * (1 + 1e-9)).any(1) & keep).sum())
    runs = jobs.run_time[keep]
    allowed = math.ceil(max_clipped * len(runs)) - 1 - clipped_demand  # strictly fewer than max_clipped
    if allowed < 0:
        raise TraceError(f"{workload.path}: {clipped_demand} of {len(runs)} jobs ask for more than the "
                         f"capacity {capacity}; raise --trace_capacity")
    for step in (seconds_per_step,) if seconds_per_step is not None else STEP_LENGTHS:
        steps = torch.ceil(runs / step - 1e-9).clamp(min=1).sort().values
        length = int(steps[len(steps) - 1 - allowed])  # all but `allowed` jobs are at most this long
        if length <= max_horizon:
            break
    else:
        raise TraceError(f"{workload.path}: no step length in {STEP_LENGTHS if seconds_per_step is None else step} "
                         f"keeps {len(runs) - allowed} of {len(runs)} jobs within max_horizon={max_horizon} "
                         f"steps; pass a longer --seconds_per_step or a larger max_horizon")
    horizon = min(max_horizon, max(length, math.ceil(4 * length / 3)))
    cluster = ClusterConfig(num_resources=workload.num_resources, resource_units=units, max_job_units=units,
                            horizon=horizon, max_job_len=length, max_time=max(1000, 4 * (simu_len + horizon)),
                            observation="none")
    return ClusterProposal(cluster, float(step), len(runs), int((steps > length).sum()), clipped_demand,
                           {k: v / units for k, v in capacity.items()})


# ----- the report --------------------------------------------------------------------------------
@dataclass
class TraceReport:
    """What mapping a trace did, for logs and JSON (`to_dict()`). Loads are offered unit-steps over
    capacity-steps per cluster resource, rounded to 4 places."""

    path: str
    """The trace file."""
    format: str
    """'swf' or 'csv'."""
    job_lines: int
    """Jobs in the file."""
    kept: int
    """Jobs left after dropping, over the whole trace (every split)."""
    dropped: dict[str, int]
    """Jobs dropped per reason, DROP_REASONS in order."""
    clipped: dict[str, int]
    """Kept jobs cut to max_job_len ('length') or max_job_units ('demand')."""
    resources: list[str]
    """The trace resources mapped to the cluster's, in order."""
    zero_demand_resources: list[int]
    """Indices of the cluster resources whose demand is always 0."""
    capacity: dict[str, float]
    """The virtual cluster's total per trace resource some job gives, in the trace's units."""
    seconds_per_step: float
    """Trace seconds in one step (S)."""
    natural_load: list[float]
    """Offered load per cluster resource of all kept jobs at c = 1, over their submit range."""
    compression: float
    """The time compression c applied."""
    load: list[float]
    """natural_load x c."""
    split: str
    """'all', 'train' or 'test'."""
    split_jobs: int
    """Kept jobs in the split."""
    split_steps: list[int]
    """The split's steps [lo, hi) on the compressed timeline."""
    split_seconds: list[float]
    """The trace times (seconds) of split_steps."""
    split_load: list[float]
    """Offered load per cluster resource of the split's jobs over its steps."""
    windows: str
    """'random' or 'consecutive'."""
    window_starts: int
    """Random: the starts whose window holds a job. Consecutive: the non-empty tiles."""
    max_jobs: int
    """Job columns of every jobset."""
    start_state: str = "empty"
    """'log' (windows start as the log was: running jobs hold their resources, waiting jobs queue) or 'empty'."""
    unknown_wait: int = 0
    """Kept jobs whose wait is unknown (-1): with start_state 'log', taken to start when submitted."""
    carried: dict = field(default_factory=dict)
    """With start_state 'log', summed over the windows drawn so far: windows, running (jobs holding
    resources at step 0), running_over_capacity (recorded as running but left out: they would overfill
    the cluster), waiting (jobs queued at step 0). Running jobs are no part of the episode's metrics."""

    def to_dict(self) -> dict:
        return asdict(self)


# ----- the workload ------------------------------------------------------------------------------
@dataclass
class TraceWorkload:
    """Jobsets cut out of a real trace: the workload protocol (`sample`, `max_jobs`, `validate`).

    Build it for a cluster with `TraceWorkload.for_cluster(cfg, path, seconds_per_step, ...)`.
    After construction, `report` (a `TraceReport`) holds the counts (jobs read, kept, dropped by
    reason, clipped by reason), the loads and the split's time range; `arrival`, `duration`, `demand`
    hold the kept jobs of the selected split (LongTensor[N], [N], [N, R]) in arrival order.

    Job status (SWF field 11): `statuses` are kept (default (1,), "completed"); -1 (unknown) is
    kept when `keep_unknown_status` (the default: many archive traces, e.g. NASA iPSC, record no
    status at all), else dropped. Everything else is dropped and counted under "status".
    """

    path: str
    """The trace file: .swf, .swf.gz, .csv or .csv.gz."""
    seconds_per_step: float
    """Trace seconds (the trace's time unit) in one time step; e.g. 600."""
    format: str = "auto"
    """'swf', 'csv', or 'auto' (from the file name)."""
    resources: tuple | None = None
    """Trace resources mapped to the cluster's, in order: SWF names ('processors', 'memory'), CSV
    column names. None: SWF's ('processors', 'memory') up to num_resources; required for CSV.
    Cluster resources beyond them, or absent from the trace, get demand 0 (with a TraceWarning)."""
    capacity: dict | tuple | None = None
    """Virtual cluster capacity per trace resource ({name: value} or values in `resources` order),
    in the trace's units; scaled to resource_units. SWF processors default to the header's
    MaxProcs (else MaxNodes); SWF memory is in KB (the cluster's total)."""
    csv_submit: str = "submit_time"
    """CSV column of the submit time."""
    csv_run_time: str = "run_time"
    """CSV column of the run time."""
    csv_status: str | None = None
    """CSV column of the job status (None: no status, every job's is unknown)."""
    csv_wait: str | None = None
    """CSV column of the wait from submit to start (None: unknown, jobs start when submitted)."""
    statuses: tuple | None = (1,)
    """Job statuses kept; None keeps all. SWF: 1 completed, 0 failed, 5 cancelled."""
    keep_unknown_status: bool = True
    """Keep jobs whose status is -1 (unknown)."""
    keep_zero_run_time: bool = False
    """Keep jobs that ran 0 s (as 1-step jobs). Default: drop them, as the Parallel Workloads
    Archive does not count them among a log's valid jobs."""
    oversize: str = "clip"
    """Jobs longer than max_job_len or larger than max_job_units: 'clip' to the limit or 'drop'."""
    split: str = "all"
    """'train' (the earlier 1 - test_fraction of the trace's time range), 'test' (the rest), 'all'."""
    test_fraction: float = 0.25
    """Share of the trace's time range (in steps) held out as the test split, at its end."""
    windows: str = "random"
    """'random': windows start uniformly (per the generator) among starts whose window holds a job;
    'consecutive': the split's tiles [s0 + k*simu_len, s0 + (k+1)*simu_len) in time order, empty
    tiles skipped; successive `sample` calls go on from where the last stopped (wrapping)."""
    simu_len: int = 50
    """Steps per window (jobset). DeepRM: 50."""
    target_load: float | None = None
    """If set, compress (or stretch) time so the whole kept trace's offered load reaches it."""
    time_compression: float = 1.0
    """Factor c by which time between submits shrinks (arrival step = floor(t / (c * S))), so the offered
    load is c times the trace's; c < 1 stretches. See target_load."""
    job_columns: int | None = None
    """Job columns (max_jobs) of every jobset; None: the most jobs any window can hold."""
    start_state: str = "log"
    """'log': a window starts as the log was at its first step: jobs recorded running then (started
    before, ending after) hold their demand until their recorded end (submit + wait + run time), jobs
    submitted but not yet started are waiting at step 0 (before the window's arrivals). 'empty': an
    idle cluster and an empty queue."""
    num_resources: int = 2
    resource_units: int = 10
    max_job_len: int = 15
    max_job_units: int = 10

    @classmethod
    def for_cluster(cls, cfg: ClusterConfig, path: str | Path, seconds_per_step: float, **params) -> TraceWorkload:
        """A TraceWorkload whose mapping uses cfg's resources, units and job limits."""
        return cls(path=str(path), seconds_per_step=seconds_per_step, **params, num_resources=cfg.num_resources,
                   resource_units=cfg.resource_units, max_job_len=cfg.max_job_len, max_job_units=cfg.max_job_units)

    def __post_init__(self) -> None:
        self._check_knobs()
        fmt = trace_format(self.path, self.format)
        if fmt == "swf":
            self.trace = read_once(read_swf, self.path)
            names = tuple(self.resources) if self.resources is not None else SWF_RESOURCES[:self.num_resources]
            unknown = [n for n in names if n not in SWF_RESOURCES]
            if unknown:
                raise TraceError(f"{self.path}: SWF resources are {SWF_RESOURCES}, got {unknown}")
        else:
            if self.resources is None:
                raise TraceError(f"{self.path}: a CSV trace needs resources=(demand column, ...)")
            names = tuple(self.resources)
            self.trace = read_once(read_csv, self.path, self.csv_submit, self.csv_run_time, names, self.csv_status,
                                   self.csv_wait)
        if len(names) > self.num_resources:
            raise TraceError(f"{self.path}: {len(names)} trace resources {names} for a cluster of "
                             f"num_resources={self.num_resources}")
        self.resources = names
        self._map()

    def _check_knobs(self) -> None:
        def positive(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise TraceError(f"TraceWorkload.{name} must be a finite number > 0, got {value!r}")

        positive("seconds_per_step")
        positive("time_compression")
        if self.target_load is not None:
            positive("target_load")
            if self.time_compression != 1.0:
                raise TraceError("TraceWorkload: give target_load or time_compression, not both")
        for name, choices in (("oversize", OVERSIZE), ("split", SPLITS), ("windows", WINDOWS),
                              ("start_state", START_STATES)):
            if getattr(self, name) not in choices:
                raise TraceError(f"TraceWorkload.{name}={getattr(self, name)!r} is unknown; choose one of {choices}")
        if not (isinstance(self.test_fraction, (int, float)) and 0 < self.test_fraction < 1):
            raise TraceError(f"TraceWorkload.test_fraction must be in (0, 1), got {self.test_fraction!r}")
        for name in ("simu_len", "num_resources", "resource_units", "max_job_len", "max_job_units"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TraceError(f"TraceWorkload.{name} must be an integer >= 1, got {value!r}")
        if self.job_columns is not None and (not isinstance(self.job_columns, int) or self.job_columns < 1):
            raise TraceError(f"TraceWorkload.job_columns must be an integer >= 1 or None, got {self.job_columns!r}")

    def _job_rules(self) -> JobRules:
        statuses = None if self.statuses is None else frozenset(float(s) for s in self.statuses)
        return JobRules(seconds_per_step=self.seconds_per_step, statuses=statuses,
                        keep_unknown_status=self.keep_unknown_status, keep_zero_run_time=self.keep_zero_run_time,
                        oversize=self.oversize, num_resources=self.num_resources, resource_units=self.resource_units,
                        max_job_len=self.max_job_len, max_job_units=self.max_job_units)

    def _map(self) -> None:
        """Map `trace` onto the cluster: the split's jobs (`arrival`, `duration`, `demand`), its window
        plan and `report`."""
        trace, names, units = self.trace, self.resources, self.resource_units
        present = resource_presence(trace, names)
        note = zero_demand_note(names, present, self.num_resources)
        if note:  # stacklevel: past _map, __post_init__ and __init__, to the line that built the workload
            warnings.warn(f"{self.path}: {note}", TraceWarning, stacklevel=4)
        capacity = cluster_capacities(self.path, trace, names, present, self.capacity)
        jobs = select_jobs(self.path, trace, names, capacity, self._job_rules())
        natural = offered_load(jobs.duration, jobs.demand, span_steps(jobs.submit, self.seconds_per_step), units)
        compression = compression_for(self.path, natural, self.target_load, self.time_compression)
        arrival = arrival_steps(self.path, jobs.submit, jobs.line, self.seconds_per_step, compression)
        (lo, hi), rows = split_rows(self.path, arrival, self.split, self.test_fraction)
        self.arrival, self.duration, self.demand = arrival[rows], jobs.duration[rows], jobs.demand[rows]
        self.range = (lo, hi)
        self._cursor = 0
        self._plan = plan_windows(self.arrival, self.range, self.simu_len, self.windows)
        start, unknown_wait = start_steps(arrival, jobs.submit, jobs.wait, self.seconds_per_step, compression)
        self._log = LogState.of(arrival, start, jobs.duration, jobs.demand)
        self._split_first = int(rows.nonzero()[0])  # the split is a contiguous run of the arrival order
        most = self._plan.most_jobs
        if self.start_state == "log":
            most = max(most, most_jobs_from_log(self.arrival, self._log, self._plan, self.range, self.simu_len))
        if self.job_columns is not None and self.job_columns < most:
            raise TraceError(f"{self.path}: a window of {self.simu_len} steps holds up to {most} jobs; "
                             f"job_columns={self.job_columns} is too few")
        self._max_jobs = self.job_columns or most
        self.report = TraceReport(
            path=self.path, format=trace.format, job_lines=trace.num_jobs, kept=len(jobs.submit),
            dropped=jobs.dropped, clipped=jobs.clipped, resources=list(names),
            zero_demand_resources=zero_demand_resources(names, present, self.num_resources),
            capacity=capacity, seconds_per_step=self.seconds_per_step,
            natural_load=[round(x, 4) for x in natural], compression=compression,
            load=[round(x * compression, 4) for x in natural],
            split=self.split, split_jobs=int(rows.sum()), split_steps=[lo, hi],
            split_seconds=[jobs.submit[0] + step * self.seconds_per_step * compression for step in (lo, hi)],
            split_load=[round(x, 4) for x in offered_load(self.duration, self.demand, hi - lo, units)],
            windows=self.windows, window_starts=self.num_windows, max_jobs=self.max_jobs,
            start_state=self.start_state, unknown_wait=unknown_wait,
            carried=dict.fromkeys(("windows", "running", "running_over_capacity", "waiting"), 0),
        )

    # ----- the workload protocol --------------------------------------------------------------
    @property
    def max_jobs(self) -> int:
        return self._max_jobs

    @property
    def num_windows(self) -> int:
        """Consecutive: the non-empty tiles. Random: the starts whose window holds a job."""
        return self._plan.count

    def validate(self, cfg: ClusterConfig) -> None:
        if (self.num_resources, self.resource_units) != (cfg.num_resources, cfg.resource_units):
            raise ConfigError(f"TraceWorkload has num_resources={self.num_resources}, "
                              f"resource_units={self.resource_units}; "
                              f"the cluster has {cfg.num_resources}, {cfg.resource_units}")
        if self.max_job_len > cfg.max_job_len or self.max_job_units > cfg.max_job_units:
            raise ConfigError(f"TraceWorkload maps jobs up to max_job_len={self.max_job_len}, "
                              f"max_job_units={self.max_job_units}; "
                              f"the cluster allows {cfg.max_job_len}, {cfg.max_job_units}")

    def window_starts(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """LongTensor[B]: the first step of each row's window (on the compressed timeline)."""
        plan = self._plan
        if self.windows == "consecutive":
            n = plan.starts.numel()
            if batch_size > n:
                warnings.warn(f"{self.path}: {batch_size} consecutive windows asked, the {self.split} split has {n}; "
                              "windows repeat", TraceWarning, stacklevel=3)
            index = (self._cursor + torch.arange(batch_size)) % n
            self._cursor = (self._cursor + batch_size) % n
            return plan.starts[index]
        # uniform over all starts: a draw below the total count, located in its interval
        device = generator.device if generator is not None else "cpu"
        pick = torch.randint(int(plan.interval_end[-1]), (batch_size,), generator=generator, device=device).cpu()
        which = torch.searchsorted(plan.interval_end, pick, right=True)
        before = torch.cat([plan.interval_end.new_zeros(1), plan.interval_end])[which]
        return plan.intervals[which, 0] + (pick - before)

    def jobset(self, starts: torch.Tensor, device="cpu") -> JobSet:
        """The windows [s, s + simu_len) for each start s: JobSet [B, max_jobs], arrivals relative to s."""
        starts = starts.long().cpu()
        first = torch.searchsorted(self.arrival, starts)
        stop = torch.searchsorted(self.arrival, starts + self.simu_len)
        if self.start_state == "log":
            return self._jobset_from_log(starts, first, stop).to(device)
        index = first.unsqueeze(1) + torch.arange(self.max_jobs)
        real = index < stop.unsqueeze(1)
        index = index.clamp(max=self.arrival.numel() - 1)
        arrival = torch.where(real, self.arrival[index] - starts.unsqueeze(1), 0)
        duration = torch.where(real, self.duration[index], 0)
        demand = torch.where(real.unsqueeze(-1), self.demand[index], 0)
        return JobSet(arrival, duration, demand).to(device)

    def _jobset_from_log(self, starts: torch.Tensor, first: torch.Tensor, stop: torch.Tensor) -> JobSet:
        """The windows [s, s + simu_len) started from the log's state at s: the jobs waiting at s (arrival
        0, in arrival order), then the window's arrivals; the jobs running at s as running_left/demand."""
        log, carried = self._log, self.report.carried
        columns, arrivals, running = [], [], []
        for s, f, t in zip(starts.tolist(), first.tolist(), stop.tolist()):
            queued = log.waiting(s)
            columns.append(torch.cat([queued, self._split_first + torch.arange(f, t)]))
            arrivals.append(torch.cat([torch.zeros_like(queued), self.arrival[f:t] - s]))
            busy = log.running(s)
            fits = fit_running(log.demand[busy], self.resource_units)
            running.append(busy[fits])
            carried["windows"] += 1
            carried["waiting"] += len(queued)
            carried["running"] += int(fits.sum())
            carried["running_over_capacity"] += int((~fits).sum())
        index = pad_rows(columns, self.max_jobs)
        real = index >= 0
        index = index.clamp(min=0)
        busy = pad_rows(running, max(1, max(len(r) for r in running)))
        return JobSet(arrival=pad_rows(arrivals, self.max_jobs).clamp(min=0),
                      duration=torch.where(real, log.end[index] - log.start[index], 0),
                      demand=torch.where(real.unsqueeze(-1), log.demand[index], 0),
                      running_left=torch.where(busy >= 0, log.end[busy.clamp(min=0)] - starts.unsqueeze(1), 0),
                      running_demand=torch.where((busy >= 0).unsqueeze(-1), log.demand[busy.clamp(min=0)], 0))

    def sample(self, batch_size: int, generator: torch.Generator | None = None, device="cpu") -> JobSet:
        """B windows of the split as jobsets: JobSet [B, max_jobs]."""
        return self.jobset(self.window_starts(batch_size, generator), device)

    def describe(self) -> str:
        r = self.report
        return (f"TraceWorkload({Path(self.path).name}, {self.seconds_per_step:g} s/step, split={self.split} "
                f"({r.split_jobs} jobs), {self.windows} windows of {self.simu_len} steps, "
                f"load {max(r.split_load):.3f})")

    def to_dict(self) -> dict:
        return asdict(self)


def parse_capacity(items: list[str] | None) -> dict | tuple | None:
    """Command-line capacities: ['processors=128', 'memory=4e6'] -> dict, ['128'] -> tuple."""
    if not items:
        return None
    named = ["=" in item for item in items]
    if any(named) and not all(named):
        raise TraceError(f"capacities {items}: give all as NAME=VALUE or all as plain values")
    try:
        if all(named):
            return {k.strip(): float(v) for k, v in (item.split("=", 1) for item in items)}
        return tuple(float(item) for item in items)
    except ValueError as exc:
        raise TraceError(f"capacities {items}: not a number ({exc})") from None
