"""Real job traces as workloads: replay Standard Workload Format (SWF) and CSV traces as `JobSet`s.

The Parallel Workloads Archive's Standard Workload Format (Feitelson et al.; see
https://www.cs.huji.ac.il/labs/parallel/workload/swf.html) is a text file, optionally gzip-ed
(`.swf.gz`): header comments start with ';', every other non-blank line is one job of 18
whitespace-separated numbers, -1 meaning unknown. A CSV trace has a header row naming its columns;
a column mapping says which column holds the submit time, the run time and each resource demand.

Mapping a job to the cluster (`TraceWorkload`), with S = seconds_per_step, c = time compression:

    arrival step  = floor((submit - first submit) / (c * S))       (relative to the trace's first kept job)
    duration      = max(1, ceil(run_time / S))                     (a 0 s job still takes one step)
    demand units  = ceil(demand / capacity * resource_units)       (per resource; capacity = the virtual cluster's)

A job longer than `max_job_len` or with more units than `max_job_units` is clipped to the limit or
dropped (`oversize`); either way it is counted in `report`, never silently. A job whose status is
not kept, or whose submit time, run time or demand is unknown (-1), is dropped and counted.
Windows of `simu_len` steps of the (compressed) timeline become jobsets; arrivals are relative to
the window's start, and a window starts with an empty cluster (jobs running from before are not
carried over).
"""
from __future__ import annotations

import csv
import gzip
import math
import warnings
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config import ClusterConfig, ConfigError
from .jobs import JobSet

# SWF's 18 fields, in order (1-based field k is SWF_FIELDS[k - 1])
SWF_FIELDS = ("job number", "submit time", "wait time", "run time", "allocated processors", "average CPU time",
              "used memory", "requested processors", "requested time", "requested memory", "status", "user",
              "group", "executable", "queue", "partition", "preceding job", "think time")
SWF_RESOURCES = ("processors", "memory")
"""Resources an SWF trace can give. processors: allocated (field 5), else requested (field 8).
memory: used memory (field 7), else requested memory (field 10); SWF gives both in KB per processor,
so a job's memory demand is that times its processors (the capacity is the cluster's total KB)."""
FORMATS = ("auto", "swf", "csv")
OVERSIZE = ("clip", "drop")
SPLITS = ("all", "train", "test")
WINDOWS = ("random", "consecutive")
DROP_REASONS = ("status", "unknown_submit", "unknown_run_time", "zero_run_time", "unknown_demand", "too_long", "too_large")
CLIP_REASONS = ("length", "demand")
# Arrival steps beyond this are refused: they would not fit the int64 arithmetic of an episode.
MAX_STEP = 2 ** 40


class TraceError(ConfigError):
    """A trace file that cannot be read or mapped: the message names the file (and line and field)."""


class TraceWarning(UserWarning):
    """Something the mapping did on purpose that the user should know (e.g. a resource missing)."""


# ----- parsing -------------------------------------------------------------------------------
@dataclass
class Trace:
    """The jobs of a trace file as read, before any mapping. Times in the trace's unit (seconds
    for SWF); -1 marks an unknown value; lists are in file order, one entry per job line.

    resources: names of the demand columns; `demand[j][k]` is job j's demand on resources[k].
    present:   per resource, whether any job gives it (a resource unknown for every job is absent).
    """

    path: str
    format: str
    submit: list[float]
    run_time: list[float]
    demand: list[list[float]]
    status: list[float]
    line: list[int]
    resources: tuple[str, ...]
    header: dict[str, str] = field(default_factory=dict)

    @property
    def num_jobs(self) -> int:
        return len(self.submit)

    @property
    def present(self) -> tuple[bool, ...]:
        return tuple(any(d[k] != -1 for d in self.demand) for k in range(len(self.resources)))


