"""Reading job trace files: Standard Workload Format (SWF) and CSV logs into a `Trace`.

This is the parsing layer: it turns a file into the jobs as recorded (submit time, run time,
demand per resource, status, file line), checks every used field and names the file, line and
field of the first bad one. It knows nothing about clusters; the rest of `lightning_sched.traces`
maps a `Trace` onto one (steps, units, windows).

The Parallel Workloads Archive's Standard Workload Format (Feitelson et al.; see
https://www.cs.huji.ac.il/labs/parallel/workload/swf.html) is a text file, optionally gzip-ed
(`.swf.gz`): header comments start with ';', every other non-blank line is one job of 18
whitespace-separated numbers, -1 meaning unknown. A CSV trace has a header row naming its columns;
a column mapping says which column holds the submit time, the run time and each resource demand.

    read_swf(path)                 -> Trace with resources ("processors", "memory")
    read_swf_table(path)           -> (header, float64 [N, 18] of the job lines, their line numbers)
    read_csv(path, submit, ...)    -> Trace with the named demand columns as resources
    trace_format(path, format)     -> "swf" or "csv"
    read_trace(path, format, ...)  -> either, parsed once per file version (cached, shared, never modified)
"""
from __future__ import annotations

import csv
import functools
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import ConfigError
from ..limits import BUDGET_ENV, MAX_INPUT_SECONDS, format_bytes, memory_budget

# SWF's 18 fields, in order (1-based field k is SWF_FIELDS[k - 1])
SWF_FIELDS = ("job number", "submit time", "wait time", "run time", "allocated processors", "average CPU time",
              "used memory", "requested processors", "requested time", "requested memory", "status", "user",
              "group", "executable", "queue", "partition", "preceding job", "think time")
SWF_RESOURCES = ("processors", "memory")
"""Resources an SWF trace can give. processors: allocated (field 5), else requested (field 8).
memory: used memory (field 7), else requested memory (field 10); SWF gives both in KB per processor,
so a job's memory demand is that times its processors (the capacity is the cluster's total KB)."""
FORMATS = ("auto", "swf", "csv")


class TraceError(ConfigError):
    """A trace file that cannot be read or mapped: the message names the file (and line and field)."""


@dataclass
class Trace:
    """The jobs of a trace file as read, before any mapping. Times in the trace's unit (seconds
    for SWF); -1 marks an unknown value; lists are in file order, one entry per job line.

    resources: names of the demand columns; `demand[j][k]` is job j's demand on resources[k].
    present:   per resource, whether any job gives it (a resource unknown for every job is absent).
    wait:      time from submit to start (SWF field 3; a CSV's optional wait column); -1 unknown.
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
    wait: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.wait:
            self.wait = [-1.0] * len(self.submit)

    @property
    def num_jobs(self) -> int:
        return len(self.submit)

    @property
    def present(self) -> tuple[bool, ...]:
        return tuple(any(d[k] != -1 for d in self.demand) for k in range(len(self.resources)))


# parsing holds the text, its lines and their fields as Python objects: about this many times the text
TEXT_OVERHEAD = 10


def gunzip_capped(raw: bytes, path: Path) -> bytes:
    """gzip's decompression of `raw` (every member), stopped with a TraceError as soon as the text
    would exceed the memory budget over TEXT_OVERHEAD: a small file that inflates to gigabytes is
    refused before it is held."""
    limit = memory_budget() // TEXT_OVERHEAD
    out, total, data = [], 0, raw
    while data.strip(b"\0"):  # one member after another; trailing zeros are padding, as gzip reads them
        member = zlib.decompressobj(wbits=31)
        while True:
            piece = member.decompress(data, 1 << 24)
            total += len(piece)
            if total > limit:
                raise TraceError(f"{path}: decompresses to more than {format_bytes(limit)} of text (the memory budget "
                                 f"{format_bytes(limit * TEXT_OVERHEAD)} over {TEXT_OVERHEAD}, what parsing it takes); "
                                 f"set {BUDGET_ENV} to allow more")
            out.append(piece)
            data = member.unconsumed_tail
            if member.eof:
                data = member.unused_data
                break
            if not data and not piece:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
    return b"".join(out)


def _open_text(path: Path) -> list[str]:
    """The file's lines, gunzipped when its content is gzip (whatever its name says). Undecodable bytes
    become U+FFFD (they then fail as numbers, with their line and field); a leading byte-order mark is
    dropped; lines end at \n, \r\n or \r (old Mac files)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        where = "; the logs the docs use: docs/hpc_queue.md, 'The logs'" if isinstance(exc, FileNotFoundError) else ""
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc}){where}") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gunzip_capped(raw, path)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt gzip file ({exc})") from exc
    elif path.suffix.lower() == ".gz":
        raise TraceError(f"{path}: not a gzip file (the name ends in .gz but the content does not start "
                         "with gzip's magic bytes)")
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    # line ends \n, \r\n or \r (old Mac files), and nothing else, so line numbers are what an editor shows
    return re.split(r"\r\n|\r|\n", text)


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}, line {line}, {what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}, line {line}, {what}: {text!r} is not a finite number")
    if abs(value) > MAX_INPUT_SECONDS:
        raise TraceError(f"{path}, line {line}, {what}: {text!r} is out of range "
                         f"(at most {MAX_INPUT_SECONDS:g} in size)")
    return value


