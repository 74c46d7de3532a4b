"""What the batched envs (deeprm.env.ClusterEnv, queue.env.QueueEnv) share: which rows a TorchRL
reset asks for, what lets a batched policy drive an unbatched env, and the dtype checks of what a
step or reset is given (one check per call, no scan of the rows: a float action would be truncated,
0.9 scheduling slot 0, and an integer "_reset" of row indices read as a mask)."""
from __future__ import annotations

import functools

import torch
from tensordict import TensorDictBase

from .config import ConfigError


def require_integer_action(action: torch.Tensor) -> torch.Tensor:
    """`action` unchanged when it holds integers (slot indices); a ConfigError for a float or bool one."""
    if action.is_floating_point() or action.is_complex() or action.dtype == torch.bool:
        raise ConfigError(f'"action" must hold integer slot indices, got dtype {action.dtype}')
    return action


def rows_to_reset(tensordict: TensorDictBase | None, has_state: bool) -> torch.Tensor | None:
    """The rows (LongTensor[N]) a partial reset asks for through "_reset"; None for a whole reset
    (no "_reset", or no state yet)."""
    rows = None if tensordict is None else tensordict.get("_reset", None)
    if rows is not None and rows.dtype != torch.bool:
        raise ConfigError(f'"_reset" must be a bool mask over the rows, got dtype {rows.dtype} (row indices? '
                          "set those rows to True)")
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
