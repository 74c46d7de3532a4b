"""A queue snapshot, as a scheduler's hook sends it (docs/deploy.md), read into arrays and checked.

    {"now": 86400,
     "capacity": {"processors": 256},                        # or {"nodes": 64, "processors_per_node": 4}
     "running": [{"id": "a1", "processors": 16, "expected_end": 90000}],   # "nodes": optional, see below
     "waiting": [{"id": "b7", "submit": 86000, "requested_time": 3600, "processors": 32,
                  "memory": 2048, "user": "u3"}],           # memory and user: optional, not read
     "held": {"id": "b7", "shadow": 90000}}                  # optional: the policy's held pick (see decision.py)

Times are seconds on one clock. A running job holds ceil(processors / processors_per_node) nodes,
or its "nodes" when it spreads over more (a scheduler that does not pack jobs); a waiting job will
take ceil(processors / processors_per_node), as in the environment. A field the snapshot does not
know is refused rather than ignored (a misspelt or unsupported field would change nothing silently).

Every fault is a `SnapshotError` whose one-line message names the field and, for a job, its id (e.g.
`waiting[3].processors: 300 is more than the cluster's 256 processors (job '106')`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfigError, is_finite, is_int
from ..limits import MAX_INPUT_SECONDS

MAX_JOBS = 100_000
"""Running plus waiting jobs one snapshot may hold: a bound on the time and memory of one decision."""
MAX_COUNT = 2**31 - 1
"""The largest processor or node count a snapshot may give (products of two stay within int64)."""
MAX_WAIT_DAYS = 365
"""A longer wait is refused: it comes from times on two clocks or in two units (ms and s), not a queue."""
FIELDS = {"snapshot": ("now", "capacity", "running", "waiting", "held"),
          "capacity": ("processors", "nodes", "processors_per_node"),
          "running": ("id", "processors", "expected_end", "nodes"),
          "waiting": ("id", "submit", "requested_time", "processors", "memory", "user"),
          "held": ("id", "shadow")}
"""The fields each part of a snapshot may have."""


class SnapshotError(ConfigError):
    """A snapshot that cannot be decided on; the message names the field and the value."""


@dataclass
class Snapshot:
    """One snapshot's jobs as arrays. Waiting jobs are in the queue's FCFS order: by submit time, then
    by their place in the snapshot's list (the order the environment replays a log in).

    now:              float   seconds
    nodes, processors_per_node: the cluster (capacity in processors: nodes * processors_per_node)
    running_id:       list[str]         [R]
    running_nodes:    int64 [R]         nodes each running job holds
    running_end:      float64 [R]       expected end (start + requested time), seconds
    waiting_id:       list[str]         [Q]
    submit, requested: float64 [Q]      seconds
    processors, nodes_needed: int64 [Q]
    held:             index into the waiting jobs of the held pick, or None; shadow: its reserved start
    held_not_waiting: the id of a held pick passed back that no longer waits (let go), or None
    """

    now: float
    nodes: int
    processors_per_node: int
    running_id: list
    running_nodes: np.ndarray
    running_end: np.ndarray
    waiting_id: list
    submit: np.ndarray
    requested: np.ndarray
    processors: np.ndarray
    nodes_needed: np.ndarray
    held: int | None = None
    shadow: float | None = None
    held_not_waiting: str | None = None

    @property
    def capacity(self) -> int:
        return self.nodes * self.processors_per_node

    @property
    def free_nodes(self) -> int:
        return self.nodes - int(self.running_nodes.sum())


def _number(value, field: str, low: float = 0.0, strict: bool = False) -> float:
    if not is_finite(value):
        raise SnapshotError(f"{field}: {_shown(value)} is not a finite number")
    if value < low or (strict and value == low):
        raise SnapshotError(f"{field}: {_shown(value)} must be {'>' if strict else '>='} {low:g}")
    if value > MAX_INPUT_SECONDS:
        raise SnapshotError(f"{field}: {_shown(value)} is out of range (at most {MAX_INPUT_SECONDS:g} seconds)")
    return float(value)


def _shown(value) -> str:
    """A value for a one-line message: a huge integer by its digits' count, not all of them."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _count(value, field: str, low: int = 1) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value):
        raise SnapshotError(f"{field}: {_shown(value)} is not an integer")
    if value < low:
        raise SnapshotError(f"{field}: {_shown(value)} must be >= {low}")
    if value > MAX_COUNT:
        raise SnapshotError(f"{field}: {_shown(value)} is out of range (at most {MAX_COUNT})")
    return value


def _entry(item, field: str, required: tuple[str, ...]) -> dict:
    if not isinstance(item, dict):
        raise SnapshotError(f"{field}: expected an object with {', '.join(required)}, got {type(item).__name__}")
    missing = [k for k in required if k not in item]
    if missing:
        raise SnapshotError(f"{field}.{missing[0]}: missing")
    return item


