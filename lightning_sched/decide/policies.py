"""Policies that decide on a snapshot through the queue environment's own observation: the rules
(fcfs, sjf, f1, wfp3, unicep, and RULE+reserve), searched linear rules (queue.linear_rule), and
networks that read more than a snapshot's four job features (rule ranks, fit delays, the clock).

For each pick, the snapshot with the jobs this decision has started becomes a one-row QueueState on
the snapshot's clock less `clock_start`: running jobs first (started now, requested until their
expected end), then the waiting jobs in FCFS order. The environment builds its observation from it
(step.step_and_observe, the same code as in training and `evaluate.py`), and the policy object the
evaluation runs picks from it. So a decision is the environment's, to the second (times are rounded
to whole seconds, requested times up).

Rules and searched rules see the whole queue, as in the environment; a network sees its window.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

import numpy as np
import torch
from tensordict import TensorDict

from ..config import ConfigError
from ..queue.config import BACKFILL, RULES, QueueConfig
from ..queue.env import observation
from ..queue.heuristics import QueueHeuristic
from ..queue.linear_rule import RULE_FEATURES, LinearRule
from ..queue.policy import QueuePolicy, QueuePolicyRecord
from ..queue.reservation import SUFFIX
from ..queue.specs import QueueCheckpoint, policy_record, resolve
from ..queue.state import MAX_EPISODE_SECONDS, NEVER, RUNNING, WAITING, QueueState
from ..queue.step import step_and_observe
from .snapshot import Snapshot, SnapshotError

LOG_SUBMIT = [name for name, _ in RULE_FEATURES].index("log_submit")  # the linear rules' weight on log10(submit)


@dataclass
class Decision:
    """What one decision (one snapshot, one clock start) keeps across its picks: the snapshot's
    QueueState brought up to date as jobs start (the kernel's sorted orders of the queue live in it),
    the jobs still waiting in it (bool [Q]), and a rule's order of the waiting jobs (int64 [Q'])."""

    snapshot: Snapshot
    clock_start: float
    waiting: np.ndarray
    state: QueueState
    order: np.ndarray | None = None


def observes(record: QueueCheckpoint | None) -> bool:
    """Whether the policy of `record` (queue.specs.policy_record; None: a rule) decides through
    `ObservingPolicy`: every rule and linear rule, and a network whose inputs a snapshot's four job
    features lack."""
    if not isinstance(record, QueuePolicyRecord):
        return True
    cfg = record.queue
    return bool(cfg.rule_ranks or cfg.fit_delay or cfg.clock)


class ObservingPolicy:
    """Policy `spec` (a rule name, RULE+reserve, or a queue checkpoint) deciding on snapshots, as
    decide() calls it: `ranking` for the answer's order, `pick` for each job it starts. Its
    config's window is None for a rule (it sees the whole queue); `clock_reason` says what it reads
    that needs the clock's start (None: nothing)."""

    def __init__(self, spec: str, threads: int | None = None, record: QueueCheckpoint | None = None):
        """`record`: queue.specs.policy_record(spec), when already read (None: a rule's name, or read here)."""
        if threads is not None:
            torch.set_num_threads(threads)
        self.spec = spec
        record = policy_record(spec) if record is None else record
        # a network: the window and features it trained with
        self.policy, self.base = resolve(spec, QueueConfig(), record=record)
        if isinstance(self.policy, QueueHeuristic) and self.policy.name not in RULES:
            why = "draws at random" if spec == "random" else "is kept only to reproduce RLScheduler's published cells"
            raise ConfigError(f"--policy {spec} {why}: it does not decide for a scheduler (the rules: "
                              f"{', '.join(RULES)}, or RULE{SUFFIX})")
        self.whole_queue = not isinstance(self.policy, QueuePolicy)
        self.config = {"window": None if self.whole_queue else self.base.window,
                       "backfill": own_backfill(spec, record),
                       "max_wait": self.base.max_wait, "max_requested": self.base.max_requested}
        self.clock_reason = clock_reason(self.policy, self.base)
        self._decision = None  # the Decision under way: its snapshot's state and order, kept across its picks

    def _clock(self, clock_start: float | None) -> float:
        """`clock_start` as seconds (0 when None), refused in one line when it is no finite number or
        is None for a policy that reads the clock's origin."""
        if clock_start is not None and (isinstance(clock_start, bool) or not isinstance(clock_start, numbers.Real)
                                        or not math.isfinite(clock_start)):
            raise SnapshotError(f"clock_start: must be a finite number of seconds, got {clock_start!r}")
        if clock_start is None and self.clock_reason:
            raise ConfigError(needs_clock_start(self.spec, self.clock_reason))
        return 0.0 if clock_start is None else float(clock_start)

    def _current(self, snap: Snapshot, clock_start: float) -> Decision | None:
        """The Decision under way when `snap` and `clock_start` are still its own."""
        kept = self._decision
        return kept if kept is not None and kept.snapshot is snap and kept.clock_start == clock_start else None

    def _state(self, snap: Snapshot, waiting: np.ndarray, clock_start: float) -> QueueState:
        """`snapshot_state`, built at a decision's first look and then brought up to date as the
        decision starts jobs: the native kernel keeps its sorted orders of the queue in the state, so
        a long queue is not sorted again at every pick."""
        kept = self._current(snap, clock_start)
        if kept is None or bool((waiting & ~kept.waiting).any()):
            order = kept.order if kept is not None else None  # a rule's order stays valid
            self._decision = Decision(snap, clock_start, waiting.copy(), snapshot_state(snap, waiting, clock_start),
                                      order)
            return self._decision.state
        state, started = kept.state, np.flatnonzero(kept.waiting & ~waiting) + len(snap.running_id)
        for job in started.tolist():  # as snapshot_state writes a job started now
            state.status[0, job], state.start[0, job] = RUNNING, state.time[0]
            state.start_rank[0, job] = int((state.start_rank >= 0).sum())
            state.free_nodes -= state.nodes[0, job]
        kept.waiting[:] = waiting
        return state

    def ranking(self, snap: Snapshot, waiting: np.ndarray, window: int | None, clock_start: float | None) -> tuple:
        """(waiting jobs' indices, highest priority first; their scores, float, higher first, NaN for the
        jobs outside a network's window, which come last in FCFS order). A rule's score is its priority
        negated, on the environment's clock; SJF's, the requested time in whole seconds negated."""
        td, jobs = self._observe(snap, waiting, window, clock_start)
        score = self.policy.ranking(td)[0]  # lower first
        slots = torch.sort(score, stable=True).indices
        slots = slots[torch.isfinite(score[slots]) & (score[slots] < NEVER)]
        ranked = jobs[slots.numpy()]
        rest = np.setdiff1d(np.flatnonzero(waiting), ranked)  # sorted: FCFS order
        sjf = getattr(self.policy, "name", None) == "sjf"  # its key packs the submit time in: show the request
        shown = np.ceil(snap.requested[ranked]) if sjf else score[slots].double().numpy()
        self._decision.order = ranked  # _observe made the decision current
        return np.concatenate([ranked, rest]), np.concatenate([-shown + 0.0, np.full(len(rest), np.nan)])  # no -0.0

    def pick(self, snap: Snapshot, waiting: np.ndarray, window: int | None, clock_start: float | None) -> int:
        """The waiting job (an index into the snapshot's waiting jobs) the policy starts next, the jobs
        not `waiting` (bool [Q]) having started now."""
        if type(self.policy) is QueueHeuristic:  # a rule's priority reads no free nodes: one ranking a decision
            kept = self._current(snap, self._clock(clock_start))
            if kept is None or kept.order is None:
                self.ranking(snap, np.ones_like(waiting), window, clock_start)
            order = self._decision.order
            return int(order[np.argmax(waiting[order])])
        td, jobs = self._observe(snap, waiting, window, clock_start)
        return int(jobs[int(self.policy(td)["action"][0])])

    def _observe(self, snap: Snapshot, waiting: np.ndarray, window: int | None, clock_start: float | None) -> tuple:
        """The environment's observation (a TensorDict of batch [1]) and, per window slot, the waiting
        job it shows (int64 [W], -1 empty)."""
        state = self._state(snap, waiting, self._clock(clock_start))
        length = state.length
        cfg = replace(self.base, nodes=snap.nodes, processors_per_node=snap.processors_per_node, sequence_length=length,
                      window=length if self.whole_queue else window)
        out = step_and_observe(state, torch.full((1,), -1, dtype=torch.int64), cfg)
        td = TensorDict(observation(state, out), batch_size=[1])
        running = len(snap.running_id)
        slot_job = out["window_job"][0].long().numpy()
        return td, np.where(slot_job >= 0, slot_job - running, -1)


