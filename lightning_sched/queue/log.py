"""A Standard Workload Format log as the queue environment replays it (`QueueLog`), read the way
RLScheduler (Zhang et al., SC'20; DIR-LAB/deep-batch-scheduler, job.py) reads one, so that its
published tables can be reproduced:

- processors = max(allocated (field 5), requested (field 8)); nodes = ceil(processors / per node);
- run time = field 4; an unknown one (-1) becomes 10 s; jobs with run time 0 are dropped (counted);
- times in whole seconds: a fractional submit, run or requested time is rounded up (counted), a
  fractional processor count or job number is refused;
- requested time = field 9, or the run time where the log does not give it (-1, and 0: no job asks
  for 0 s, and EASY would backfill it blindly; RLScheduler keeps a 0, which none of the shipped logs has);
  requests below the run time are kept (the job runs to its actual end) and counted;
- a job number that appears twice among the jobs kept is refused (an overlapping export would replay
  jobs twice);
- the status (field 11) is not read: cancelled jobs that ran are replayed, as RLScheduler does;
- jobs in job-number order (field 1), then stably by submit time: the queue's FCFS order is then the
  job order (on logs whose submit times grow with the job number, as both Lublin logs and NASA's,
  this is RLScheduler's order exactly);
- the cluster: header MaxNodes nodes of MaxProcs / MaxNodes processors (MaxProcs = MaxNodes when
  absent, as RLScheduler takes it); a MaxProcs that is not a multiple of MaxNodes is refused (the
  nodes differ: give --nodes and --processors_per_node).

Nothing is dropped silently: `QueueLog.summary()` counts every job read, kept, dropped and changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError, is_int
from ..traces.files import TraceError, read_swf_table
from .config import QueueConfig

NEGATIVE_RUN_TIME = 10  # seconds: what RLScheduler makes of a negative (unknown) run time


MAX_SECONDS = 1 << 36  # any time of a log below it (state.init_state bounds a whole sequence's times)
MAX_HEADER = (1 << 31) - 1  # MaxNodes and MaxProcs at most this
LIGHT_LOAD = 0.5  # an offered load below this leaves most jobs unqueued (NASA's log as recorded: 0.47)


@dataclass(frozen=True)
class QueueLog:
    """The jobs of a log, in arrival order, with the cluster it ran on. Arrays are int64 [N].

    job_number, submit, run, requested, processors: per job (seconds, processors)
    nodes, processors_per_node: the cluster
    counts: what reading did to the log's job lines ("read", "kept", "dropped_zero_run",
        "dropped_unknown_processors", "dropped_unknown_submit", "negative_run_set_to_10", "requested_from_run",
        "requested_zero_from_run", "requested_below_run", "processors_rounded_up_to_nodes",
        "times_rounded_up_to_seconds", "dropped_larger_than_cluster")
    """

    path: str
    job_number: np.ndarray
    submit: np.ndarray
    run: np.ndarray
    requested: np.ndarray
    processors: np.ndarray
    nodes: int
    processors_per_node: int
    counts: dict = field(default_factory=dict)

    @property
    def num_jobs(self) -> int:
        return len(self.submit)

    def config(self, **fields) -> QueueConfig:
        """A QueueConfig of this log's cluster (nodes, processors per node), with `fields` set on top.
        The feature scales stay the config's own, the same for every log a policy meets."""
        return QueueConfig(**{"nodes": self.nodes, "processors_per_node": self.processors_per_node, **fields})

    def offered_load(self) -> float:
        """Node-seconds asked for over node-seconds available between the first and the last submit:
        jobs take whole nodes (a 1-processor job holds a node of 32), so this is the load the queue
        sees; on clusters of 1-processor nodes (the Lublin logs, NASA) it is the processor load."""
        span = max(1, int(self.submit[-1] - self.submit[0]))
        nodes = -(-self.processors // self.processors_per_node)
        return float((self.run * nodes).sum()) / (span * self.nodes)

    def with_load(self, load: float) -> QueueLog:
        """The log with its inter-arrival times scaled so that its offered load is `load` (> 0); the
        submit times stay integers (rounded) and in order."""
        if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
            raise ConfigError(f"load must be a finite number > 0, got {load!r}")
        factor = self.offered_load() / load
        first = self.submit[0]
        last = first + (self.submit[-1] - first) * factor
        if not last < MAX_SECONDS:
            raise ConfigError(f"load {load:g}: the log's arrivals would spread over {last - first:.3g} seconds, "
                              f"past 2^36 (2,000 years); give a larger load")
        submit = first + np.round((self.submit - first) * factor).astype(np.int64)
        return replace(self, submit=submit, counts={**self.counts, "submit_scaled_by": factor})

    def jobs_before(self, fraction: float) -> int:
        """How many jobs (in arrival order) lie in the first `fraction` of the log: the boundary
        between a training range and the held-out jobs after it."""
        return int(self.num_jobs * fraction)

    def positions(self, first: int, last: int, length: int) -> tuple[int, int]:
        """The start positions of sequences of `length` jobs inside jobs [first, last): (lowest,
        highest) inclusive; refused when the range is shorter than one sequence."""
        if last - first < length:
            raise ConfigError(f"sequence_length {length} is longer than the {last - first} jobs of "
                              f"{Path(self.path).name}[{first}:{last}] (a shorter one: --sequence_length, or "
                              "sequence_length in a training config)")
        return first, last - length

    def random_starts(self, fraction: float, length: int, count: int, generator: torch.Generator) -> torch.Tensor:
        """`count` start positions (LongTensor[count]) drawn uniformly among those of sequences of
        `length` jobs inside the log's first `fraction` (a training range)."""
        lo, hi = self.positions(0, self.jobs_before(fraction), length)
        return torch.randint(lo, hi + 1, (count,), generator=generator)

    def sequences(self, starts: torch.Tensor, length: int, device="cpu") -> dict[str, torch.Tensor]:
        """Jobs [start, start + length) of the log for each start (LongTensor[B]): "submit", "run",
        "requested", "processors" as LongTensors [B, length] on `device`."""
        starts = torch.as_tensor(starts, dtype=torch.long).reshape(-1)
        bad = (starts < 0) | (starts + length > self.num_jobs)
        if bool(bad.any()):
            s = int(starts[bad][0])
            raise ConfigError(f"sequence start {s} with sequence_length {length} runs past the "
                              f"{self.num_jobs} jobs of {Path(self.path).name}")
        columns = {"submit": self.submit, "run": self.run, "requested": self.requested, "processors": self.processors}
        # every window of `length` jobs as a view, then whole rows copied (a gather per job is ~15x slower)
        return {k: torch.from_numpy(v).unfold(0, length, 1).index_select(0, starts).to(device)
                for k, v in columns.items()}

    def summary(self) -> dict:
        return {"log": Path(self.path).name, "nodes": self.nodes, "processors_per_node": self.processors_per_node,
                "offered_load": round(self.offered_load(), 4), **self.counts}

    def describe(self) -> str:
        """`summary()` as the line the scripts print: jobs read and kept, the cluster, the offered load,
        the site it was rewritten as, and every other count (what reading changed) that is not 0."""
        counts = self.counts
        parts = [f"{counts.get('read')} jobs read, {counts.get('kept')} kept",
                 f"{self.nodes} nodes of {self.processors_per_node} processor{'s' * (self.processors_per_node > 1)}",
                 f"offered load {self.offered_load():.2f}"]
        if counts.get("site", {}).get("name", "load") != "load":  # a site model, not --load alone
            parts.append(f"site {counts['site']['name']}")
        if "submit_scaled_by" in counts:
            parts.append(f"gaps between arrivals x{counts['submit_scaled_by']:.3g}")
        parts += [f"{name.replace('_', ' ')}: {value}" for name, value in counts.items()
                  if name not in ("read", "kept", "site", "submit_scaled_by") and value]
        return f"{Path(self.path).name}: " + "; ".join(parts)


def _header_int(header: dict[str, str], key: str, path) -> int | None:
    if key not in header:
        return None
    text = header[key].split()[0] if header[key].split() else ""
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}: header {key}: {header[key]!r} is not a number") from None
    if not (math.isfinite(value) and value == int(value) and 1 <= value <= MAX_HEADER):
        raise TraceError(f"{path}: header {key}: {text!r} must be a whole number from 1 to {MAX_HEADER:,}")
    return int(value)


