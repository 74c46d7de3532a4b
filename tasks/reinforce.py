"""REINFORCE with DeepRM's time-indexed baseline (Mao et al., HotNets 2016, Figure 3) as a
LightningModule.

    for each iteration:                                   (training_step)
        draw N jobsets                                    (num_jobsets, this rank's share)
        run E episodes of each with pi_theta              (episodes_per_jobset, one batched env)
        v_t = sum_{s>=t} gamma^(s-t) r_s                  (policy_gradient.discounted_returns)
        b_t = mean over the E episodes of v_t             (baselines.TimeIndexedBaseline)
        dtheta = sum_t grad log pi(a_t|s_t) (v_t - b_t)   (policy_gradient.policy_gradient)
        one optimizer step                                (RMSprop, lr 0.001: DeepRM's)

The upgraded recipe is a set of switches, all off by default (DeepRM's recipe): a masked softmax
(`policy.masked`), an entropy bonus with a linear schedule (`entropy`), advantage normalisation, a
baseline indexed by cluster time (`baseline: ClusterTimeBaseline`), PPO-style clipped reuse of each
batch (`ppo`), a curriculum over load, and a warm start that imitates a heuristic or a trained
policy first (`imitation`).

Data, evaluation, checkpoints and fault checks are `tasks.base.SchedulerTask`'s; under DDP each
rank draws its share of the jobsets and Lightning averages the ranks' gradients.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch

from lightning_sched import ClusterConfig, DeepRMWorkload, JobSet, WorkloadFamily
from lightning_sched.config import REWARD_FIELDS, ConfigError
from lightning_sched.deeprm.objectives import METRICS, episode_metrics
from lightning_sched.deeprm.rollout import collect
from lightning_sched.evaluation import make_jobsets
from lightning_sched.heuristics import HEURISTICS, make_heuristic
from lightning_sched.learning.baselines import Baseline
from lightning_sched.learning.policy_gradient import clipped_surrogate, imitation_loss, policy_gradient
from lightning_sched.policies.checkpoints import load_policy, warm_start
from lightning_sched.policies.networks import PolicySpec
from lightning_sched.traces import TraceWorkload

from .base import EvaluationSettings, SchedulerTask, require_at_least, require_positive


@dataclass
class RMSpropSettings:
    """The optimizer: DeepRM's RMSprop (section 4.1)."""

    lr: float = 1e-3
    """Learning rate. DeepRM: 0.001."""
    alpha: float = 0.9
    """Squared-gradient decay. DeepRM: 0.9."""
    eps: float = 1e-9
    """DeepRM: 1e-9."""


@dataclass
class EntropyBonus:
    """An entropy bonus in the loss: explore early, commit later. DeepRM: none (weight 0)."""

    weight: float = 0.0
    """Weight at the first iteration."""
    end: float | None = None
    """With a value, the weight moves linearly to it over decay_iterations iterations, then stays."""
    decay_iterations: int = 0

    def __post_init__(self) -> None:
        require_at_least("Reinforce.entropy", 0, decay_iterations=self.decay_iterations)
        if self.end is not None and self.decay_iterations < 1:
            raise ConfigError(f"Reinforce.entropy.end={self.end} needs decay_iterations >= 1, "
                              f"got {self.decay_iterations}")

    def at(self, iteration: int) -> float:
        """The weight at `iteration`."""
        if self.end is None:
            return self.weight
        progress = min(1.0, iteration / self.decay_iterations)
        return self.weight + (self.end - self.weight) * progress


@dataclass
class PPOReuse:
    """More optimizer steps on each batch of rollouts. DeepRM: one policy-gradient step (epochs 1)."""

    epochs: int = 1
    """Steps per batch: K > 1 adds K - 1 steps with PPO's clipped objective on the same decisions."""
    clip: float = 0.2
    """PPO's clip range of the probability ratio."""

    def __post_init__(self) -> None:
        require_at_least("Reinforce.ppo", 1, epochs=self.epochs)
        if not 0 < self.clip < 1:
            raise ConfigError(f"Reinforce.ppo.clip must be in (0, 1), got {self.clip}")


