"""The state of B queue episodes (`QueueState`): the jobs of each episode's sequence and where each
one is (to arrive, waiting, running, ended). `step.py` changes it; this module only defines it."""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

# job status codes (QueueState.status)
FUTURE, WAITING, RUNNING, ENDED = 0, 1, 2, 3


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
    time:       LongTensor[B]     now, seconds
    free_nodes: LongTensor[B]
    next_arrival: LongTensor[B]   index of the next job to arrive (L when all have)
    done:       BoolTensor[B]     every job has arrived and the queue is empty (running jobs may remain)
    bsld_sum:   DoubleTensor[B]   bounded slowdowns of the jobs started so far, summed
    """

    submit: torch.Tensor
    run: torch.Tensor
    requested: torch.Tensor
    processors: torch.Tensor
    nodes: torch.Tensor
    status: torch.Tensor
    start: torch.Tensor
    time: torch.Tensor
    free_nodes: torch.Tensor
    next_arrival: torch.Tensor
    done: torch.Tensor
    bsld_sum: torch.Tensor

    @property
    def batch(self) -> int:
        return self.submit.shape[0]

    @property
    def length(self) -> int:
        return self.submit.shape[1]

    def rows(self, index: torch.Tensor) -> QueueState:
        """The episodes `index` (LongTensor[N]) as a new state (a copy)."""
        return QueueState(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def put_rows(self, index: torch.Tensor, other: QueueState) -> QueueState:
        """This state with rows `index` replaced by `other`'s rows (in place; returns self)."""
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(other, f.name)
        return self

    def clone(self) -> QueueState:
        return QueueState(**{f.name: getattr(self, f.name).clone() for f in fields(self)})