def cluster_size(path, header: dict, nodes: int | None, processors_per_node: int | None) -> tuple[int, int]:
    """(nodes, processors per node) a log replays on: the given ones, else its header's (MaxNodes, and
    MaxProcs / MaxNodes per node; MaxProcs alone: nodes of `processors_per_node`, default 1). TraceError
    naming the file when the header gives neither or contradicts what is given."""
    header_nodes, header_procs = _header_int(header, "MaxNodes", path), _header_int(header, "MaxProcs", path)
    if processors_per_node is None:
        if header_nodes and header_procs and header_procs % header_nodes:
            raise TraceError(f"{path}: header MaxProcs {header_procs} is not a multiple of MaxNodes {header_nodes}: "
                             "nodes of different sizes; give the cluster to replay (--nodes and --processors_per_node)")
        processors_per_node = header_procs // header_nodes if header_nodes and header_procs else 1
    for name, value in (("nodes", nodes), ("processors_per_node", processors_per_node)):
        if value is not None and not is_int(value, 1):
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if nodes is None and header_nodes is None and header_procs is not None:  # MaxProcs alone: its processors
        if header_procs % processors_per_node:
            raise TraceError(f"{path}: header MaxProcs {header_procs} is not a multiple of processors_per_node "
                             f"{processors_per_node}: give the cluster's nodes (--nodes, or nodes in a training "
                             "config)")
        nodes = header_procs // processors_per_node
    if nodes is None and header_nodes and header_procs and header_nodes * processors_per_node != header_procs:
        raise TraceError(f"{path}: header MaxNodes {header_nodes} x processors_per_node {processors_per_node} is "
                         f"{header_nodes * processors_per_node} processors, but MaxProcs is {header_procs}: give "
                         "the nodes too (--nodes, or nodes in a training config) to replay another cluster, or leave "
                         "processors_per_node to the header")
    nodes = header_nodes if nodes is None else nodes
    if nodes is None:
        raise TraceError(f"{path}: the header gives neither MaxNodes nor MaxProcs: add '; MaxNodes: N' and "
                         "'; MaxProcs: P' lines (the cluster's nodes and processors), or give --nodes (nodes in a "
                         "training config)")
    return nodes, processors_per_node