def _open_text(path: Path) -> list[str]:
    """The file's lines, gunzipped when the name ends in .gz. Undecodable bytes become U+FFFD (they
    then fail as numbers, with their line and field)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from exc
    if path.suffix == ".gz":
        if raw[:2] != b"\x1f\x8b":
            raise TraceError(f"{path}: not a gzip file (the name ends in .gz but the content does not start with gzip's magic bytes)")
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt gzip file ({exc})") from exc
    # split on \n only, so line numbers are what an editor shows
    return [line.rstrip("\r") for line in raw.decode("utf-8", errors="replace").split("\n")]


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}, line {line}, {what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}, line {line}, {what}: {text!r} is not a finite number")
    return value


def _known(value: float, path: Path, line: int, what: str) -> float:
    """A used field: >= 0, or -1 for unknown (SWF's convention); any other negative is malformed."""
    if value < 0 and value != -1:
        raise TraceError(f"{path}, line {line}, {what}: {value:g} is negative (only -1, unknown, may be)")
    return value


def read_swf(path: str | Path) -> Trace:
    """Parse a Standard Workload Format file (.swf, or gzip-ed .swf.gz) into a `Trace` with the
    resources ("processors", "memory"). Raises TraceError with the file, line and field of the
    first malformed line, or when the file has no job line."""
    path = Path(path)
    header: dict[str, str] = {}
    submit, run_time, demand, status, lines = [], [], [], [], []
    for number, text in enumerate(_open_text(path), start=1):
        text = text.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, sep, value = text[1:].partition(":")
            if sep and key.strip() and key.strip() not in header:
                header[key.strip()] = value.strip()
            continue
        parts = text.split()
        if len(parts) != len(SWF_FIELDS):
            if len(parts) < len(SWF_FIELDS):
                k = len(parts) + 1
                raise TraceError(f"{path}, line {number}, field {k} ({SWF_FIELDS[k - 1]}): missing; an SWF job line "
                                 f"has {len(SWF_FIELDS)} whitespace-separated fields, this one has {len(parts)}")
            raise TraceError(f"{path}, line {number}, field {len(SWF_FIELDS) + 1}: unexpected; an SWF job line has "
                             f"{len(SWF_FIELDS)} whitespace-separated fields, this one has {len(parts)}")
        values = [_number(p, path, number, f"field {k} ({name})") for k, (p, name) in enumerate(zip(parts, SWF_FIELDS), 1)]
        for k in (2, 4, 5, 7, 8, 10):
            _known(values[k - 1], path, number, f"field {k} ({SWF_FIELDS[k - 1]})")
        procs = values[4] if values[4] != -1 else values[7]
        memory = values[6] if values[6] != -1 else values[9]
        # SWF memory is KB per processor: the job's total is that times its processors
        total_memory = -1.0 if memory == -1 or procs == -1 else memory * procs
        submit.append(values[1])
        run_time.append(values[3])
        demand.append([procs, total_memory])
        status.append(values[10])
        lines.append(number)
    if not submit:
        raise TraceError(f"{path}: empty trace, no job line (only comments or blank lines)")
    return Trace(str(path), "swf", submit, run_time, demand, status, lines, SWF_RESOURCES, header)


def read_csv(path: str | Path, submit: str = "submit_time", run_time: str = "run_time",
             demands: tuple[str, ...] = ("processors",), status: str | None = None) -> Trace:
    """Parse a CSV trace (header row first; .csv.gz is gunzipped). `submit`, `run_time`, each of
    `demands` and the optional `status` name columns; an empty cell or -1 is unknown."""
    path = Path(path)
    rows = _open_text(path)
    try:
        reader = csv.reader(rows)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}: empty trace, no header row")
        header = [h.strip() for h in header]
        wanted = {"submit": submit, "run_time": run_time, **{f"demand {d!r}": d for d in demands}}
        if status is not None:
            wanted["status"] = status
        missing = [f"{role} column {name!r}" for role, name in wanted.items() if name not in header]
        if missing:
            raise TraceError(f"{path}: unknown CSV column: {', '.join(missing)}; the header has {header}")
        index = {name: header.index(name) for name in wanted.values()}
        out = Trace(str(path), "csv", [], [], [], [], [], tuple(demands))
        for row in reader:
            number = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise TraceError(f"{path}, line {number}: {len(row)} cells, the header has {len(header)} columns")

            def cell(name: str) -> float:
                text = row[index[name]].strip()
                if text == "":
                    return -1.0
                return _known(_number(text, path, number, f"column {name!r}"), path, number, f"column {name!r}")

            out.submit.append(cell(submit))
            out.run_time.append(cell(run_time))
            out.demand.append([cell(d) for d in demands])
            out.status.append(cell(status) if status is not None else -1.0)
            out.line.append(number)
    except csv.Error as exc:
        raise TraceError(f"{path}, line {reader.line_num}: malformed CSV ({exc})") from exc
    if not out.submit:
        raise TraceError(f"{path}: empty trace, no job row after the header")
    return out


