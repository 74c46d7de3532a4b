"""Adapting a queue policy to a site in a few policy-gradient steps: the inner loop of queue MAML
(tasks/queue_maml.py) and what `scripts/adapt.py --env queue` runs.

    for each step:
        roll out N sequences x E episodes of the site's own history with pi_theta (sampled)
        A_t = return from decision t - its mean over the E episodes of the sequence   (DeepRM's baseline)
        theta <- theta - lr * grad( -mean_t log pi_theta(a_t | s_t) A_t / std(A) )   (REINFORCE)

The rollout runs without gradients; the loss recomputes the log-probabilities of the recorded
decisions with the network given, so a `higher` fast-weight network differentiates through it.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from tensordict import TensorDict, TensorDictBase

from ..config import ConfigError, is_finite, is_int
from ..learning.adaptation import adaptation_step, make_optimizer
from ..learning.policy_gradient import sequence_advantages, std_scaled
from ..limits import require_total
from .env import QueueEnv, env_bytes, rollout_bytes
from .policy import IN_KEYS, QueuePolicySpec, choose, log_prob
from .rollout import collect

# what a REINFORCE step keeps of each step: the network's inputs, the job drawn from its softmax
# ("first"; with a reservation the env may have started another), whether the row was done, the reward
KEPT = (*IN_KEYS, "action_mask", "first", "done", ("next", "reward"))


@torch.no_grad()
def rollout(env: QueueEnv, net, spec: QueuePolicySpec, generator: torch.Generator | None = None,
            greedy: bool = False, device: torch.device | str | None = None, keys: Sequence | None = KEPT
            ) -> TensorDict:
    """Every row of `env` from its reset to its end (`collect`) with `net` (a QueueNetwork, its scorer
    or a functional copy of it) of policy `spec`, each decision by `choose` (drawn with `generator`,
    or greedy), which also writes the job it drew as "first". `net` runs on `device` (None: where its
    weights are). Returns the steps' `keys` [B, T] (rows b*E..b*E+E-1 replaying one sequence) on
    `device`; by default KEPT:

        job_features [B, T, W, F], cluster_features [B, T, C], action_mask [B, T, W]
        first [B, T]        the job drawn (its log-probability is the loss's); with a reservation
                            (QueuePolicySpec.reserve) "action", the job the env was asked to start,
                            may be another
        done [B, T, 1]      the row was finished before step t (its decision did not count)
        ("next", "reward") [B, T, 1]

    `env.episode_metrics()` then holds the episodes' results (on the env's device)."""
    device = next(net.parameters()).device if device is None else torch.device(device)

    def act(td: TensorDictBase) -> TensorDictBase:
        _, td["first"] = choose(net, spec, td, device, greedy, generator)
        return td

    return collect(env, act, keys).to(device)


def reinforce_loss(net, traj: TensorDict, episodes: int) -> torch.Tensor:
    """DeepRM's REINFORCE loss of `net` on the decisions of `traj` (`rollout`'s steps [B, T]): -mean
    over active decisions of log pi(a_t | s_t) x A_t, A_t the return from t minus its mean over the
    `episodes` episodes of the sequence (TimeIndexedBaseline), divided by the advantages' standard
    deviation (so one step size serves sites whose bounded slowdowns differ by orders of magnitude).
    A scalar tensor."""
    steps = traj.transpose(0, 1)  # [T, B], as DeepRM's baselines lay decisions out (and the mean sums them)
    active = ~steps["done"].squeeze(-1)
    advantage, _ = sequence_advantages(steps["next", "reward"].squeeze(-1), active, episodes)
    advantage = std_scaled(advantage, active)[active]
    return -(log_prob(net, steps[active]) * advantage.detach()).mean()


def site_env(log, cfg, sequences: int, episodes: int, positions: tuple[int, int], seed: int) -> QueueEnv:
    """The training env of one site: `sequences` fresh sequences a reset, drawn from `positions`, each
    played `episodes` times."""
    return QueueEnv(cfg, log, batch_size=[sequences * episodes], positions=positions, seed=seed,
                    episodes_per_sequence=episodes)


@dataclass(frozen=True)
class QueueInnerLoop:
    """A queue meta-policy's inner loop, as its checkpoint records it ("adaptation"): `steps`
    REINFORCE steps of `lr` on `sequences` sequences x `episodes` episodes of a site's history;
    `step_sizes`, each weight's multiplier of lr ({scorer parameter name: tensor}, Meta-SGD's learned
    ones or QueueMAML's fixed 0 and 1), or None. A policy without a record adapts with the defaults."""

    steps: int = 1
    lr: float = 0.1
    sequences: int = 4
    episodes: int = 4
    step_sizes: dict[str, torch.Tensor] | None = field(default=None, compare=False)  # tensors: no ==

    def __post_init__(self) -> None:
        for name, low in (("steps", 0), ("sequences", 1), ("episodes", 1)):
            if not is_int(getattr(self, name), low):
                raise ConfigError(f"the inner loop's {name} must be an integer >= {low}, got {getattr(self, name)!r}")
        if not is_finite(self.lr) or self.lr <= 0:
            raise ConfigError(f"the inner loop's lr must be a finite number > 0, got {self.lr!r}")
        sizes = self.step_sizes
        if sizes is not None and not (isinstance(sizes, dict) and all(
                isinstance(name, str) and isinstance(a, torch.Tensor) for name, a in sizes.items())):
            raise ConfigError(f"the inner loop's step_sizes must map weight names to tensors, "
                              f"got {type(sizes).__name__}")

    @classmethod
    def of(cls, record: dict | None, path=None) -> QueueInnerLoop:
        """The inner loop a checkpoint's record holds (None: the defaults); ConfigError naming `path`
        (the checkpoint, when given) for a damaged one."""
        try:
            if record is not None and not isinstance(record, dict):
                raise ConfigError(f"the inner loop's record must be a dict, got {type(record).__name__}")
            unknown = {str(key) for key in record or {}} - {"steps", "lr", "sequences", "episodes", "step_sizes"}
            if unknown:
                raise ConfigError(f"the inner loop's record holds unknown fields: {', '.join(sorted(unknown))}")
            return cls(**(record or {}))
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}" if path is not None else str(error)) from None

    def to_record(self) -> dict:
        """As a checkpoint holds it: plain numbers, and the step sizes (when any) as CPU tensors."""
        record = {"steps": self.steps, "lr": self.lr, "sequences": self.sequences, "episodes": self.episodes}
        if self.step_sizes is not None:
            record["step_sizes"] = {name: a.detach().cpu().clone() for name, a in self.step_sizes.items()}
        return record