def read_queue_log(path: str | Path, nodes: int | None = None, processors_per_node: int | None = None,
                   oversize: str = "refuse") -> QueueLog:
    """Read an SWF log (.swf or .swf.gz) for the queue environment; `nodes` and
    `processors_per_node` override the header's cluster; a job larger than the cluster is refused
    (`oversize` "refuse") or dropped and counted ("drop"). TraceError (one line naming the file,
    line and field) for a malformed log, a refused job, or no cluster size."""
    if oversize not in ("refuse", "drop"):
        raise ConfigError(f"oversize must be refuse or drop, got {oversize!r}")
    header, table, lines = read_swf_table(path)
    lines = np.asarray(lines)
    nodes, processors_per_node = cluster_size(path, header, nodes, processors_per_node)

    for column, name in ((0, "job number"), (4, "allocated processors"), (7, "requested processors")):
        fraction = table[:, column] != np.floor(table[:, column])
        if fraction.any():
            k = int(np.argmax(fraction))
            raise TraceError(f"{path}, line {lines[k]}, field {column + 1} ({name}): {table[k, column]:g} is not a "
                             "whole number")
    bad = (table[:, 8] < 0) & (table[:, 8] != -1)
    if bad.any():
        k = int(np.argmax(bad))
        raise TraceError(f"{path}, line {lines[k]}, field 9 (requested time): {table[k, 8]:g} is negative "
                         "(only -1, unknown, may be)")
    times = table[:, [1, 3, 8]]
    rounded_up = (times != np.floor(times)).any(1)  # the job is kept whole: it ran, if for 0.4 s
    number = table[:, 0].astype(np.int64)
    submit, run, requested = (np.ceil(table[:, k]).astype(np.int64) for k in (1, 3, 8))
    # RLScheduler's reading (its published cells depend on it); the DeepRM trace path takes allocated,
    # else requested (traces/files.py read_swf)
    processors = np.maximum(table[:, 4], table[:, 7]).astype(np.int64)
    keep = run != 0
    unknown = keep & (processors < 1)
    counts = {"read": len(number), "dropped_zero_run": int((~keep).sum()),
              "dropped_unknown_processors": int(unknown.sum())}
    keep &= ~unknown
    counts["dropped_unknown_submit"] = int((keep & (submit < 0)).sum())  # SWF's -1: no time to replay it at
    keep &= submit >= 0
    need = -(-processors // processors_per_node)
    too_big = keep & (need > nodes)
    if oversize == "refuse" and too_big.any():
        k = int(np.argmax(too_big))
        raise TraceError(f"{path}, line {lines[k]}, processors: job {number[k]} asks for {processors[k]} processors, "
                         f"the cluster has {nodes * processors_per_node} ({nodes} nodes x {processors_per_node}); "
                         f"{int(too_big.sum())} job(s) do not fit (--oversize drop, or oversize: drop in a training "
                         "config: dropped, counted)")
    counts["dropped_larger_than_cluster"] = int(too_big.sum())  # 0 unless dropped: refused above
    keep &= ~too_big
    counts["negative_run_set_to_10"] = int((keep & (run < 0)).sum())  # of the jobs kept, as the next one
    run = np.where(run < 0, NEGATIVE_RUN_TIME, run)
    counts["requested_from_run"] = int((keep & (requested == -1)).sum())
    counts["requested_zero_from_run"] = int((keep & (requested == 0)).sum())
    requested = np.where(requested <= 0, run, requested)
    counts["requested_below_run"] = int((keep & (requested < run)).sum())
    long_ago = keep & ((submit >= MAX_SECONDS) | (run >= MAX_SECONDS) | (requested >= MAX_SECONDS))
    if long_ago.any():  # the native step sorts times packed in 40 bits
        k = int(np.argmax(long_ago))
        raise TraceError(f"{path}, line {lines[k]}: job {number[k]}'s times (submit {submit[k]}, run {run[k]}, "
                         f"requested {requested[k]}) reach 2^36 seconds (2,000 years): not a log's")
    counts["processors_rounded_up_to_nodes"] = int((keep & (processors % processors_per_node != 0)).sum())
    counts["times_rounded_up_to_seconds"] = int((keep & rounded_up).sum())
    seen, first = np.unique(number[keep], return_index=True)
    if len(seen) < int(keep.sum()):
        kept_lines, kept_numbers = lines[keep], number[keep]
        again = np.setdiff1d(np.arange(len(kept_numbers)), first)[0]
        before = int(np.argmax(kept_numbers == kept_numbers[again]))
        raise TraceError(f"{path}, line {kept_lines[again]}, field 1 (job number): job {kept_numbers[again]} is also "
                         f"on line {kept_lines[before]} (a log lists each job once: an overlapping export?)")
    number, submit, run, requested, processors = (a[keep] for a in (number, submit, run, requested, processors))
    if len(number) == 0:
        raise TraceError(f"{path}: no job left to replay (every job has run time 0, unknown processors or an "
                         "unknown submit time)")
    order = np.lexsort((number,))  # job-number order ...
    order = order[np.argsort(submit[order], kind="stable")]  # ... then submit order, stably
    counts["kept"] = len(number)
    return QueueLog(str(path), number[order], submit[order], run[order], requested[order], processors[order],
                    nodes, processors_per_node, counts)


def reading_report(logs: list[QueueLog]) -> list[str]:
    """What a training run (fit.py) prints of its logs: a line a log (`QueueLog.describe`, as evaluate.py
    prints), and a note for a log so lightly loaded that few of its jobs wait, naming the run's key
    that compresses its arrivals (QueuePPO's and QueueRuleSearch's `load`)."""
    lines = [one.describe() for one in logs]
    light = [one for one in logs if one.offered_load() < LIGHT_LOAD]
    if light:
        lines.append(f"note: {Path(light[0].path).name}'s offered load is {light[0].offered_load():.2f}: few jobs "
                     "wait, so most sequences give every policy the same bounded slowdowns and training little to "
                     "learn; --model.init_args.load 1.0 compresses its arrivals")
    return lines


def read_queue_logs(paths: str | list[str], nodes: int | None = None, processors_per_node: int | None = None,
                    oversize: str = "refuse", load: float | None = None, owner: str = "") -> list[QueueLog]:
    """Each log of `paths` as `read_queue_log` reads it, its arrivals scaled to offered load `load`
    when given (`QueueLog.with_load`); `owner` prefixes a refused load ("QueuePPO.")."""
    logs = [read_queue_log(path, nodes, processors_per_node, oversize)
            for path in ([paths] if isinstance(paths, str) else paths)]
    if load is None:
        return logs
    try:
        return [one.with_load(load) for one in logs]
    except ConfigError as error:
        raise ConfigError(f"{owner}{error}") from None