@dataclass
class Imitation:
    """DeepRM's supervised pre-training: the network first learns to copy a teacher's actions by
    cross-entropy on the states the teacher visits, for `iterations` iterations, before policy
    gradient. Default: none."""

    teacher: str | None = None
    """A heuristic ("tetris") or a policy checkpoint (a .ckpt of the same cluster, acting as it
    says), e.g. DeepRM's image network distilled into a slot policy."""
    iterations: int = 0

    def __post_init__(self) -> None:
        require_at_least("Reinforce.imitation", 0, iterations=self.iterations)
        if (self.teacher is None) != (self.iterations == 0):
            raise ConfigError(f"Reinforce.imitation: teacher={self.teacher!r} and iterations={self.iterations}: "
                              "give both (a teacher and a number of iterations >= 1) or neither")
        if self.teacher is not None and self.teacher not in HEURISTICS and not self.teacher.endswith(".ckpt"):
            raise ConfigError(f"Reinforce.imitation.teacher={self.teacher!r} is neither a heuristic "
                              f"({', '.join(sorted(HEURISTICS))}) nor a .ckpt file")

    def make_teacher(self, cluster: ClusterConfig):
        """The teacher as a policy on `cluster` (None without one)."""
        if self.teacher is None:
            return None
        if self.teacher in HEURISTICS:
            return make_heuristic(self.teacher, cluster)
        policy, cfg = load_policy(self.teacher)
        cfg.require_same_cluster(cluster, f"imitation.teacher={self.teacher}", "run",
                                 may_differ=(*REWARD_FIELDS, "slo_slowdown"))
        return policy