def _job_id(value, field: str, seen: set) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise SnapshotError(f"{field}: {value!r} is not a job id (a non-empty string or an integer)")
    key = str(value)
    if key in seen:
        raise SnapshotError(f"{field}: {key!r} is a duplicate job id")
    seen.add(key)
    return key


def _known_fields(item: dict, field: str, part: str) -> None:
    """SnapshotError naming the first field of `item` that FIELDS[part] does not list."""
    unknown = [k for k in item if k not in FIELDS[part]]
    if unknown:
        raise SnapshotError(f"{field}.{unknown[0]}: unknown field (a {part} entry has {', '.join(FIELDS[part])})"
                            f"{_of(item) if part in ('running', 'waiting') else ''}")


def _of(job) -> str:
    """' (job ID)' for a message about a job that has an id, else ''."""
    return f" (job {str(job['id'])!r})" if isinstance(job, dict) and "id" in job else ""


def _jobs(snapshot: dict, name: str) -> list:
    jobs = snapshot[name]
    if not isinstance(jobs, list):
        raise SnapshotError(f"{name}: expected a list of jobs, got {type(jobs).__name__}")
    allowed = frozenset(FIELDS[name])
    if not all(type(job) is dict and allowed.issuperset(job) for job in jobs):  # a set's check, in C
        for i, job in enumerate(jobs):  # the slow path names the first fault
            _known_fields(_entry(job, f"{name}[{i}]", ("id",)), f"{name}[{i}]", name)
    return jobs


def _ids(jobs: list, name: str, seen: set) -> list:
    """The jobs' ids as strings; SnapshotError naming the first job that is not an object with an
    id, or whose id is not one or repeats one seen before."""
    try:
        ids = [job["id"] for job in jobs]
    except (KeyError, TypeError):
        ids = None
    if ids is not None and all(type(v) is str and v or type(v) is int for v in ids):
        keys = list(map(str, ids))
        if len(set(keys)) == len(keys) and seen.isdisjoint(keys):
            seen.update(keys)
            return keys
    for i, job in enumerate(jobs):  # the slow path names the first fault
        _job_id(_entry(job, f"{name}[{i}]", ("id",))["id"], f"{name}[{i}].id", seen)
    raise AssertionError("unreachable: a fault found above")


def _column(jobs: list, name: str, key: str, integer: bool, positive: bool = False) -> np.ndarray:
    """jobs[*][key] as an array: counts >= 1 (int64) when `integer`, else finite times >= 0 (> 0 when
    `positive`, float64). The job-by-job checks run only to name the first fault."""
    try:
        values = [job[key] for job in jobs]
    except (KeyError, TypeError):
        values = None
    if values is not None and all(type(v) is int or (type(v) is float and not integer) for v in values):
        try:
            array = np.asarray(values, dtype=np.int64 if integer else np.float64)
        except OverflowError:  # an integer beyond int64 or float64: the checks below name it
            array = np.zeros(0)
        low_enough = array >= 1 if integer else (array > 0 if positive else array >= 0)
        high_enough = array <= (MAX_COUNT if integer else MAX_INPUT_SECONDS)  # NaN fails both; infinities this one
        if len(array) == len(values) and np.all(low_enough) and np.all(high_enough):
            return array

    def check(value, field: str):
        return _count(value, field) if integer else _number(value, field, strict=positive)

    checked = []
    for i, job in enumerate(jobs):
        try:
            checked.append(check(_entry(job, f"{name}[{i}]", (key,))[key], f"{name}[{i}].{key}"))
        except SnapshotError as error:
            raise SnapshotError(f"{error}{_of(job)}") from None
    return np.asarray(checked, dtype=np.int64 if integer else np.float64)


def _fit_the_cluster(processors: np.ndarray, jobs: list, name: str, capacity: int) -> None:
    """SnapshotError naming the first job of `jobs` that asks for more processors than `capacity`."""
    too_big = np.flatnonzero(processors > capacity)
    if len(too_big):
        i = int(too_big[0])
        raise SnapshotError(f"{name}[{i}].processors: {jobs[i]['processors']} is more than the cluster's {capacity} "
                            f"processors{_of(jobs[i])}")


