"""REINFORCE with DeepRM's time-indexed baseline (Mao et al., HotNets 2016, Figure 3) as a
LightningModule.

    for each iteration:                                   (training_step)
        draw N jobsets                                    (num_jobsets, this rank's share)
        run E episodes of each with pi_theta              (episodes_per_jobset, one batched env)
        v_t = sum_{s>=t} gamma^(s-t) r_s                  (policy_gradient.discounted_returns)
        b_t = mean over the E episodes of v_t             (baselines.TimeIndexedBaseline)
        dtheta = sum_t grad log pi(a_t|s_t) (v_t - b_t)   (policy_gradient.policy_gradient)
        one optimizer step                                (RMSprop, lr 0.001: DeepRM's)

The upgrades of issue 5 are switches, all off by default (DeepRM's recipe): a masked softmax
(`policy.masked`), an entropy bonus with a linear schedule, advantage normalisation, a baseline
indexed by cluster time (`baseline: ClusterTimeBaseline`), PPO-style clipped reuse of each batch
(`ppo_epochs`), a curriculum over load, and a warm start that imitates a heuristic first.

The dataloader only paces iterations; each iteration's jobsets come from a generator seeded by
(seed, iteration, rank), so ranks under DDP draw different jobsets, a resumed run draws the same
ones, and Lightning's DDP averages the ranks' gradients (parameters stay identical).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader

from lightning_sched import ClusterConfig, DeepRMWorkload, JobSet, WorkloadFamily, seeds
from lightning_sched.baselines import Baseline, TimeIndexedBaseline
from lightning_sched.config import REWARD_FIELDS, ConfigError
from lightning_sched.evaluation import EvalResult, evaluate, make_jobsets
from lightning_sched.objectives import METRICS, episode_metrics
from lightning_sched.policies import (CHECKPOINT_KEY, ImagePolicy, NetworkPolicy, PolicySpec, load_network,
                                      make_policy, policy_checkpoint)
from lightning_sched.heuristics import make_heuristic
from lightning_sched.policy_gradient import clipped_surrogate, imitation_loss, policy_gradient
from lightning_sched.rollout import collect
from lightning_sched.traces import TraceWorkload


class Reinforce(LightningModule):
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
        lr: RMSprop learning rate. DeepRM: 0.001.
        rmsprop_alpha: RMSprop's squared-gradient decay. DeepRM: 0.9.
        rmsprop_eps: DeepRM: 1e-9.
        entropy_weight: weight of an entropy bonus (at the first iteration). DeepRM: 0.
        entropy_weight_end, entropy_decay_iterations: with entropy_weight_end set, the weight
            moves linearly to it over entropy_decay_iterations iterations, then stays: explore
            early, commit later.
        normalize_advantage: divide the advantages by their standard deviation over the batch
            (true) or within each jobset ("jobset": light and heavy loads weigh the same).
        ppo_epochs: optimizer steps per batch of rollouts. 1 (DeepRM): one policy-gradient step;
            K > 1: K - 1 more steps on the same decisions with PPO's clipped objective
            (`ppo_clip`). trainer.global_step still counts iterations.
        curriculum_iterations: with a WorkloadFamily, its load range grows from its low end to
            the full range over this many iterations (0: no curriculum).
        imitate, imitation_iterations: a heuristic (e.g. "tetris") whose actions the network is
            first trained to copy by cross-entropy, for this many iterations, before policy
            gradient (DeepRM's supervised pre-training).
        iterations_per_epoch: iterations between epoch ends (pacing only).
        val_jobsets: jobsets of the fixed validation set (drawn with val_seed).
        val_seed: seed of the validation set; training seeds never reach it.
        test_jobsets, test_seed: the same for `fit.py test`.
        eval_greedy: evaluate the policy's argmax; default False: sample its actions, as DeepRM's
            evaluation does (an unmasked policy's argmax can keep picking a slot whose job does
            not fit, which wastes time steps).
        seed: seeds training jobsets and action sampling.
        init_from: a checkpoint whose policy weights start the training (a warm start, e.g. a
            policy trained on another workload); its cluster and network must match.
    """

    def __init__(self, cluster: ClusterConfig = ClusterConfig(),
                 workload: DeepRMWorkload | WorkloadFamily | TraceWorkload = DeepRMWorkload(),
                 policy: PolicySpec = PolicySpec(), baseline: Baseline | None = None,
                 num_jobsets: int = 100, episodes_per_jobset: int = 20, gamma: float = 1.0,
                 lr: float = 1e-3, rmsprop_alpha: float = 0.9, rmsprop_eps: float = 1e-9,
                 entropy_weight: float = 0.0, entropy_weight_end: float | None = None,
                 entropy_decay_iterations: int = 0, normalize_advantage: bool | Literal["jobset"] = False,
                 ppo_epochs: int = 1, ppo_clip: float = 0.2, curriculum_iterations: int = 0,
                 imitate: str | None = None, imitation_iterations: int = 0, iterations_per_epoch: int = 100,
                 val_jobsets: int = 100, val_seed: int = seeds.VALIDATION, test_jobsets: int = 200,
                 test_seed: int = seeds.EVALUATION,
                 eval_greedy: bool = False, seed: int = 0, init_from: str | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["baseline"])
        for name, value in (("num_jobsets", num_jobsets), ("episodes_per_jobset", episodes_per_jobset),
                            ("iterations_per_epoch", iterations_per_epoch), ("val_jobsets", val_jobsets),
                            ("test_jobsets", test_jobsets), ("ppo_epochs", ppo_epochs)):
            if value < 1:
                raise ConfigError(f"Reinforce.{name} must be >= 1, got {value}")
        if not 0 < gamma <= 1:
            raise ConfigError(f"Reinforce.gamma must be in (0, 1], got {gamma}")
        for name, value in (("entropy_decay_iterations", entropy_decay_iterations),
                            ("curriculum_iterations", curriculum_iterations), ("imitation_iterations", imitation_iterations)):
            if value < 0:
                raise ConfigError(f"Reinforce.{name} must be >= 0, got {value}")
        if entropy_weight_end is not None and entropy_decay_iterations < 1:
            raise ConfigError(f"Reinforce.entropy_weight_end={entropy_weight_end} needs entropy_decay_iterations >= 1, "
                              f"got {entropy_decay_iterations}")
        if not 0 < ppo_clip < 1:
            raise ConfigError(f"Reinforce.ppo_clip must be in (0, 1), got {ppo_clip}")
        if curriculum_iterations and not isinstance(workload, WorkloadFamily):
            raise ConfigError(f"Reinforce.curriculum_iterations={curriculum_iterations} needs a WorkloadFamily "
                              f"(a load range), got workload {type(workload).__name__}")
        if (imitate is None) != (imitation_iterations == 0):
            raise ConfigError(f"Reinforce.imitate={imitate!r} and imitation_iterations={imitation_iterations}: "
                              "give both (a heuristic and a number of iterations >= 1) or neither")
        self.automatic_optimization = False  # ppo_epochs steps per iteration (see gradient_step)
        # the rollouts never render the image: the network reads structured keys
        self.cluster = cluster.replace(observation="none")
        workload.validate(self.cluster)
        self.workload = workload
        self.net = make_policy(policy, self.cluster)
        if init_from is not None:
            warm_start(self.net, init_from)
        self.baseline = baseline or TimeIndexedBaseline()
        self.teacher = make_heuristic(imitate, self.cluster) if imitate else None
        self.sampler = torch.Generator()
        self.sampler.manual_seed(seed)
        self._val_jobs: JobSet | None = None

    # ----- data: the dataloader paces iterations ------------------------------------------------
    def train_dataloader(self):
        return DataLoader(range(self.hparams.iterations_per_epoch), batch_size=None, shuffle=False)

    def val_dataloader(self):
        return DataLoader([0], batch_size=None)

    def test_dataloader(self):
        return DataLoader([0], batch_size=None)

    def draw_jobsets(self) -> JobSet:
        """This rank's N / world_size jobsets of the current iteration, on the module's device."""
        world, rank = self.trainer.world_size, self.trainer.global_rank
        n = self.hparams.num_jobsets
        if n % world:
            raise ConfigError(f"Reinforce.num_jobsets={n} must divide evenly over {world} devices")
        seed = seeds.training(self.hparams.seed, self.global_step, rank)
        workload = self.workload
        if self.hparams.curriculum_iterations:
            workload = workload.with_load_upto(min(1.0, (self.global_step + 1) / self.hparams.curriculum_iterations))
        return make_jobsets(workload, n // world, seed).to(self.device)

    def entropy_weight(self) -> float:
        """The entropy bonus's weight at this iteration (a linear schedule, or constant)."""
        hp = self.hparams
        if hp.entropy_weight_end is None:
            return hp.entropy_weight
        progress = min(1.0, self.global_step / hp.entropy_decay_iterations)
        return hp.entropy_weight + (hp.entropy_weight_end - hp.entropy_weight) * progress

    @property
    def val_jobs(self) -> JobSet:
        """The fixed validation jobsets (the same on every rank and every call)."""
        if self._val_jobs is None:
            self._val_jobs = make_jobsets(self.workload, self.hparams.val_jobsets, self.hparams.val_seed)
        return self._val_jobs

    # ----- training: DeepRM's Figure 3 --------------------------------------------------------
    def training_step(self, batch, batch_idx):
        start = time.perf_counter()
        hp = self.hparams
        if self.sampler.device != self.device:
            self.sampler = torch.Generator(device=self.device).manual_seed(hp.seed + self.global_step)
        # 1. N jobsets, E episodes of each, rolled out with pi_theta in one batched env
        jobs = self.draw_jobsets().repeat_interleave(hp.episodes_per_jobset)
        if self.global_step < hp.imitation_iterations:
            return self.imitation_step(jobs, start)
        traj = collect(self.net, self.cluster, jobs, generator=self.sampler)
        rollout_s = time.perf_counter() - start
        # 2-4. returns v_t, baseline b_t, loss -mean log pi(a_t|s_t) (v_t - b_t)
        entropy_weight = self.entropy_weight()
        pg = policy_gradient(self.net, traj, self.baseline, hp.episodes_per_jobset, hp.gamma, entropy_weight,
                             hp.normalize_advantage)
        # 5. one optimizer step (RMSprop)
        self.gradient_step(pg.loss, last=hp.ppo_epochs == 1)
        # PPO-style reuse: more steps on the same decisions, clipped where the policy moved too far
        for epoch in range(1, hp.ppo_epochs):
            self.gradient_step(clipped_surrogate(self.net, pg, hp.ppo_clip, entropy_weight), last=epoch == hp.ppo_epochs - 1)
        metrics = episode_metrics(traj.state)
        self.log_dict({"train/mean_return": pg.mean_return, "train/max_return": pg.max_return,
                       **{f"train/{m}": metrics[m].nanmean().float() for m in METRICS},
                       "train/entropy": pg.entropy, "train/entropy_weight": entropy_weight,
                       "train/loss": pg.loss.detach()},
                      on_step=True, on_epoch=False, sync_dist=self.trainer.world_size > 1)
        self.log("return", pg.mean_return, prog_bar=True, on_step=True, on_epoch=False, logger=False)
        self.log_progress(start, rollout_s, pg.decisions)

    def imitation_step(self, jobs: JobSet, start: float) -> None:
        """The warm start: the heuristic acts, the network learns to pick its actions."""
        traj = collect(self.net, self.cluster, jobs, teacher=self.teacher)
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
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite loss {loss.item()} at iteration {self.global_step}; training stops here, "
                "the checkpoints written so far are kept (lower lr?)")
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        if last:
            optimizer.step()
        else:
            optimizer.optimizer.step()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        # after the optimizer step and before any validation or checkpoint of this iteration: a
        # step that made the parameters non-finite stops training while the checkpoints are good
        bad = [name for name, p in self.net.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise FloatingPointError(f"parameters {bad} became non-finite at iteration {self.global_step}; training "
                                     "stops here, the checkpoints written so far are kept (lower lr?)")
        seconds = time.perf_counter() - self._perf.pop("start")
        self.log_dict({"perf/iteration_s": seconds, "perf/decisions_per_s": self._perf["perf/decisions"] / seconds,
                       "perf/rollout_s": self._perf["perf/rollout_s"]}, on_step=True, on_epoch=False)

    def configure_optimizers(self):
        return torch.optim.RMSprop(self.net.parameters(), lr=self.hparams.lr, alpha=self.hparams.rmsprop_alpha,
                                   eps=self.hparams.rmsprop_eps)

    # ----- evaluation --------------------------------------------------------------------------
    def validation_step(self, batch, batch_idx):
        self.last_eval = evaluate_and_log(self, self.val_jobs, "eval")

    def test_step(self, batch, batch_idx):
        evaluate_and_log(self, make_jobsets(self.workload, self.hparams.test_jobsets, self.hparams.test_seed), "test")

    # ----- checkpoints: the policy alone, readable without this module ------------------------------
    def on_save_checkpoint(self, checkpoint):
        checkpoint[CHECKPOINT_KEY] = policy_checkpoint(self.net, greedy=self.hparams.eval_greedy)
        checkpoint["sampler_state"] = self.sampler.get_state()

    def on_load_checkpoint(self, checkpoint):
        saved = checkpoint.get(CHECKPOINT_KEY, {}).get("cluster")
        if saved is not None:
            ClusterConfig(**saved).require_same_cluster(self.cluster, "checkpoint", "run")
        if "sampler_state" in checkpoint and self.sampler.device.type == "cpu":
            self.sampler.set_state(checkpoint["sampler_state"])


def evaluate_and_log(module: LightningModule, jobs: JobSet, prefix: str) -> EvalResult:
    """SPEC's episode metrics of `module.net` on fixed jobsets (sampled with the seed val_seed, or
    greedy with eval_greedy), logged as `<prefix>/<metric>` and `<prefix>/<metric>_ci95`; shared by
    the tasks' validation and test steps."""
    hp = module.hparams
    generator = torch.Generator(device=module.device).manual_seed(hp.val_seed)
    policy = NetworkPolicy(module.net, greedy=hp.eval_greedy, generator=generator)
    result = evaluate(policy, module.cluster, jobs, device=module.device)
    s = result.summary
    values = {f"{prefix}/{m}": s[m] for m in METRICS}
    values.update({f"{prefix}/{m}_ci95": s[f"{m}_ci95"] for m in METRICS})
    values[f"{prefix}/unfinished_jobs"] = float(s["unfinished_jobs"])
    module.log_dict(values, on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
    module.log("eval_slowdown", s["mean_slowdown"], prog_bar=True, logger=False, on_epoch=True, batch_size=1)
    return result


def warm_start(net: ImagePolicy, path: str) -> None:
    """Load the policy weights of checkpoint `path` into `net`, refused with the differing fields
    when its cluster or network is not `net`'s (its objective may differ: the network does not
    depend on it). A network without deadline inputs may start one with them: `net` keeps its
    own deadline weights, which start at zero."""
    source, cfg, _ = load_network(path)
    cfg.require_same_cluster(net.cfg, f"init_from={path}", "run", may_differ=(*REWARD_FIELDS, "slo_slowdown"))
    adds_deadline_inputs = net.spec.deadline_inputs and not source.spec.deadline_inputs
    if source.spec != (replace(net.spec, deadline_inputs=False) if adds_deadline_inputs else net.spec):
        raise ConfigError(f"init_from={path}: its policy {source.spec!r} is not this run's {net.spec!r}")
    net.load_state_dict(source.state_dict(), strict=not adds_deadline_inputs)
