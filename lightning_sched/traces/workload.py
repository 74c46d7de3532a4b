"""A real trace as a workload: `TraceWorkload` maps a parsed trace onto the cluster (`mapping`), cuts
its split into windows (`windows`), starts them from the log's state (`replay`) and serves them as
`JobSet`s through the workload protocol, which `ClusterEnv`, `evaluate` and the scripts take like
`DeepRMWorkload`. `TraceWorkload.report` (a `TraceReport`) says what the mapping did.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..config import ClusterConfig, ConfigError, is_finite, is_int
from ..jobs import JobSet
from .files import TraceError, read_trace
from .mapping import (
    JobRules,
    JobSizing,
    TraceWarning,
    arrival_steps,
    cluster_capacities,
    compression_for,
    mapped_resources,
    offered_load,
    resource_presence,
    select_jobs,
    span_steps,
    split_rows,
    zero_demand_note,
    zero_demand_resources,
)
from .replay import LogState, fit_running, most_jobs_from_log, start_steps
from .windows import pad_rows, plan_windows

OVERSIZE = ("clip", "drop")
SPLITS = ("all", "train", "test")
WINDOWS = ("random", "consecutive")
START_STATES = ("log", "empty")
# above this share of the kept jobs cut to the cluster's limits, the mapping warns
CLIP_WARNING = 0.05


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

    def line(self) -> str:
        """One line of what the mapping kept, dropped and clipped, as the scripts print it."""
        return (f"trace {self.path}: {self.job_lines} job lines, kept {self.kept}, dropped "
                f"{sum(self.dropped.values())} {self.dropped}, clipped {self.clipped}; "
                f"{self.split} split: {self.split_jobs} jobs, steps {self.split_steps}; windows start "
                f"{'from the log' if self.start_state == 'log' else 'empty'}"
                + ("" if self.start_state != "log" else
                   ", carrying the jobs running at each start (outside the metrics)" if not self.carried.get("windows")
                   else f", carrying {self.carried} (running jobs are outside the metrics)"))

    def counts(self) -> dict:
        """The counts of a JSON line (trace_kept, trace_dropped, ...)."""
        return {"trace_kept": self.kept, "trace_dropped": self.dropped, "trace_clipped": self.clipped,
                "trace_split_jobs": self.split_jobs, "trace_load": max(self.split_load),
                "trace_start": self.start_state, "trace_carried": self.carried}


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
        self.trace = read_trace(self.path, self.format, self.resources, self.csv_submit, self.csv_run_time,
                                self.csv_status, self.csv_wait)
        self.resources = mapped_resources(self.trace, self.resources, self.num_resources)
        self._map()

    def _check_knobs(self) -> None:
        def positive(name):
            value = getattr(self, name)
            if not is_finite(value) or value <= 0:
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
            if not is_int(value, 1):
                raise TraceError(f"TraceWorkload.{name} must be an integer >= 1, got {value!r}")
        if self.job_columns is not None and (not isinstance(self.job_columns, int) or self.job_columns < 1):
            raise TraceError(f"TraceWorkload.job_columns must be an integer >= 1 or None, got {self.job_columns!r}")

    @property
    def rules(self) -> JobRules:
        """Which job lines are jobs (propose_cluster takes the same)."""
        return JobRules(self.statuses, self.keep_unknown_status, self.keep_zero_run_time)

    @property
    def sizing(self) -> JobSizing:
        """How the kept jobs become steps and units on this workload's cluster."""
        return JobSizing(seconds_per_step=self.seconds_per_step, oversize=self.oversize,
                         num_resources=self.num_resources, resource_units=self.resource_units,
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
        jobs = select_jobs(self.path, trace, names, capacity, self.rules, self.sizing)
        natural = offered_load(jobs.duration, jobs.demand, span_steps(jobs.submit, self.seconds_per_step), units)
        compression = compression_for(self.path, natural, self.target_load, self.time_compression)
        arrival = arrival_steps(self.path, jobs.submit, jobs.line, self.seconds_per_step, compression)
        (lo, hi), rows = split_rows(self.path, arrival, self.split, self.test_fraction)
        self.arrival, self.duration, self.demand = arrival[rows], jobs.duration[rows], jobs.demand[rows]
        self.range = (lo, hi)
        self._cursor = 0
        self._warned_repeats = False
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
        cut = jobs.cut_jobs
        if cut > CLIP_WARNING * len(jobs.submit):  # every score on such a cluster is of other jobs than the log's
            warnings.warn(f"{self.path}: {cut} of {len(jobs.submit)} kept jobs ({100 * cut / len(jobs.submit):.3g}%) "
                          f"are cut to the cluster ({jobs.clipped}, max_job_len={self.max_job_len} steps of "
                          f"{self.seconds_per_step:g} s, max_job_units={self.max_job_units}); --fit_cluster sizes a "
                          "cluster at the log's own resolution, --oversize drop drops them instead",
                          TraceWarning, stacklevel=4)

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
        count = int(plan.interval_end[-1])
        if batch_size > count and not self._warned_repeats:  # an evaluation's CIs would count copies
            warnings.warn(f"{self.path}: {batch_size} random windows asked, the {self.split} split has {count} "
                          "distinct starts; windows repeat (a shorter --simu_len or a longer split gives more)",
                          TraceWarning, stacklevel=3)
            self._warned_repeats = True
        device = generator.device if generator is not None else "cpu"
        pick = torch.randint(count, (batch_size,), generator=generator, device=device).cpu()
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