def read_snapshot(snapshot) -> Snapshot:
    """The checked arrays of a snapshot (a dict parsed from JSON). SnapshotError naming the field for
    a missing or non-numeric field, a negative time or size, a job larger than the cluster, more
    processors running than it has, a waiting job submitted after `now` or more than MAX_WAIT_DAYS
    before it, a duplicate id, a field FIELDS does not list, more than MAX_JOBS jobs, or capacity in
    nodes without processors_per_node. A held job that no longer waits is let go (`held_not_waiting`)."""
    if not isinstance(snapshot, dict):
        raise SnapshotError(f"snapshot: expected a JSON object, got {type(snapshot).__name__}")
    # a missing running list, read as none, would show a busy cluster idle: every start would be wrong
    now = _number(_entry(snapshot, "snapshot", ("now", "capacity", "running", "waiting"))["now"], "now")
    _known_fields(snapshot, "snapshot", "snapshot")
    capacity = snapshot["capacity"]
    if not isinstance(capacity, dict) or not ({"processors", "nodes"} & set(capacity)):
        raise SnapshotError(f"capacity: expected {{\"processors\": P}} or {{\"nodes\": N, \"processors_per_node\": "
                            f"K}}, got {capacity!r}")
    _known_fields(capacity, "capacity", "capacity")
    if "nodes" in capacity:
        nodes = _count(capacity["nodes"], "capacity.nodes")
        if "processors_per_node" not in capacity:  # a silent 1 would read a 40-processor job as 40 nodes
            raise SnapshotError(f"capacity.processors_per_node: missing beside nodes ({{\"nodes\": N, "
                                f"\"processors_per_node\": K}}, or {{\"processors\": P}}), got {capacity!r}")
        per_node = _count(capacity["processors_per_node"], "capacity.processors_per_node")
        if "processors" in capacity and _count(capacity["processors"], "capacity.processors") != nodes * per_node:
            raise SnapshotError(f"capacity.processors: {capacity['processors']} is not nodes x processors_per_node "
                                f"= {nodes * per_node}")
    else:
        if capacity.get("processors_per_node", 1) != 1:  # dropping it would read the cluster as one-processor nodes
            raise SnapshotError(f"capacity.processors_per_node: given without nodes ({{\"nodes\": N, "
                                f"\"processors_per_node\": K}}, or {{\"processors\": P}}), got {capacity!r}")
        nodes, per_node = _count(capacity["processors"], "capacity.processors"), 1
    running, waiting = _jobs(snapshot, "running"), _jobs(snapshot, "waiting")
    if len(running) + len(waiting) > MAX_JOBS:
        raise SnapshotError(f"running + waiting: {len(running) + len(waiting)} jobs, more than the cap of {MAX_JOBS}")
    seen: set = set()
    running_id = _ids(running, "running", seen)
    running_processors = _column(running, "running", "processors", integer=True)
    running_end = _column(running, "running", "expected_end", integer=False)
    running_nodes = -(-running_processors // per_node)
    _fit_the_cluster(running_processors, running, "running", nodes * per_node)
    for i, job in enumerate(running):  # spread over more nodes than its processors fill
        if "nodes" in job:
            spread = _count(job["nodes"], f"running[{i}].nodes")
            if spread < running_nodes[i]:
                raise SnapshotError(f"running[{i}].nodes: {spread} nodes cannot hold its {running_processors[i]} "
                                    f"processors at {per_node} a node{_of(job)}")
            running_nodes[i] = spread
    if running_nodes.sum() > nodes:
        raise SnapshotError(f"running: the running jobs hold {running_nodes.sum()} nodes, the cluster has {nodes}")
    waiting_id = _ids(waiting, "waiting", seen)
    submit = _column(waiting, "waiting", "submit", integer=False)
    requested = _column(waiting, "waiting", "requested_time", integer=False, positive=True)
    processors = _column(waiting, "waiting", "processors", integer=True)
    _fit_the_cluster(processors, waiting, "waiting", nodes * per_node)
    late = np.flatnonzero(submit > now)
    if len(late):
        raise SnapshotError(f"waiting[{late[0]}].submit: {waiting[late[0]]['submit']!r} is after now "
                            f"({snapshot['now']!r}){_of(waiting[late[0]])}")
    ancient = np.flatnonzero(now - submit > MAX_WAIT_DAYS * 86400)
    if len(ancient):
        i = int(ancient[0])
        raise SnapshotError(f"waiting[{i}].submit: {waiting[i]['submit']!r} is {(now - submit[i]) / 86400:.0f} days "
                            f"before now ({snapshot['now']!r}), more than {MAX_WAIT_DAYS}: are both seconds on one "
                            f"clock?{_of(waiting[i])}")
    order = np.argsort(submit, kind="stable")  # list order breaks ties
    out = Snapshot(now, nodes, per_node, running_id, running_nodes, running_end, [waiting_id[k] for k in order],
                   submit[order], requested[order], processors[order], -(-processors[order] // per_node))
    held = snapshot.get("held")
    if held is not None:
        held = _entry(held, "held", ("id", "shadow"))
        _known_fields(held, "held", "held")
        _job_id(held["id"], "held.id", set())
        shadow = _number(held["shadow"], "held.shadow")
        if str(held["id"]) not in out.waiting_id:  # cancelled, or started by the scheduler: let go
            out.held_not_waiting = str(held["id"])
        else:
            out.held, out.shadow = out.waiting_id.index(str(held["id"])), shadow
    return out