def _known(value: float, path: Path, line: int, what: str) -> float:
    """A used field: >= 0, or -1 for unknown (SWF's convention); any other negative is malformed."""
    if value < 0 and value != -1:
        raise TraceError(f"{path}, line {line}, {what}: {value:g} is negative (only -1, unknown, may be)")
    return value


# the fields read_swf uses that must be >= 0 or -1 (unknown), 1-based
USED_SWF_FIELDS = (2, 3, 4, 5, 7, 8, 10)


def swf_line_values(text: str, path: Path, number: int) -> list[float]:
    """The 18 numbers of one SWF job line, checked: TraceError naming the file, line and field of a
    missing, extra or non-numeric field or a negative used field other than -1."""
    parts = text.split()
    if len(parts) != len(SWF_FIELDS):
        if len(parts) < len(SWF_FIELDS):
            k = len(parts) + 1
            raise TraceError(f"{path}, line {number}, field {k} ({SWF_FIELDS[k - 1]}): missing; an SWF job line "
                             f"has {len(SWF_FIELDS)} whitespace-separated fields, this one has {len(parts)}")
        raise TraceError(f"{path}, line {number}, field {len(SWF_FIELDS) + 1}: unexpected; an SWF job line has "
                         f"{len(SWF_FIELDS)} whitespace-separated fields, this one has {len(parts)}")
    values = [_number(p, path, number, f"field {k} ({name})") for k, (p, name) in enumerate(zip(parts, SWF_FIELDS), 1)]
    for k in USED_SWF_FIELDS:
        _known(values[k - 1], path, number, f"field {k} ({SWF_FIELDS[k - 1]})")
    return values


def swf_table(rows: list[str], numbers: list[int], path: Path) -> np.ndarray:
    """The job lines `rows` (file lines `numbers`) as float64 [N, 18]. All lines are converted at once
    (a log can hold millions of numbers); when that fails or a value is out of range, the lines are
    read one by one so the error names the first bad line and field."""
    width = len(SWF_FIELDS)
    table = None
    if all(len(row.split()) == width for row in rows):
        try:
            table = np.array(" ".join(rows).split(), dtype=np.float64).reshape(len(rows), width)
        except ValueError:
            table = None
    used = [k - 1 for k in USED_SWF_FIELDS]
    if table is None or not (np.abs(table) <= MAX_INPUT_SECONDS).all() or (
            (table[:, used] < 0) & (table[:, used] != -1)).any():  # (NaN fails the first check)
        table = np.array([swf_line_values(row, path, number) for row, number in zip(rows, numbers)])
    return table


