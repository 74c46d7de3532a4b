"""What the batched envs (deeprm.env.ClusterEnv, queue.env.QueueEnv) share: which rows a TorchRL
reset asks for; and what lets a batched policy drive an unbatched env."""
from __future__ import annotations

import functools

import torch
from tensordict import TensorDictBase


def rows_to_reset(tensordict: TensorDictBase | None, has_state: bool) -> torch.Tensor | None:
    """The rows (LongTensor[N]) a partial reset asks for through "_reset"; None for a whole reset
    (no "_reset", or no state yet)."""
    rows = None if tensordict is None else tensordict.get("_reset", None)
    if rows is None or not has_state:
        return None
    return rows.reshape(-1).nonzero().squeeze(1)


def accepts_unbatched(call):
    """Decorate a batched policy's `__call__(self, td)` so that it also acts on an unbatched
    TensorDict (batch dims [], e.g. from `ClusterEnv(batch_size=[])`): as one row, its "action"
    written back without the batch dim."""

    @functools.wraps(call)
    def wrapper(self, td):
        if isinstance(td, TensorDictBase) and td.batch_dims == 0:
            td["action"] = call(self, td.unsqueeze(0))["action"][0]
            return td
        return call(self, td)

    return wrapper