def adapt(net, spec: QueuePolicySpec, env: QueueEnv, steps: int, lr: float, episodes: int,
          generator: torch.Generator | None = None, optimizer: str = "sgd", after_step=None,
          step_sizes: dict[str, torch.Tensor] | None = None) -> list[float]:
    """`steps` REINFORCE steps of `net` (a scorer of policy `spec`, in place) on rollouts of `env`
    (rows b*E..b*E+E-1 one sequence, E = `episodes`) with SGD (MAML's inner step) or Adam;
    `after_step(k)` is called after step k (1-based). `step_sizes` (SGD only): each weight's
    multiplier of `lr`, learned by Meta-SGD or fixed (1 or 0) by QueueMAML.inner_params, {name in
    net.named_parameters(): tensor of its shape}. Returns each step's rollout mean bounded slowdown
    (sampled actions)."""
    if step_sizes is not None and optimizer != "sgd":
        raise ConfigError(f"adaptation step_sizes (learned per weight) need optimizer 'sgd', got {optimizer!r}")
    opt = make_optimizer(optimizer, net.parameters(), lr)
    seen = []
    for _ in range(steps):
        traj = rollout(env, net, spec, generator)
        seen.append(float(env.episode_metrics()["mean_bounded_slowdown"].mean()))
        adaptation_step(net, opt, reinforce_loss(net, traj, episodes), len(seen), step_sizes)
        if after_step is not None:
            after_step(len(seen))
    return seen


def adaptation_curve(net, log, cfg, starts: torch.Tensor, steps: int, lr: float, sequences: int, episodes: int,
                     train_jobs: int, seed: int, optimizer: str = "sgd", train_length: int = 256,
                     measure_at=None, step_sizes: dict[str, torch.Tensor] | None = None
                     ) -> tuple[dict[int, torch.Tensor], torch.nn.Module]:
    """A copy of `net` adapted `steps` times to `log` (rollouts of `train_length` jobs from its first
    `train_jobs` jobs, seeded by `seed`), measured greedily after the steps in `measure_at` (default
    0..steps; 0: before the first) on the sequences of `cfg` starting at `starts`; only its scorer
    moves (with `step_sizes`, adapt's, when given). Returns ({step:
    DoubleTensor[N] of each sequence's mean bounded slowdown}, the adapted copy)."""
    net = copy.deepcopy(net).train()
    measure_at = set(range(steps + 1)) if measure_at is None else set(measure_at)
    train_cfg = replace(cfg, sequence_length=train_length)
    rows = sequences * episodes  # a step's rollout: its envs' state and the decisions it keeps for the loss
    require_total("the adaptation's rollouts", {"envs": env_bytes(train_cfg, rows) + env_bytes(cfg, len(starts)),
                                                "rollouts": rollout_bytes(train_cfg, rows)},
                  {"sequences": sequences, "episodes": episodes, "sequence_length": train_length})
    train_env = site_env(log, train_cfg, sequences, episodes, log.positions(0, train_jobs, train_length), seed)
    test_env = QueueEnv(cfg, log, batch_size=[len(starts)], starts=starts)
    curve = {}

    def measure(step: int) -> None:
        if step in measure_at:
            with torch.no_grad():  # measuring needs no graph (callers adapting under enable_grad included)
                rollout(test_env, net, net.spec, greedy=True, keys=())
                curve[step] = test_env.episode_metrics()["mean_bounded_slowdown"]

    measure(0)
    adapt(net.scorer, net.spec, train_env, steps, lr, episodes, torch.Generator().manual_seed(seed), optimizer,
          after_step=measure, step_sizes=step_sizes)
    return curve, net