def read_swf(path: str | Path) -> Trace:
    """Parse a Standard Workload Format file (.swf, or gzip-ed .swf.gz) into a `Trace` with the
    resources ("processors", "memory"). Raises TraceError with the file, line and field of the
    first malformed line, or when the file has no job line."""
    path = Path(path)
    header, table, numbers = read_swf_table(path)
    # what the job used (allocated, when above 0), else what it asked for; the queue env reads
    # max(allocated, requested) as RLScheduler does (queue/log.py), whose published cells depend on it
    procs = np.where(table[:, 4] > 0, table[:, 4], table[:, 7])
    memory = np.where(table[:, 6] != -1, table[:, 6], table[:, 9])
    # SWF memory is KB per processor: the job's total is that times its processors
    total_memory = np.where((memory == -1) | (procs == -1), -1.0, memory * procs)
    return Trace(str(path), "swf", table[:, 1].tolist(), table[:, 3].tolist(),
                 np.stack([procs, total_memory], 1).tolist(), table[:, 10].tolist(), numbers, SWF_RESOURCES, header,
                 table[:, 2].tolist())


CLUSTER_HEADERS = ("MaxNodes", "MaxProcs")  # header keys a log may repeat only with the same value


def read_swf_table(path: str | Path) -> tuple[dict[str, str], np.ndarray, list[int]]:
    """An SWF file's header (key: value comments, first occurrence; CLUSTER_HEADERS repeated with another
    value refused), its job lines as float64 [N, 18] (checked as `swf_table` checks them) and their line
    numbers."""
    path = Path(path)
    header: dict[str, str] = {}
    rows, numbers = [], []
    for number, text in enumerate(_open_text(path), start=1):
        text = text.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, sep, value = text[1:].partition(":")
            key, value = key.strip(), value.strip()
            if sep and key in CLUSTER_HEADERS and header.get(key, value) != value:
                raise TraceError(f"{path}, line {number}: header {key} given twice, {header[key]!r} then {value!r} "
                                 "(the cluster must be one)")
            if sep and key and key not in header:
                header[key] = value
            continue
        rows.append(text)
        numbers.append(number)
    if not rows:
        raise TraceError(f"{path}: empty trace, no job line (only comments or blank lines)")
    return header, swf_table(rows, numbers, path), numbers


def read_csv(path: str | Path, submit: str = "submit_time", run_time: str = "run_time",
             demands: tuple[str, ...] = ("processors",), status: str | None = None, wait: str | None = None) -> Trace:
    """Parse a CSV trace (header row first; .csv.gz is gunzipped). `submit`, `run_time`, each of
    `demands` and the optional `status` and `wait` (submit to start) name columns; an empty cell or
    -1 is unknown."""
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
        if wait is not None:
            wanted["wait"] = wait
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
            out.wait.append(cell(wait) if wait is not None else -1.0)
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
    raise TraceError(f"{path}: cannot tell the trace format from the name (expected .swf, .swf.gz, .csv or .csv.gz); "
                     "give format='swf' or 'csv'")


@functools.lru_cache(maxsize=4)
def _read_cached(reader, path: str, stamp: tuple, *args) -> Trace:
    return reader(path, *args)


def read_once(reader, path: str | Path, *args) -> Trace:
    """reader(path, *args), parsed once per file version: a script that proposes a cluster and builds
    its train and test workloads from one log reads it once. The Trace is shared: never modified."""
    try:
        info = Path(path).stat()
        stamp = (info.st_mtime_ns, info.st_size)
    except OSError:  # the reader names the file in its error
        return reader(path, *args)
    return _read_cached(reader, str(path), stamp, *args)


def read_trace(path: str | Path, format: str = "auto", resources: tuple[str, ...] | None = None,
               csv_submit: str = "submit_time", csv_run_time: str = "run_time", csv_status: str | None = None,
               csv_wait: str | None = None) -> Trace:
    """The trace file as a `Trace`, parsed once per file version (`read_once`): SWF, or CSV with the
    demand columns `resources` (required) and the columns csv_* (TraceWorkload's fields of those names)."""
    if trace_format(path, format) == "swf":
        return read_once(read_swf, str(path))
    if resources is None:
        raise TraceError(f"{path}: a CSV trace needs resources=(demand column, ...)")
    return read_once(read_csv, str(path), csv_submit, csv_run_time, tuple(resources), csv_status, csv_wait)