class Reinforce(SchedulerTask):
    """DeepRM's policy-gradient training.

    Args:
        cluster: the cluster and the objective the reward follows (SPEC.md).
        workload: the jobs of training and validation: DeepRM's generator, a family of them, or
            windows of a real trace (`TraceWorkload`, e.g. its train split).
        policy: the network (`PolicySpec`): DeepRM's 20-unit MLP over the image by default.
        baseline: a `Baseline`; default DeepRM's time-indexed one.
        num_jobsets: N, jobsets per iteration, split over DDP ranks. DeepRM: 100.
        episodes_per_jobset: E, episodes of each jobset per iteration. DeepRM: 20.
        gamma: discount. DeepRM: 1.
        optimizer: `RMSpropSettings`. DeepRM's: lr 0.001, alpha 0.9, eps 1e-9.
        entropy: `EntropyBonus` (weight and schedule). DeepRM: none.
        normalize_advantage: divide the advantages by their standard deviation over the batch
            (true) or within each jobset ("jobset": light and heavy loads weigh the same).
        ppo: `PPOReuse`, optimizer steps per batch. DeepRM: one. trainer.global_step still counts
            iterations.
        curriculum_iterations: with a WorkloadFamily, its load range grows from its low end to
            the full range over this many iterations (0: no curriculum).
        imitation: `Imitation`, a heuristic or policy the network first learns to copy. DeepRM: none.
        iterations_per_epoch: iterations between epoch ends (pacing only).
        evaluation: the validation and test jobsets and how the policy acts on them.
        seed: seeds training jobsets and action sampling.
        init_from: a checkpoint whose policy weights start the training (a warm start, e.g. a
            policy trained on another workload); its cluster and network must match.
    """

    def __init__(self, cluster: ClusterConfig = ClusterConfig(),
                 workload: DeepRMWorkload | WorkloadFamily | TraceWorkload = DeepRMWorkload(),
                 policy: PolicySpec = PolicySpec(), baseline: Baseline | None = None,
                 num_jobsets: int = 100, episodes_per_jobset: int = 20, gamma: float = 1.0,
                 optimizer: RMSpropSettings = RMSpropSettings(), entropy: EntropyBonus = EntropyBonus(),
                 normalize_advantage: bool | Literal["jobset"] = False, ppo: PPOReuse = PPOReuse(),
                 curriculum_iterations: int = 0, imitation: Imitation = Imitation(), iterations_per_epoch: int = 100,
                 evaluation: EvaluationSettings = EvaluationSettings(), seed: int = 0, init_from: str | None = None):
        super().__init__(cluster, workload, policy, baseline, evaluation, iterations_per_epoch, seed)
        self.save_hyperparameters(ignore=["baseline"])
        require_at_least("Reinforce", 1, num_jobsets=num_jobsets, episodes_per_jobset=episodes_per_jobset)
        require_at_least("Reinforce", 0, curriculum_iterations=curriculum_iterations)
        require_positive("Reinforce", **{"optimizer.lr": optimizer.lr})
        self.require_rollouts_fit(num_jobsets, episodes_per_jobset, num_jobsets=num_jobsets,
                                  episodes_per_jobset=episodes_per_jobset)
        if not 0 < gamma <= 1:
            raise ConfigError(f"Reinforce.gamma must be in (0, 1], got {gamma}")
        if curriculum_iterations and not isinstance(workload, WorkloadFamily):
            raise ConfigError(f"Reinforce.curriculum_iterations={curriculum_iterations} needs a WorkloadFamily "
                              f"(a load range), got workload {type(workload).__name__}")
        if init_from is not None:
            warm_start(self.net, init_from)
        # the grouped settings as objects (LightningCLI stores them in hparams as plain dicts)
        self.rmsprop, self.entropy, self.ppo, self.imitation = optimizer, entropy, ppo, imitation
        self.teacher = imitation.make_teacher(self.cluster)

    def draw_jobsets(self) -> JobSet:
        """This rank's N / world_size jobsets of the current iteration, on the module's device."""
        workload = self.workload
        if self.hparams.curriculum_iterations:
            workload = workload.with_load_upto(min(1.0, (self.global_step + 1) / self.hparams.curriculum_iterations))
        return make_jobsets(workload, self.share_of(self.hparams.num_jobsets, "num_jobsets"),
                            self.iteration_seed()).to(self.device)

    # ----- training: DeepRM's Figure 3 --------------------------------------------------------
    def training_step(self, batch, batch_idx):
        start = time.perf_counter()
        hp = self.hparams
        # 1. N jobsets, E episodes of each, rolled out with pi_theta in one batched env
        jobs = self.draw_jobsets().repeat_interleave(hp.episodes_per_jobset)
        if self.global_step < self.imitation.iterations:
            return self.imitation_step(jobs, start)
        traj = collect(self.net, self.cluster, jobs, generator=self.action_sampler())
        rollout_s = time.perf_counter() - start
        # 2-4. returns v_t, baseline b_t, loss -mean log pi(a_t|s_t) (v_t - b_t)
        entropy_weight = self.entropy.at(self.global_step)
        pg = policy_gradient(self.net, traj, self.baseline, hp.episodes_per_jobset, hp.gamma, entropy_weight,
                             hp.normalize_advantage)
        # 5. one optimizer step (RMSprop)
        self.gradient_step(pg.loss, last=self.ppo.epochs == 1)
        # PPO-style reuse: more steps on the same decisions, clipped where the policy moved too far
        for epoch in range(1, self.ppo.epochs):
            self.gradient_step(clipped_surrogate(self.net, pg, self.ppo.clip, entropy_weight),
                               last=epoch == self.ppo.epochs - 1)
        metrics = episode_metrics(traj.state)
        self.log_dict({"train/mean_return": pg.mean_return, "train/max_return": pg.max_return,
                       **{f"train/{m}": metrics[m].nanmean().float() for m in METRICS},
                       "train/entropy": pg.entropy, "train/entropy_weight": entropy_weight,
                       "train/loss": pg.loss.detach()},
                      on_step=True, on_epoch=False, sync_dist=self.trainer.world_size > 1)
        self.log("return", pg.mean_return, prog_bar=True, on_step=True, on_epoch=False, logger=False)
        self.log_progress(start, rollout_s, pg.decisions)

    def imitation_step(self, jobs: JobSet, start: float) -> None:
        """The warm start: the teacher acts, the network learns to pick its actions."""
        teacher = self.teacher
        if getattr(teacher, "generator", None) is not None:  # a sampling checkpoint: its draws follow the
            teacher.net.to(self.device)                      # iteration, so a resume goes on as the run would
            teacher.generator = torch.Generator(device=self.device).manual_seed(self.iteration_seed(stream=1))
        traj = collect(self.net, self.cluster, jobs, teacher=teacher)
        rollout_s = time.perf_counter() - start
        loss = imitation_loss(self.net, traj)
        self.gradient_step(loss, last=True)
        self.log_dict({"train/imitation_loss": loss.detach(),
                       "train/mean_slowdown": episode_metrics(traj.state)["mean_slowdown"].nanmean().float()},
                      on_step=True, on_epoch=False, sync_dist=self.trainer.world_size > 1)
        self.log_progress(start, rollout_s, traj.num_decisions)

    def log_progress(self, start: float, rollout_s: float, decisions: int) -> None:
        """The iteration on the progress bar; the timings on_train_batch_end logs once the step is done."""
        self.log("iteration", float(self.global_step), prog_bar=True, on_step=True, on_epoch=False)
        self._perf = {"perf/rollout_s": rollout_s, "perf/decisions": float(decisions), "start": start}

    def gradient_step(self, loss: torch.Tensor, last: bool) -> None:
        """One gradient step on `loss`. Lightning's optimizer wrapper counts trainer.global_step, so
        only an iteration's last step goes through it (global_step counts iterations: max_steps,
        seeds and checkpoints mean iterations); the steps before it reuse the same batch."""
        self.check_loss(loss)
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        self.check_gradients()
        if last:
            optimizer.step()
        else:
            optimizer.optimizer.step()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        super().on_train_batch_end(outputs, batch, batch_idx)
        seconds = time.perf_counter() - self._perf.pop("start")
        self.log_dict({"perf/iteration_s": seconds, "perf/decisions_per_s": self._perf["perf/decisions"] / seconds,
                       "perf/rollout_s": self._perf["perf/rollout_s"]}, on_step=True, on_epoch=False)

    def configure_optimizers(self):
        if self.ppo.epochs > 1:
            self.require_full_precision("with ppo.epochs > 1 the steps before an iteration's last bypass Lightning's "
                                        "precision plugin")
        rms = self.rmsprop
        return torch.optim.RMSprop(self.net.parameters(), lr=rms.lr, alpha=rms.alpha, eps=rms.eps)
