"""What the batched envs (deeprm.env.ClusterEnv, queue.env.QueueEnv) share: which rows a TorchRL
reset asks for and how its output is merged, what lets a batched policy drive an unbatched env, and
the dtype checks of what a step or reset is given (one check per call, no scan of the rows: a float
action would be truncated, 0.9 scheduling slot 0, and an integer "_reset" of row indices read as a
mask)."""
from __future__ import annotations

import functools

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase

from .config import ConfigError
from .limits import require_memory


def require_integer_action(action: torch.Tensor) -> torch.Tensor:
    """`action` unchanged when it holds integers (slot indices); a ConfigError for a float or bool one."""
    if action.is_floating_point() or action.is_complex() or action.dtype == torch.bool:
        raise ConfigError(f'"action" must hold integer slot indices, got dtype {action.dtype}')
    return action


def require_slot_actions(tensordict: TensorDictBase, state, rows: int) -> torch.Tensor:
    """The step's "action" as LongTensor[rows], one slot index a row; a one-line error for a step
    before any reset (`state` None) or an action of another shape (a one-hot vector, say)."""
    if state is None:
        raise RuntimeError("step() before reset(): call env.reset() first")
    action = require_integer_action(tensordict["action"])
    if action.numel() != rows:
        raise ConfigError(f'"action" must be one slot index a row, {rows} in all, got shape {list(action.shape)} '
                          "(a one-hot action? its argmax is the slot)")
    return action.reshape(rows).to(torch.int64)


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


class EveryRowReset(EnvBase):
    """An EnvBase whose `_reset` returns every row, the rows a partial reset leaves exactly as their
    last step showed them, but in `STEP_ONLY_KEYS` (what only a step reports, e.g. the metrics of the
    episodes that ended at it). TorchRL merges a partial reset's output with a `where` over every key
    by the "_reset" mask, which here copies what is there (images, [B, L] sequences); given the last
    step's output, as TorchRL's collectors and rollouts give it, this merge gives the same result: the
    reset's keys, but STEP_ONLY_KEYS of the rows not reset kept, and 0 in the keys the reset does not
    write (a step's "reward") for the rows reset (TorchRL's padding). Values a caller changed in the
    rows not reset are not kept. An input of "_reset" alone (SerialEnv and ParallelEnv reset their
    envs so) gets every row as it stands, where TorchRL's merge would fill the rows not reset with
    zeros (no visible job: a masked draw fails). (Under a TransformedEnv, TorchRL's `where` merge
    runs: the transform calls the base env's `_reset`.)"""

    STEP_ONLY_KEYS: tuple = ()
    EPISODE_KEYS: tuple = ()  # the results a step writes under "episode" for the episodes ending at it
    ROLLOUT_COPIES = 3.5
    """`rollout` holds each step's outputs and the stacked result's two halves (root and next): peak
    bytes of 3.2-3.3 times the steps' outputs measured on ClusterEnv, with the image and with
    observation "none" (B = 256, 100 steps)."""

    def finished_results(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each of EPISODE_KEYS (a [N] tensor) of the episodes of rows `rows` (LongTensor[N]), which
        have just ended: a subclass's metrics."""
        raise NotImplementedError

    def _finished_metrics(self, ended: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """EPISODE_KEYS of the rows whose episode ended at this step (`ended`: BoolTensor[rows]), NaN
        elsewhere (and at a reset): each DoubleTensor[rows, 1]. A rollout or collector that resets
        finished rows keeps each finished episode's results on its last step."""
        results = torch.full((self.rows, len(self.EPISODE_KEYS)), float("nan"), dtype=torch.float64,
                             device=self.device)
        if ended is not None and bool(ended.any()):
            rows = ended.nonzero().squeeze(1)  # the results read every job of a row: only the rows that ended
            metrics = self.finished_results(rows)
            results.index_put_((rows,), torch.stack([metrics[k].double() for k in self.EPISODE_KEYS], -1))
        return {k: results[:, i:i + 1] for i, k in enumerate(self.EPISODE_KEYS)}

    def size_fields(self) -> dict:
        """The settings a rollout's memory grows with, named in its refusal (a subclass adds its own)."""
        return {"batch_size": list(self.batch_size)}

    def step_bytes(self) -> int:
        """Bytes of one step's outputs over the batch: every observation key, the action, the reward
        and the done flags."""
        specs = (self.full_observation_spec, self.full_action_spec, self.full_reward_spec, self.full_done_spec)
        return sum(spec.shape.numel() * spec.dtype.itemsize for specs_ in specs for spec in specs_.values(True, True))

    def rollout(self, max_steps: int, *args, **kwargs) -> TensorDictBase:
        """`EnvBase.rollout`, refused before anything is allocated (one ConfigError line) when its
        steps would not fit in `limits.memory_budget()` (ROLLOUT_COPIES times the steps' outputs)."""
        need = self.ROLLOUT_COPIES * max_steps * self.step_bytes()
        require_memory(f"{type(self).__name__}.rollout({max_steps})", need,
                       {"max_steps": max_steps, **self.size_fields()})
        return super().rollout(max_steps, *args, **kwargs)

    def _reset_proc_data(self, tensordict, tensordict_reset):
        written = set(tensordict_reset.keys(True, True))
        if tensordict is None or not self.batch_size:
            return super()._reset_proc_data(tensordict, tensordict_reset)
        self._complete_done(self.full_done_spec, tensordict_reset)
        self._reset_check_done(tensordict, tensordict_reset)
        reset = tensordict.pop("_reset", None)  # these envs' one reset key: done flags at the root
        if reset is not None and not bool(reset.all()):
            rows = reset.reshape(-1)

            def mask(value):
                return rows.view(-1, *[1] * (value.ndim - 1))

            for key in set(tensordict.keys(True, True)) - written:
                value = tensordict.get(key)
                tensordict.set(key, value.masked_fill(mask(value), 0))
            for key in self.STEP_ONLY_KEYS:
                if key in tensordict.keys(True, True):
                    fresh = tensordict_reset.get(key)
                    tensordict_reset.set(key, torch.where(mask(fresh), fresh, tensordict.get(key)))
        return tensordict.update(tensordict_reset)


def acts_on_any_batch(call):
    """Decorate a batched policy's `__call__(self, td)` (td of batch shape [B]) so that it acts on a
    TensorDict of any batch shape: unbatched ([], e.g. `ClusterEnv(batch_size=[])`) as one row,
    several batch dims (a SerialEnv's or ParallelEnv's [workers, B]) as their rows in one; its
    "action" written back in the TensorDict's own batch shape."""

    @functools.wraps(call)
    def wrapper(self, td):
        if isinstance(td, TensorDictBase) and td.batch_dims != 1:
            flat = td.reshape(-1) if td.batch_dims else td.unsqueeze(0)
            td["action"] = call(self, flat)["action"].reshape(td.batch_size)
            return td
        return call(self, td)

    return wrapper
