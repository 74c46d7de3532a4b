"""What the batched envs (deeprm.env.ClusterEnv, queue.env.QueueEnv) share: which rows a TorchRL
reset asks for."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase


def rows_to_reset(tensordict: TensorDictBase | None, has_state: bool) -> torch.Tensor | None:
    """The rows (LongTensor[N]) a partial reset asks for through "_reset"; None for a whole reset
    (no "_reset", or no state yet)."""
    rows = None if tensordict is None else tensordict.get("_reset", None)
    if rows is None or not has_state:
        return None
    return rows.reshape(-1).nonzero().squeeze(1)
