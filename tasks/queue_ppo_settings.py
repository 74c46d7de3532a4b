"""The settings of tasks.queue_ppo.QueuePPO: PPO's knobs (`PPOSettings`) and the fixed validation
sequences (`QueueValidation`), checked when built (a config's `ppo:` and `validation:` sections)."""
from __future__ import annotations

from dataclasses import dataclass

from lightning_sched import seeds
from lightning_sched.config import ConfigError
from lightning_sched.queue.evaluation import EVAL_LENGTH, RLSCHEDULER_STARTS

from .base import require_at_least, require_positive


@dataclass
class PPOSettings:
    """PPO's knobs. Defaults: RLScheduler's (clip 0.2, gamma 1, lambda 0.97, lr 3e-4)."""

    lr: float = 3e-4
    """Adam's learning rate, actor and critic. RLScheduler: pi_lr 3e-4."""
    clip: float = 0.2
    """Clip range of the probability ratio. RLScheduler: 0.2."""
    epochs: int = 4
    """Passes over each iteration's decisions."""
    minibatch_size: int = 1024
    """Decisions per optimizer step."""
    gamma: float = 1.0
    """Discount. RLScheduler: 1 (the return is minus the mean bounded slowdown)."""
    gae_lambda: float = 0.97
    """GAE's lambda. RLScheduler: 0.97."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus. RLScheduler: none."""
    critic_coef: float = 0.5
    """Weight of the critic's loss."""
    reward_scale: float = 100.0
    """Rewards are divided by this before GAE and the critic: returns of minus a mean bounded
    slowdown (hundreds to thousands on Lublin logs) become a few units, which a critic can fit."""
    max_grad_norm: float = 1.0
    """Gradient norm clip of each step."""
    advantage: str = "gae"
    """"gae": GAE(gamma, lambda) with the critic; "sequence": DeepRM's time-indexed baseline (the
    return from decision t minus its mean over the episodes of the same sequence), which removes
    the sequence-to-sequence spread of bounded slowdown that a critic seeing the window cannot."""
    episodes_per_sequence: int = 1
    """Episodes of each sampled sequence in an iteration (batch_size / this sequences); > 1 for
    advantage "sequence"."""
    prior_kl: float = 0.0
    """With a network that starts from a rule (policy.prior): weight of KL(pi_theta || the rule's
    softmax) per decision in the loss, which keeps the learned departures from the rule small where
    the returns do not pay for them. 0: none."""
    scale_per_sequence: bool = False
    """With advantage "sequence": divide each sequence's advantages by their root mean square over
    its episodes' decisions (`per_sequence_scaled`), so that every sequence weighs the same in an
    update; otherwise the few sequences whose bounded slowdown runs to thousands outweigh the rest.
    ClipPPOLoss then normalises each minibatch's advantages as it always does (mean 0, std 1)."""

    def __post_init__(self) -> None:
        require_at_least("QueuePPO.ppo", 1, epochs=self.epochs, minibatch_size=self.minibatch_size,
                         episodes_per_sequence=self.episodes_per_sequence)
        if self.advantage not in ("gae", "sequence"):
            raise ConfigError(f"QueuePPO.ppo.advantage must be 'gae' or 'sequence', got {self.advantage!r}")
        if self.advantage == "sequence" and self.episodes_per_sequence < 2:
            raise ConfigError("QueuePPO.ppo.advantage 'sequence' needs episodes_per_sequence >= 2")
        if self.scale_per_sequence and self.advantage != "sequence":
            raise ConfigError("QueuePPO.ppo.scale_per_sequence needs advantage 'sequence'")
        require_positive("QueuePPO.ppo", lr=self.lr, reward_scale=self.reward_scale, max_grad_norm=self.max_grad_norm)
        if not 0 < self.clip < 1:
            raise ConfigError(f"QueuePPO.ppo.clip must be in (0, 1), got {self.clip}")
        for name in ("gamma", "gae_lambda"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"QueuePPO.ppo.{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("entropy_coef", "critic_coef", "prior_kl"):
            if getattr(self, name) < 0:
                raise ConfigError(f"QueuePPO.ppo.{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class QueueValidation:
    """The fixed sequences the greedy policy is measured on at every validation, drawn once with
    `seed` (a validation seed: training never draws it) from `range(train_fraction)`: the training
    range unless start_fraction or end_fraction move it."""

    sequences: int = len(RLSCHEDULER_STARTS)
    """Sequences (RLScheduler's evaluation: 10)."""
    sequence_length: int = EVAL_LENGTH
    """Jobs per sequence (RLScheduler's evaluation: 1024)."""
    seed: int = seeds.VALIDATION
    start_fraction: float = 0.0
    """Validation sequences start at or after this share of each log's jobs: 0.0, anywhere in the
    training range; e.g. 0.6, only the most recent part, nearer in time to what a held-out test of
    the log's end measures."""
    end_fraction: float | None = None
    """... and end before this share: None, the training range's end (`train_fraction`). Above it,
    the validation jobs are ones training never replays (e.g. train on 60%, choose on 60-80%); the
    checkpoint then records this share as the part of the log the run has read."""

    def range(self, train_fraction: float) -> tuple[float, float]:
        """(start, end) shares of each log's jobs the validation sequences lie in, checked."""
        end = train_fraction if self.end_fraction is None else self.end_fraction
        if not 0 < end <= 1:
            raise ConfigError(f"QueuePPO.validation.end_fraction must be in (0, 1], got {end}")
        if not 0 <= self.start_fraction < end:
            raise ConfigError(f"QueuePPO.validation.start_fraction must be in [0, end_fraction={end}), "
                              f"got {self.start_fraction}")
        return self.start_fraction, end