def clock_reason(policy, cfg: QueueConfig) -> str | None:
    """What of `policy` (running with `cfg`) depends on the clock's origin, not only on spans of time
    (None: nothing; FCFS's order, waits and requests are the same on any clock)."""
    if cfg.clock:
        return "the time of day"
    if "f1" in cfg.rule_ranks:
        return "F1's ranks (log10 of submit times)"
    if isinstance(policy, QueueHeuristic) and policy.name == "f1":
        return "log10 of submit times (F1)"
    if isinstance(policy, LinearRule) and float(policy.scaled_weights[LOG_SUBMIT]) != 0:
        return "log10 of submit times (its log_submit weight)"
    return None


def needs_clock_start(spec: str, reason: str) -> str:
    """The one-line refusal of policy `spec`, which reads `reason`, without a clock start."""
    return (f"{spec} reads {reason}, which depends on where the clock starts: give --clock_start SECONDS, "
            "where your log's time 0 is on the snapshots' clock (the shipped policies learned on logs whose "
            "time 0 is their start; docs/deploy.md)")


def own_backfill(spec: str, record: QueueCheckpoint | None) -> str:
    """The backfilling policy `spec` (its `record`; None: a rule) decides with by default: what its
    record says it trained (or was searched) with; a rule's, or a record's that says none: off."""
    backfill = (record.trained_on()[2] if record is not None else None) or "off"
    if backfill not in BACKFILL:
        raise ConfigError(f"{spec}: provenance.backfill must be off or easy, got {backfill!r}")
    return backfill


