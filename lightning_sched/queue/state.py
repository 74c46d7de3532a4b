"""The state of B queue episodes (`QueueState`): the jobs of each episode's sequence and where each
one is (to arrive, waiting, running, ended). `step.py` changes it; this module only defines it."""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..config import ConfigError

# job status codes (QueueState.status)
FUTURE, WAITING, RUNNING, ENDED = 0, 1, 2, 3
# the native kernel's fields of QueueState, which the torch step leaves alone (the class's docstring)
KERNEL_ORDERS = ("sjf_order", "size_order", "order_count", "order_arrival")
JOB_COLUMNS = ("submit", "run", "requested", "processors")  # a sequence's jobs, as a log gives them
# every start and end of an episode stays below this: the native kernel sorts end times packed into the top 40
# bits of a 64-bit key (native.PACKED_BITS below them)
MAX_EPISODE_SECONDS = 1 << 40
# "no such time" or "no such job": an empty cluster's next completion, the key of a slot no job fills
NEVER = torch.iinfo(torch.int64).max


@dataclass
class QueueState:
    """B episodes of L jobs each. Jobs are in arrival order (submit time, then job number), so the
    FCFS order of the waiting jobs is their index order, and job `next_arrival` arrives next.

    submit:     LongTensor[B, L]  submit time, seconds
    run:        LongTensor[B, L]  actual run time, seconds (drives completions; the policy never sees it)
    requested:  LongTensor[B, L]  requested time, seconds (what the policy and backfilling see)
    processors: LongTensor[B, L]
    nodes:      LongTensor[B, L]  ceil(processors / processors_per_node)
    status:     Int8Tensor[B, L]  FUTURE, WAITING, RUNNING or ENDED
    start:      LongTensor[B, L]  start time, -1 until the job starts
    start_rank: LongTensor[B, L]  how many jobs of the row started before it, -1 until it starts: of
                                  running jobs that end in the same second, the one started first
                                  ends first (RLScheduler's stable sorts of its running list)
    time:       LongTensor[B]     now, seconds
    free_nodes: LongTensor[B]
    next_arrival: LongTensor[B]   index of the next job to arrive (L when all have)
    done:       BoolTensor[B]     every job has arrived and the queue is empty (running jobs may remain)
    bsld_sum:   DoubleTensor[B]   bounded slowdowns of the jobs started so far, summed

    The native kernel's memory of the window's two sorted orders (not the queue's state: the torch
    step neither reads nor writes them, and init_state starts them empty):
    sjf_order, size_order: IntTensor[B, L]  waiting jobs' indices by (requested, index) and by
                                  (processors, index), the first order_count of each valid
    order_count:   LongTensor[B]  how many jobs waited when the orders were last written
    order_arrival: LongTensor[B]  next_arrival then: later arrivals are not in them yet
    """

    submit: torch.Tensor
    run: torch.Tensor
    requested: torch.Tensor
    processors: torch.Tensor
    nodes: torch.Tensor
    status: torch.Tensor
    start: torch.Tensor
    start_rank: torch.Tensor
    time: torch.Tensor
    free_nodes: torch.Tensor
    next_arrival: torch.Tensor
    done: torch.Tensor
    bsld_sum: torch.Tensor
    sjf_order: torch.Tensor
    size_order: torch.Tensor
    order_count: torch.Tensor
    order_arrival: torch.Tensor

    @property
    def batch(self) -> int:
        return self.submit.shape[0]

    @property
    def length(self) -> int:
        return self.submit.shape[1]

    def rows(self, index: torch.Tensor) -> QueueState:
        """The episodes `index` (LongTensor[N]) as a new state (a copy)."""
        return QueueState(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def put_rows(self, index: torch.Tensor, other: QueueState, new_tensors: tuple[str, ...] = ()) -> QueueState:
        """This state with rows `index` (LongTensor[N]) replaced by `other`'s N rows, in order (in place;
        returns self). The fields named in `new_tensors` get new tensors instead, so that whoever holds
        the old ones keeps them."""
        index = index.to(device=self.submit.device, dtype=torch.int64)
        for f in fields(self):
            column = getattr(self, f.name)
            if f.name in new_tensors:  # a copy, then rows written: faster than an out-of-place index_copy
                column = column.clone()
                setattr(self, f.name, column)
            column.index_copy_(0, index, getattr(other, f.name))
        return self

    def clone(self) -> QueueState:
        return QueueState(**{f.name: getattr(self, f.name).clone() for f in fields(self)})


def places(order: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
    """Each element's place in `order` (LongTensor[..., N], a permutation of 0..N-1 along the last
    dimension): its inverse, LongTensor[..., N]. `index`: arange(N) expanded as `order`, when the
    caller holds one."""
    if index is None:
        index = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, index)


def init_state(jobs: dict[str, torch.Tensor], nodes: int, processors_per_node: int) -> QueueState:
    """The state at the first arrival of each row's sequence: job 0 waiting, the cluster empty.
    `jobs`: "submit", "run", "requested", "processors", LongTensors [B, L] with submit times in order
    along each row (ConfigError naming the field otherwise, or for a job larger than the cluster)."""
    submit, run, requested, processors = (jobs[k].to(torch.int64).contiguous()
                                          for k in JOB_COLUMNS)
    b, length = submit.shape
    if length > 1 and bool((submit[:, 1:] < submit[:, :-1]).any()):
        raise ConfigError("submit: times must not decrease along a sequence (jobs are replayed in arrival order)")
    for name, values, low in (("run", run, 1), ("requested", requested, 0), ("processors", processors, 1)):
        if bool((values < low).any()):
            raise ConfigError(f"{name}: every job needs {name} >= {low}, got {int(values.min())}")
    # no time of an episode passes its last arrival plus every run time (the clock moves to an arrival or to
    # an end, and each end is a start at an earlier event plus one run), and no requested end the longest request more
    latest = submit[:, -1] + run.sum(1) + requested.max(1).values
    if bool((latest >= MAX_EPISODE_SECONDS).any()):
        raise ConfigError(f"submit, run, requested: a sequence's times could reach second {int(latest.max()):,} (its "
                          "last submit plus its run times and longest request), past 2^40 (the env's limit: the "
                          "native step sorts times in 40 bits)")
    need = (processors + processors_per_node - 1) // processors_per_node
    if bool((need > nodes).any()):
        raise ConfigError(f"processors: a job asks for {int(processors.max())} processors, the cluster has "
                          f"{nodes * processors_per_node}")
    status = torch.zeros(b, length, dtype=torch.int8, device=submit.device)
    status[:, 0] = WAITING
    return QueueState(submit=submit, run=run.contiguous(), requested=requested, processors=processors,
                      nodes=need.contiguous(), status=status, start=torch.full_like(submit, -1),
                      start_rank=torch.full_like(submit, -1),
                      time=submit[:, 0].clone(), free_nodes=torch.full((b,), nodes, dtype=torch.int64,
                                                                       device=submit.device),
                      next_arrival=torch.ones(b, dtype=torch.int64, device=submit.device),
                      done=torch.zeros(b, dtype=torch.bool, device=submit.device),
                      bsld_sum=torch.zeros(b, dtype=torch.float64, device=submit.device),
                      sjf_order=torch.zeros(b, length, dtype=torch.int32, device=submit.device),
                      size_order=torch.zeros(b, length, dtype=torch.int32, device=submit.device),
                      order_count=torch.zeros(b, dtype=torch.int64, device=submit.device),
                      order_arrival=torch.zeros(b, dtype=torch.int64, device=submit.device))