def trace_format(path: str | Path, format: str = "auto") -> str:
    """'swf' or 'csv': `format` itself, or read off the name (.swf, .swf.gz, .csv, .csv.gz)."""
    if format not in FORMATS:
        raise TraceError(f"trace format {format!r} is unknown; choose one of {FORMATS}")
    if format != "auto":
        return format
    name = Path(path).name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    for fmt in ("swf", "csv"):
        if name.endswith("." + fmt):
            return fmt
    raise TraceError(f"{path}: cannot tell the trace format from the name (expected .swf, .swf.gz, .csv or .csv.gz); give format='swf' or 'csv'")


# ----- mapping ---------------------------------------------------------------------------------
def _ceil(x: float) -> int:
    # ceil with a tolerance for binary rounding (12.8 * 10 / 128 must be 1, not 2)
    return math.ceil(x - 1e-9)


@dataclass
class TraceWorkload:
    """Jobsets cut out of a real trace: the workload protocol (`sample`, `max_jobs`, `validate`).

    Build it for a cluster with `TraceWorkload.for_cluster(cfg, path, seconds_per_step, ...)`.
    After construction, `report` holds the counts (jobs read, kept, dropped by reason, clipped by
    reason), the loads and the split's time range; `arrival`, `duration`, `demand` hold the kept
    jobs of the selected split (LongTensor[N], [N], [N, R]) in arrival order.

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
    num_resources: int = 2
    resource_units: int = 10
    max_job_len: int = 15
    max_job_units: int = 10

    @classmethod
    def for_cluster(cls, cfg: ClusterConfig, path: str | Path, seconds_per_step: float, **params) -> "TraceWorkload":
        """A TraceWorkload whose mapping uses cfg's resources, units and job limits."""
        return cls(path=str(path), seconds_per_step=seconds_per_step, **params, num_resources=cfg.num_resources,
                   resource_units=cfg.resource_units, max_job_len=cfg.max_job_len, max_job_units=cfg.max_job_units)

    def __post_init__(self) -> None:
        self._check_knobs()
        fmt = trace_format(self.path, self.format)
        if fmt == "swf":
            self.trace = read_swf(self.path)
            names = tuple(self.resources) if self.resources is not None else SWF_RESOURCES[:self.num_resources]
            unknown = [n for n in names if n not in SWF_RESOURCES]
            if unknown:
                raise TraceError(f"{self.path}: SWF resources are {SWF_RESOURCES}, got {unknown}")
        else:
            if self.resources is None:
                raise TraceError(f"{self.path}: a CSV trace needs resources=(demand column, ...)")
            names = tuple(self.resources)
            self.trace = read_csv(self.path, self.csv_submit, self.csv_run_time, names, self.csv_status)
        if len(names) > self.num_resources:
            raise TraceError(f"{self.path}: {len(names)} trace resources {names} for a cluster of num_resources={self.num_resources}")
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
        for name, choices in (("oversize", OVERSIZE), ("split", SPLITS), ("windows", WINDOWS)):
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

    def _capacities(self, present: dict[str, bool]) -> dict[str, float]:
        names = self.resources
        if self.capacity is None:
            given = {}
        elif isinstance(self.capacity, dict):
            given = dict(self.capacity)
            extra = [k for k in given if k not in names]
            if extra:
                raise TraceError(f"{self.path}: capacity given for {extra}, which are not among the trace resources {names}")
        else:
            values = tuple(self.capacity)
            if len(values) != len(names):
                raise TraceError(f"{self.path}: {len(values)} capacities for the trace resources {names}")
            given = dict(zip(names, values))
        header = self.trace.header
        out = {}
        for name in names:
            if not present[name]:
                continue
            value = given.get(name)
            if value is None and self.trace.format == "swf" and name == "processors":
                for key in ("MaxProcs", "MaxNodes"):
                    try:
                        value = float(header[key].split()[0])
                        break
                    except (KeyError, ValueError, IndexError):
                        continue
            if value is None:
                raise TraceError(f"{self.path}: no capacity for resource {name!r}: give capacity={{{name!r}: ...}} "
                                 f"(the virtual cluster's total, in the trace's units"
                                 f"{'; the SWF header has no MaxProcs' if name == 'processors' else ''})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise TraceError(f"{self.path}: capacity of {name!r} must be a finite number > 0, got {value!r}")
            out[name] = float(value)
        return out

    def _map(self) -> None:
        trace, names = self.trace, self.resources
        present_flags = dict(zip(trace.resources, trace.present))
        present = {n: present_flags[n] for n in names}
        absent = [n for n in names if not present[n]]
        missing = self.num_resources - sum(present.values())
        if missing:
            what = []
            if absent:
                what.append(f"{absent} unknown (-1) for every job")
            if len(names) < self.num_resources:
                what.append(f"only {len(names)} trace resources {names} for {self.num_resources} cluster resources")
            warnings.warn(f"{self.path}: {missing} of the cluster's {self.num_resources} resources get demand 0 "
                          f"({'; '.join(what)})", TraceWarning, stacklevel=4)
        capacity = self._capacities(present)
        columns = [trace.resources.index(n) for n in names]
        units = self.resource_units
        keep_status = None if self.statuses is None else {float(s) for s in self.statuses}

        dropped = dict.fromkeys(DROP_REASONS, 0)
        clipped = dict.fromkeys(CLIP_REASONS, 0)
        kept = []  # (submit, line, duration, [units per cluster resource])
        for j in range(trace.num_jobs):
            status = trace.status[j]
            if status == -1:
                if not self.keep_unknown_status:
                    dropped["status"] += 1
                    continue
            elif keep_status is not None and status not in keep_status:
                dropped["status"] += 1
                continue
            if trace.submit[j] == -1:
                dropped["unknown_submit"] += 1
                continue
            if trace.run_time[j] == -1:
                dropped["unknown_run_time"] += 1
                continue
            if trace.run_time[j] == 0 and not self.keep_zero_run_time:
                dropped["zero_run_time"] += 1
                continue
            raw = [trace.demand[j][c] for c in columns]
            if any(v == -1 for n, v in zip(names, raw) if present[n]):
                dropped["unknown_demand"] += 1
                continue
            # min() before ceil: a huge value stays a float and cannot overflow the int conversion
            duration = max(1, _ceil(min(trace.run_time[j] / self.seconds_per_step, self.max_job_len + 1.0)))
            demand = [_ceil(min(v / capacity[n] * units, self.max_job_units + 1.0)) if present[n] else 0
                      for n, v in zip(names, raw)]
            demand += [0] * (self.num_resources - len(demand))
            too_long = duration > self.max_job_len
            too_large = max(demand) > self.max_job_units
            if self.oversize == "drop" and (too_long or too_large):
                dropped["too_long" if too_long else "too_large"] += 1
                continue
            if too_long:
                clipped["length"] += 1
                duration = self.max_job_len
            if too_large:
                clipped["demand"] += 1
                demand = [min(q, self.max_job_units) for q in demand]
            kept.append((trace.submit[j], trace.line[j], duration, demand))
        if not kept:
            raise TraceError(f"{self.path}: no job fits the cluster: {trace.num_jobs} job lines, all dropped "
                             f"({', '.join(f'{k} {v}' for k, v in dropped.items() if v)})")
        kept.sort(key=lambda job: job[0])  # stable: equal submit times keep file order
        origin = kept[0][0]
        duration = torch.tensor([job[2] for job in kept], dtype=torch.long)
        demand = torch.tensor([job[3] for job in kept], dtype=torch.long).view(len(kept), self.num_resources)
        work = (duration.unsqueeze(1) * demand).sum(0).double()  # [R] unit-steps offered

        # offered load of the kept trace at c = 1, over its time range (max over resources: the bottleneck)
        span = max(1.0, (kept[-1][0] - origin) / self.seconds_per_step)
        natural = (work / (span * units)).tolist()
        compression = self.time_compression
        if self.target_load is not None:
            if max(natural) <= 0:
                raise TraceError(f"{self.path}: no job demands any resource; target_load={self.target_load} cannot be reached")
            compression = self.target_load / max(natural)
        arrival = []
        for submit, line, _, _ in kept:
            step = (submit - origin) / (compression * self.seconds_per_step)
            if not step < MAX_STEP:  # also catches inf from an extreme compression
                raise TraceError(f"{self.path}, line {line}: submit time {submit:g} maps to step {step:g}, beyond "
                                 f"{MAX_STEP} (seconds_per_step={self.seconds_per_step:g}, compression={compression:g})")
            arrival.append(math.floor(step))
        arrival = torch.tensor(arrival, dtype=torch.long)

        # time-ordered split of the step range [0, end)
        end = int(arrival[-1]) + 1
        cut = max(1, min(end - 1, math.floor((1 - self.test_fraction) * end))) if end > 1 else 1
        lo, hi = {"all": (0, end), "train": (0, cut), "test": (cut, end)}[self.split]
        rows = (arrival >= lo) & (arrival < hi)
        if not bool(rows.any()):
            raise TraceError(f"{self.path}: the {self.split} split (steps [{lo}, {hi}) of the trace's [0, {end})) holds no "
                             f"job; change test_fraction={self.test_fraction} (or the trace spans too few steps)")
        self.arrival, self.duration, self.demand = arrival[rows], duration[rows], demand[rows]
        self.range = (lo, hi)
        self._cursor = 0
        split_work = (self.duration.unsqueeze(1) * self.demand).sum(0).double()
        seconds = lambda step: origin + step * self.seconds_per_step * compression  # noqa: E731
        self._plan_windows()
        self.report = {
            "path": self.path, "format": trace.format, "job_lines": trace.num_jobs, "kept": len(kept),
            "dropped": dropped, "clipped": clipped, "resources": list(names),
            "zero_demand_resources": [i for i, n in enumerate(names) if not present[n]] + list(range(len(names), self.num_resources)),
            "capacity": capacity, "seconds_per_step": self.seconds_per_step,
            "natural_load": [round(x, 4) for x in natural], "compression": compression,
            "load": [round(x * compression, 4) for x in natural],
            "split": self.split, "split_jobs": int(rows.sum()), "split_steps": [lo, hi],
            "split_seconds": [seconds(lo), seconds(hi)],
            "split_load": [round(x, 4) for x in (split_work / ((hi - lo) * units)).tolist()],
            "windows": self.windows, "window_starts": self.num_windows, "max_jobs": self.max_jobs,
        }

    def _plan_windows(self) -> None:
        """The windows' possible starts and the job columns they need (sparse: a trace can span
        millions of steps)."""
        length, (lo, hi) = self.simu_len, self.range
        a = self.arrival
        if self.windows == "consecutive":
            self._starts = torch.unique((a - lo) // length) * length + lo  # tiles holding a job, in time order
            candidates = self._starts
        else:
            last = max(lo, hi - length)  # the latest start keeps the window inside the split (if it can)
            # starts whose window [s, s + length) holds a job: the union of [a - length + 1, a] within [lo, last]
            begin = (a - length + 1).clamp(min=lo, max=last)
            finish = a.clamp(max=last)  # inclusive
            intervals, current = [], None
            for b, f in zip(begin.tolist(), finish.tolist()):  # a is sorted, so begin is too
                if current is not None and b <= current[1] + 1:
                    current[1] = max(current[1], f)
                else:
                    current = [b, f]
                    intervals.append(current)
            self._intervals = torch.tensor(intervals, dtype=torch.long).view(-1, 2)
            self._interval_end = (self._intervals[:, 1] - self._intervals[:, 0] + 1).cumsum(0)
            # the most jobs in a window: at a start equal to a job's arrival (or the latest start)
            candidates = torch.unique(a.clamp(min=lo, max=last))
        counts = torch.searchsorted(a, candidates + length) - torch.searchsorted(a, candidates)
        needed = int(counts.max())
        if self.job_columns is not None and self.job_columns < needed:
            raise TraceError(f"{self.path}: a window of {length} steps holds up to {needed} jobs; job_columns={self.job_columns} is too few")
        self._max_jobs = self.job_columns or needed

    # ----- the workload protocol --------------------------------------------------------------
    @property
    def max_jobs(self) -> int:
        return self._max_jobs

    @property
    def num_windows(self) -> int:
        """Consecutive: the non-empty tiles. Random: the starts whose window holds a job."""
        if self.windows == "consecutive":
            return int(self._starts.numel())
        return int(self._interval_end[-1])

    def validate(self, cfg: ClusterConfig) -> None:
        if (self.num_resources, self.resource_units) != (cfg.num_resources, cfg.resource_units):
            raise ConfigError(f"TraceWorkload has num_resources={self.num_resources}, resource_units={self.resource_units}; "
                              f"the cluster has {cfg.num_resources}, {cfg.resource_units}")
        if self.max_job_len > cfg.max_job_len or self.max_job_units > cfg.max_job_units:
            raise ConfigError(f"TraceWorkload maps jobs up to max_job_len={self.max_job_len}, max_job_units={self.max_job_units}; "
                              f"the cluster allows {cfg.max_job_len}, {cfg.max_job_units}")

    def window_starts(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """LongTensor[B]: the first step of each row's window (on the compressed timeline)."""
        if self.windows == "consecutive":
            n = self._starts.numel()
            if batch_size > n:
                warnings.warn(f"{self.path}: {batch_size} consecutive windows asked, the {self.split} split has {n}; "
                              "windows repeat", TraceWarning, stacklevel=3)
            index = (self._cursor + torch.arange(batch_size)) % n
            self._cursor = (self._cursor + batch_size) % n
            return self._starts[index]
        device = generator.device if generator is not None else "cpu"
        pick = torch.randint(int(self._interval_end[-1]), (batch_size,), generator=generator, device=device).cpu()
        which = torch.searchsorted(self._interval_end, pick, right=True)
        before = torch.cat([self._interval_end.new_zeros(1), self._interval_end])[which]
        return self._intervals[which, 0] + (pick - before)

    def jobset(self, starts: torch.Tensor, device="cpu") -> JobSet:
        """The windows [s, s + simu_len) for each start s: JobSet [B, max_jobs], arrivals relative to s."""
        starts = starts.long().cpu()
        first = torch.searchsorted(self.arrival, starts)
        stop = torch.searchsorted(self.arrival, starts + self.simu_len)
        index = first.unsqueeze(1) + torch.arange(self.max_jobs)
        real = index < stop.unsqueeze(1)
        index = index.clamp(max=self.arrival.numel() - 1)
        arrival = torch.where(real, self.arrival[index] - starts.unsqueeze(1), 0)
        duration = torch.where(real, self.duration[index], 0)
        demand = torch.where(real.unsqueeze(-1), self.demand[index], 0)
        return JobSet(arrival, duration, demand).to(device)

    def sample(self, batch_size: int, generator: torch.Generator | None = None, device="cpu") -> JobSet:
        """B windows of the split as jobsets: JobSet [B, max_jobs]."""
        return self.jobset(self.window_starts(batch_size, generator), device)

    def describe(self) -> str:
        r = self.report
        return (f"TraceWorkload({Path(self.path).name}, {self.seconds_per_step:g} s/step, split={self.split} "
                f"({r['split_jobs']} jobs), {self.windows} windows of {self.simu_len} steps, load {max(r['split_load']):.3f})")

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