def snapshot_state(snap: Snapshot, waiting: np.ndarray, clock_start: float) -> QueueState:
    """A one-row QueueState of `snap` with the waiting jobs not `waiting` (bool [Q]) started now, on the
    snapshot's clock less `clock_start`, in whole seconds: the running jobs first (started now,
    requested until their expected end or now), then the waiting jobs in the snapshot's FCFS order.
    SnapshotError naming the field when a time falls before `clock_start` or 2^40 s after it."""
    earliest = float(snap.submit.min(initial=snap.now))
    for name, value in (("now", snap.now), ("the earliest submit", earliest)):
        if value < clock_start:
            raise SnapshotError(f"clock_start: {clock_start:g} is after {name} ({value:g})")
    if snap.now - clock_start >= MAX_EPISODE_SECONDS:
        raise SnapshotError(f"now: {snap.now:g} is 2^40 s or more after clock_start ({clock_start:g}), the "
                            "environment's limit")
    longest = int(np.argmax(snap.requested)) if len(snap.requested) else None
    if longest is not None and snap.now - clock_start + snap.requested[longest] >= MAX_EPISODE_SECONDS:
        raise SnapshotError(f"waiting[{longest}].requested_time: {snap.requested[longest]:g} ends past 2^40 s after "
                            f"clock_start, the environment's limit (job {snap.waiting_id[longest]!r})")
    latest = int(np.argmax(snap.running_end)) if len(snap.running_end) else None
    if latest is not None and snap.running_end[latest] - clock_start >= MAX_EPISODE_SECONDS:
        raise SnapshotError(f"running[{latest}].expected_end: {snap.running_end[latest]:g} is 2^40 s or more after "
                            f"clock_start, the environment's limit (job {snap.running_id[latest]!r})")
    now = round(snap.now - clock_start)
    ends = np.maximum(np.rint(snap.running_end - clock_start).astype(np.int64), now)
    request = np.concatenate([ends - now, np.ceil(snap.requested).astype(np.int64)])
    running = len(snap.running_id)
    submit = np.concatenate([np.full(running, min(now, round(earliest - clock_start))),
                             np.rint(snap.submit - clock_start).astype(np.int64)])
    nodes = np.concatenate([snap.running_nodes, snap.nodes_needed]).astype(np.int64)
    busy = np.concatenate([np.ones(running, dtype=bool), ~waiting])
    length = len(submit)

    def column(values, dtype=torch.int64) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values)).to(dtype).reshape(1, -1).contiguous()

    zeros = torch.zeros(1, dtype=torch.int64)
    return QueueState(
        submit=column(submit), run=column(np.maximum(request, 1)), requested=column(request),
        processors=column(np.concatenate([snap.running_nodes * snap.processors_per_node, snap.processors])),
        nodes=column(nodes), status=column(np.where(busy, RUNNING, WAITING), torch.int8),
        start=column(np.where(busy, now, -1)), start_rank=column(np.where(busy, np.cumsum(busy) - 1, -1)),
        time=torch.tensor([now]), free_nodes=torch.tensor([snap.nodes - int(nodes[busy].sum())]),
        next_arrival=torch.tensor([length]), done=torch.zeros(1, dtype=torch.bool),
        bsld_sum=torch.zeros(1, dtype=torch.float64), sjf_order=torch.zeros(1, length, dtype=torch.int32),
        size_order=torch.zeros(1, length, dtype=torch.int32), order_count=zeros, order_arrival=zeros.clone())

