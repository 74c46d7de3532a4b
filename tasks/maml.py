"""MAML (Finn et al., ICML 2017) over cluster workloads: a meta-policy that adapts to a new
workload in a few REINFORCE steps. A task is a DeepRM workload drawn from a `WorkloadFamily`,
optionally with an objective drawn from `objectives` (which the observation does not show) and a
cluster size drawn from `cluster_sizes` (slot policy only).

    for each meta-iteration:                                      (training_step)
        draw a meta-batch of tasks T_1..T_K from the family
        theta_k = theta for each task (higher.innerloop_ctx, copy_initial_weights=False)
        repeat inner_steps times:
            roll out every theta_k on jobsets of its task         (one batched env for all tasks
                                                                   of the same objective and cluster)
            theta_k <- theta_k - alpha grad L_k(theta_k)          (inner_step: REINFORCE with the
                                                                   time-indexed baseline; SGD, or
                                                                   higher's differentiable Adam; or
                                                                   Meta-SGD: alpha * exp(s) per weight)
        roll out every adapted theta_k on fresh jobsets of its task
        meta-loss = mean_k L_k(theta_k)                           (REINFORCE loss of the adapted policy)
        theta, s <- Adam(grad meta-loss)                          (second order through the inner
                                                                   steps, or first order)

As in MAML for RL, the gradient flows through the inner updates but not through the sampling of
the inner rollouts (their actions are data).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import NamedTuple

import higher
import torch

from lightning_sched import ClusterConfig, DeepRMWorkload, JobSet, WorkloadFamily, seeds
from lightning_sched.config import OBJECTIVES, ConfigError, is_finite, is_int
from lightning_sched.deeprm.objectives import episode_metrics
from lightning_sched.deeprm.rollout import Trajectories, collect
from lightning_sched.evaluation import make_jobsets
from lightning_sched.learning.adaptation import AdaptationSettings, meta_sgd_callback
from lightning_sched.learning.baselines import Baseline
from lightning_sched.learning.meta import LearnedStepSizes, require_learnable_step_sizes
from lightning_sched.learning.policy_gradient import PolicyGradient, policy_gradient
from lightning_sched.policies.checkpoints import PolicyRecord, warm_start
from lightning_sched.policies.networks import PolicySpec, make_policy

from .base import EvaluationSettings, SchedulerTask, require_at_least, require_positive
from .meta import MetaOptimization


def outer_stream(inner_steps: int) -> int:
    """The seed stream of a meta-iteration's outer rollouts: 1000, or past the inner steps' streams
    (1 + 100 x step + task, task < 99) when they reach it."""
    return max(1000, 100 * inner_steps)


class Task(NamedTuple):
    """A meta-learning task: the workload its jobsets come from, the objective its reward follows and
    the cluster it runs on."""
    workload: DeepRMWorkload
    objective: str
    cluster: ClusterConfig


class TaskBlockNetworks:
    """A network per block of rows (a `policies.PolicyNetwork`): rows [bounds[k], bounds[k+1]) act
    with nets[k], the fast weights of task k, so one batched env steps all the tasks at once."""

    def __init__(self, encoder, nets, rows_per_task: list[int]):
        self.encoder, self.nets = encoder, nets
        self.bounds = [0]
        for rows in rows_per_task:
            self.bounds.append(self.bounds[-1] + rows)

    def encode(self, obs):
        return self.encoder.encode(obs)

    def frozen(self):
        """features {key: [B, ...]} -> logits [B, A], B the rows of every task: block k by nets[k]."""
        frozen = [net.frozen() for net in self.nets]

        def logits(features):
            return torch.cat([net({k: v[a:b] for k, v in features.items()})
                              for net, a, b in zip(frozen, self.bounds, self.bounds[1:])])
        return logits


def inner_step(fnet, diffopt, traj: Trajectories, baseline: Baseline, episodes: int, normalize: bool,
               step_sizes: dict[str, torch.Tensor] | None = None) -> PolicyGradient:
    """One differentiable REINFORCE step of a task's fast weights on its own rollouts (`traj`: decisions
    [S, B], B = jobsets x `episodes`); with `step_sizes` (Meta-SGD) each weight's gradient is first
    multiplied by its own learned step."""
    pg = policy_gradient(fnet, traj, baseline, episodes, normalize_advantage=normalize)
    diffopt.step(pg.loss, grad_callback=meta_sgd_callback(step_sizes))
    return pg


class MAML(MetaOptimization, SchedulerTask):
    """Args:
        cluster: the cluster and objective (SPEC.md).
        family: the meta-training tasks (`WorkloadFamily` ranges).
        objectives: each task also draws its objective (its reward) uniformly from this list; the
            observation does not show it, so no single policy serves every task without adapting.
            None: every task has the cluster's objective.
        cluster_sizes: each task also draws a cluster uniformly from these (num_slots,
            resource_units) pairs, with max_job_units = resource_units, and the family's demands
            scaled to it (`DeepRMWorkload.scaled_to`; loads are shares of capacity, unchanged). Only
            the slot policy, whose weights do not depend on the size. None: every task runs on
            `cluster`. Validation runs on `cluster`.
        policy: the network (`PolicySpec`).
        baseline: default DeepRM's time-indexed baseline.
        meta_batch: tasks per meta-iteration.
        inner_steps: adaptation steps per task inside a meta-iteration. 0: no adaptation, i.e.
            REINFORCE on the task mixture (the baseline a meta-policy is compared with: the same
            tasks, and as many episodes when outer_jobsets covers the inner rollouts too).
        inner_lr: step size of the inner loop (and the default of scripts/adapt.py).
        inner_optimizer: 'sgd' (MAML's) or 'adam' (higher's differentiable Adam: a step of about
            inner_lr per weight, whatever the gradient's scale; REINFORCE gradients here are ~1e-4
            per weight, so an SGD step has to be large to move the policy at all).
        inner_jobsets, inner_episodes: rollouts per inner step and task (N x E).
        outer_jobsets, outer_episodes: rollouts of the adapted policy per task (N x E).
        normalize_advantage: divide advantages by their std over the task's decisions (keeps the
            plain-SGD inner step's size independent of the reward scale).
        entropy_weight: entropy bonus in the outer (meta) loss, as Reinforce's; keeps the policy
            from collapsing to a deterministic one (REINFORCE on completion time does, under Adam).
        meta_lr: Adam step size on the meta-parameters.
        first_order: first-order MAML (no gradient through the inner updates).
        learn_step_sizes: Meta-SGD (Li et al., 2017): meta-learn a step size for every weight
            with the initialisation; the inner SGD step is inner_lr * exp(s) * gradient, s
            starting at 0. Needs inner_optimizer 'sgd' and second-order gradients.
        step_size_lr: Adam step size on s (log step sizes move much further than the weights).
        iterations_per_epoch: pacing only.
        evaluation: the validation and test sets, one jobset of each of as many tasks drawn from
            the family, on which the unadapted meta-policy is measured.
        seed: seeds the tasks, jobsets and actions.
        init_from: a checkpoint whose policy weights are the meta-parameters' start (a warm start,
            e.g. a trained slot policy), as Reinforce's.
    """

    def __init__(self, cluster: ClusterConfig = ClusterConfig(), family: WorkloadFamily = WorkloadFamily(),
                 objectives: list[str] | None = None, cluster_sizes: list[tuple[int, int]] | None = None,
                 policy: PolicySpec = PolicySpec(),
                 baseline: Baseline | None = None, meta_batch: int = 8,
                 inner_steps: int = 1, inner_lr: float = 0.05, inner_optimizer: str = "sgd",
                 inner_jobsets: int = 10, inner_episodes: int = 10,
                 outer_jobsets: int = 10, outer_episodes: int = 10, normalize_advantage: bool = True,
                 entropy_weight: float = 0.0,
                 meta_lr: float = 1e-3, first_order: bool = False, learn_step_sizes: bool = False,
                 step_size_lr: float = 0.01, iterations_per_epoch: int = 100,
                 evaluation: EvaluationSettings = EvaluationSettings(), seed: int = 0, init_from: str | None = None):
        super().__init__(cluster, family, policy, baseline, evaluation, iterations_per_epoch, seed)
        self.save_hyperparameters(ignore=["baseline"])
        if meta_batch >= 100:
            raise ConfigError(f"MAML.meta_batch must be < 100 (jobset seed streams), got {meta_batch}")
        if outer_stream(inner_steps) + meta_batch > seeds.SAMPLER_STREAM:
            raise ConfigError(f"MAML.inner_steps must be <= {(seeds.SAMPLER_STREAM - meta_batch) // 100} with "
                              f"meta_batch {meta_batch} (jobset seed streams of an iteration), got {inner_steps}")
        if not is_finite(entropy_weight) or entropy_weight < 0:
            raise ConfigError(f"MAML.entropy_weight must be a finite number >= 0, got {entropy_weight!r}")
        require_at_least("MAML", 0, inner_steps=inner_steps)
        require_positive("MAML", meta_lr=meta_lr, step_size_lr=step_size_lr)
        for objective in objectives or ():
            if objective not in OBJECTIVES:
                raise ConfigError(f"MAML.objectives holds {objective!r}, which is unknown; choose from {OBJECTIVES}")
        if objectives is not None and not objectives:
            raise ConfigError("MAML.objectives must name at least one objective (or be null: the cluster's)")
        require_at_least("MAML", 1, meta_batch=meta_batch, inner_jobsets=inner_jobsets, inner_episodes=inner_episodes,
                         outer_jobsets=outer_jobsets, outer_episodes=outer_episodes)
        # one meta-iteration's largest batched rollout: every task's inner (or outer) episodes at once
        widest = max((inner_jobsets * inner_episodes, inner_jobsets, inner_episodes),
                     (outer_jobsets * outer_episodes, outer_jobsets, outer_episodes))
        self.require_rollouts_fit(meta_batch * widest[1], widest[2], meta_batch=meta_batch,
                                  inner_jobsets=inner_jobsets, inner_episodes=inner_episodes,
                                  outer_jobsets=outer_jobsets, outer_episodes=outer_episodes)
        self.inner = AdaptationSettings(steps=inner_steps, jobsets=inner_jobsets, episodes=inner_episodes, lr=inner_lr,
                                        optimizer=inner_optimizer, normalize_advantage=normalize_advantage,
                                        baseline=type(self.baseline).__name__)
        if init_from is not None:
            warm_start(self.net, init_from)
        self.family = family
        self.task_clusters = self.make_task_clusters(cluster_sizes, policy)
        self.encoders = {}  # task cluster -> a network of that size; only its encode() is used
        self.log_step_sizes = None
        if learn_step_sizes:
            require_learnable_step_sizes("MAML", inner_optimizer, first_order, inner_steps)
            self.log_step_sizes = LearnedStepSizes(self.net)

    def make_task_clusters(self, cluster_sizes, policy: PolicySpec) -> list[ClusterConfig] | None:
        if cluster_sizes is None:
            return None
        if policy.kind != "slots":
            raise ConfigError(f"MAML.cluster_sizes needs the slot policy (policy.kind 'slots'): DeepRM's image "
                              f"network exists for one cluster size; got policy.kind {policy.kind!r}")
        if not cluster_sizes:
            raise ConfigError("MAML.cluster_sizes must name at least one (num_slots, resource_units) pair (or be null)")
        clusters = []
        for size in cluster_sizes:
            if len(size) != 2 or any(not is_int(v, 1) for v in size):
                raise ConfigError(f"MAML.cluster_sizes holds {list(size)!r}; each must be [num_slots, resource_units], "
                                  f"integers >= 1")
            num_slots, units = size
            cluster = self.cluster.replace(num_slots=num_slots, resource_units=units, max_job_units=units)
            self.family.workload().scaled_to(cluster).validate(cluster)
            clusters.append(cluster)
        return clusters

    def encoder(self, cluster: ClusterConfig):
        """What encodes observations of `cluster`: the network itself on its own cluster, else a
        network of the task's size (the slot features are normalized by the cluster's size)."""
        if cluster == self.cluster:
            return self.net
        if cluster not in self.encoders:
            self.encoders[cluster] = make_policy(self.net.spec, cluster).to(self.device)
        return self.encoders[cluster]

    def meta_parameters(self) -> list[torch.nn.Parameter]:
        """The network's weights."""
        return list(self.net.parameters())

    def step_sizes(self) -> dict[str, torch.Tensor] | None:
        """Meta-SGD's per-weight step multipliers, in the order of net.parameters() (differentiable)."""
        return None if self.log_step_sizes is None else self.log_step_sizes.sizes()

    # ----- tasks and rollouts -----------------------------------------------------------------------
    # Seed streams of one iteration (iteration_seed): 0 the tasks, 1 + 100 * step the inner rollouts of
    # each step, outer_stream the outer ones; task k of a stream adds k (meta_batch < 100).
    def draw_tasks(self) -> list[Task]:
        """This rank's meta-batch of tasks (split over DDP ranks)."""
        generator = torch.Generator().manual_seed(self.iteration_seed(0))
        workloads = self.family.draw(self.share_of(self.hparams.meta_batch, "meta_batch"), generator)
        objectives = self.hparams.objectives or [self.cluster.objective]
        picks = (torch.randint(len(objectives), (len(workloads),), generator=generator).tolist()
                 if self.hparams.objectives else [0] * len(workloads))
        tasks = [Task(w, objectives[i], self.cluster) for w, i in zip(workloads, picks)]
        if self.task_clusters is None:
            return tasks
        sizes = torch.randint(len(self.task_clusters), (len(tasks),), generator=generator).tolist()
        return [Task(t.workload.scaled_to(self.task_clusters[i]), t.objective, self.task_clusters[i])
                for t, i in zip(tasks, sizes)]

    def rollout(self, nets, tasks: list[Task], jobsets: int, episodes: int, stream: int) -> list[Trajectories]:
        """`jobsets` x `episodes` episodes of every task, task k acting with nets[k]: one batched env
        for all the tasks of each objective and cluster. Returns each task's trajectories, in task order."""
        parts: list[Trajectories | None] = [None] * len(tasks)
        for objective, cluster in dict.fromkeys((task.objective, task.cluster) for task in tasks):
            ks = [k for k, task in enumerate(tasks) if (task.objective, task.cluster) == (objective, cluster)]
            jobs = JobSet.cat([make_jobsets(tasks[k].workload, jobsets, self.iteration_seed(stream + k)) for k in ks])
            rows = [jobsets * episodes] * len(ks)
            traj = collect(TaskBlockNetworks(self.encoder(cluster), [nets[k] for k in ks], rows),
                           cluster.replace(objective=objective), jobs.to(self.device).repeat_interleave(episodes),
                           generator=self.action_sampler())
            for k, part in zip(ks, traj.split(rows)):
                parts[k] = part
        return parts

    # ----- one meta-iteration ------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        start = time.perf_counter()
        hp = self.hparams
        tasks = self.draw_tasks()
        meta_opt = self.optimizers()
        meta_opt.zero_grad()
        with contextlib.ExitStack() as stack:
            learners = [stack.enter_context(higher.innerloop_ctx(
                self.net, self.inner.make_optimizer(self.net.parameters()),
                copy_initial_weights=False, track_higher_grads=not hp.first_order)) for _ in tasks]
            fnets = [fnet for fnet, _ in learners]
            self.adapt_tasks(learners, tasks)
            parts = self.rollout(fnets, tasks, hp.outer_jobsets, hp.outer_episodes,
                                 stream=outer_stream(hp.inner_steps))
            outer = [policy_gradient(fnet, part, self.baseline, hp.outer_episodes, entropy_weight=hp.entropy_weight,
                                     normalize_advantage=hp.normalize_advantage) for fnet, part in zip(fnets, parts)]
            meta_loss = torch.stack([pg.loss for pg in outer]).mean()
            self.check_loss(meta_loss)
            self.meta_backward(meta_loss, fnets)
            if hp.first_order:
                self.mean_over_ranks(self.meta_parameters())
        self.check_gradients()
        meta_opt.step()
        self.log_iteration(meta_loss, outer, parts, start)

    def adapt_tasks(self, learners, tasks: list[Task]) -> None:
        """The inner loop: inner_steps differentiable REINFORCE steps of every task's fast weights
        (learners: higher's (fnet, diffopt) per task), all tasks' rollouts batched into one env a step."""
        hp = self.hparams
        fnets, step_sizes = [fnet for fnet, _ in learners], self.step_sizes()
        for step in range(hp.inner_steps):
            parts = self.rollout(fnets, tasks, hp.inner_jobsets, hp.inner_episodes, stream=1 + 100 * step)
            for (fnet, diffopt), part in zip(learners, parts):
                inner_step(fnet, diffopt, part, self.baseline, hp.inner_episodes, hp.normalize_advantage, step_sizes)

    def log_iteration(self, meta_loss: torch.Tensor, outer: list[PolicyGradient], parts: list[Trajectories],
                      start: float) -> None:
        """The meta-iteration's figures: its loss, the adapted policies' outer rollouts, the step sizes."""
        slowdown = torch.cat([episode_metrics(part.state)["mean_slowdown"] for part in parts])
        self.log_dict({"train/meta_loss": meta_loss.detach(), "train/adapted_mean_slowdown": slowdown.nanmean().float(),
                       "train/adapted_mean_return": torch.stack([pg.mean_return for pg in outer]).mean(),
                       "train/entropy": torch.stack([pg.entropy for pg in outer]).mean(),
                       "perf/iteration_s": time.perf_counter() - start},
                      on_step=True, on_epoch=False, sync_dist=self.trainer.world_size > 1)
        self.log_step_size_means()
        self.log("iteration", float(self.global_step), prog_bar=True, on_step=True, on_epoch=False)

    # ----- evaluation and checkpoints -----------------------------------------------------------------
    def held_out_jobsets(self, num_jobsets: int, seed: int) -> JobSet:
        """One jobset of each of `num_jobsets` tasks drawn from the family."""
        tasks = self.family.draw(num_jobsets, torch.Generator().manual_seed(seed))
        return JobSet.cat([make_jobsets(t, 1, seed + i) for i, t in enumerate(tasks)])

    def policy_record(self) -> PolicyRecord:
        """With the inner loop the meta-policy was trained for: scripts/adapt.py adapts with it."""
        inner = {k: v for k, v in vars(self.inner).items() if k not in ("steps", "step_sizes")}
        if self.log_step_sizes is not None:
            inner["step_sizes"] = self.log_step_sizes.record()
        return replace(super().policy_record(), adaptation=inner)
