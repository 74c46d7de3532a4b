"""The one rollout loop of the queue env: every row from its reset to its end, each step's chosen
keys kept. PPO's rollout (tasks/queue_ppo.py), REINFORCE's (queue.adaptation: MAML's inner loop,
adapt.py) and evaluation all play through `collect`, in one axis order: the steps it keeps are
[B, T], rows first, as TorchRL's rollout lays them out; a consumer that reads decisions [T, B]
(DeepRM's sequence baseline) transposes."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from .env import QueueEnv


def collect(env: QueueEnv, act: Callable[[TensorDictBase], TensorDictBase], keys: Sequence | None = ()) -> TensorDict:
    """Reset `env` and step it with `act` (td -> td with "action", and whatever else it writes) until
    every row is done; the rows done first step on, their actions ignored by the env.

    Returns the steps as a TensorDict [B, T] on the env's device, T the decision steps taken: of
    each step's TensorDict the `keys` it holds (those absent are skipped), e.g. the observation
    "job_features" [B, T, W, F], what `act` wrote ("action" [B, T]), "done" [B, T, 1] (the row was
    finished before the step: its action did not count) and ("next", "reward") [B, T, 1]. With no
    `keys` (None or empty: evaluation) nothing is kept: an empty TensorDict [B, T].
    `env.episode_metrics()` then holds the episodes' results."""
    td, steps, taken = env.reset(), [], 0
    while not bool(td["done"].all()):
        td = env.step(act(td))
        if keys:
            steps.append(td.select(*keys, strict=False))
        taken += 1
        td = td["next"]
    if steps:
        return torch.stack(steps, 1)
    return TensorDict({}, batch_size=[*env.batch_size, taken], device=env.device)


def labelled(act: Callable[[TensorDictBase], TensorDictBase], labeler: Callable[[TensorDictBase], TensorDictBase]):
    """`act` for `collect`, each state also given `labeler`'s pick in it as "label" (DAgger's teacher
    labelling the states another policy visits)."""
    def both(td: TensorDictBase) -> TensorDictBase:
        label = labeler(td.clone())["action"]  # before `act` writes to the state
        td = act(td)
        td["label"] = label
        return td
    return both
