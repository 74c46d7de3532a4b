"""MAML (Finn et al., ICML 2017) over queue sites (lightning_sched.queue.sites): a per-job queue policy
that adapts to a site's hidden parameters (how its users' requests overstate run times, its load,
how job size goes with length) in a few REINFORCE steps on the site's own history.

    for each meta-iteration:                                      (training_step)
        draw `meta_batch` training sites                          (uniform without replacement, or
                                                                   with replacement by rule gap)
        for each site k:
            theta_k = theta                                       (higher.innerloop_ctx, copy_initial_weights=False)
            repeat inner_steps times:
                roll out theta_k: `sequences` sequences x `episodes` episodes of the site's training range
                theta_k <- theta_k - inner_lr grad L_k(theta_k)   (REINFORCE, DeepRM's time-indexed
                                                                   baseline: queue.adaptation; Meta-SGD:
                                                                   inner_lr exp(s) * grad, s learned per weight)
            roll out theta_k on fresh sequences of the site; meta-loss += L_k(theta_k) / meta_batch
        theta (and s) <- Adam(grad meta-loss)                     (through the inner steps, or first order)

The inner loop is REINFORCE, not the PPO loss QueuePPO trains with: one clipped-surrogate step at
ratio 1 is the same gradient, and a REINFORCE step is what `higher` differentiates cheaply. The
mixture baseline is the same module with inner_steps 0 and `rollouts_per_site` = the MAML run's
inner_steps + 1: the same sites, the same number of episodes, no adaptation inside training.
Validation adapts as training does (inner_steps steps) on fixed sequences of each training site
and logs the greedy policy's mean bounded slowdown; the best checkpoint monitors it.
"""
from __future__ import annotations

from dataclasses import replace

import higher
import torch

from lightning_sched import seeds
from lightning_sched.config import ConfigError
from lightning_sched.learning.adaptation import meta_sgd_callback
from lightning_sched.learning.meta import LearnedStepSizes, require_learnable_step_sizes
from lightning_sched.limits import require_time, require_total
from lightning_sched.queue.adaptation import QueueInnerLoop, adaptation_curve, reinforce_loss, rollout, site_env
from lightning_sched.queue.config import RULES, QueueConfig
from lightning_sched.queue.env import DECISION_SECONDS, QueueEnv, env_bytes, rollout_bytes
from lightning_sched.queue.evaluation import EVAL_LENGTH, TRAIN_FRACTION, compare_queue, heuristic_policies
from lightning_sched.queue.policy import (
    CHECKPOINT_KEY,
    QueueNetwork,
    QueuePolicy,
    QueuePolicyRecord,
    QueuePolicySpec,
    load_queue_policy,
)
from lightning_sched.queue.sites import HELDOUT_SITES, TRACES_DIR, TRAINING_SITES, site_log

from .base import IterationTask, require_at_least, require_positive
from .meta import MetaOptimization
from .queue_ppo_settings import PPOSettings


class QueueMAML(MetaOptimization, IterationTask):
    """MAML over the queue env's sites, or with inner_steps 0 its mixture baseline (the module's docstring).

    Args:
        init_from: a queue policy checkpoint the meta-policy starts from (its network and weights).
        policy: instead of init_from, a fresh network of this spec (with a `prior`, it starts as that rule).
        traces: the folder of the training sites' logs (lightning_sched.queue.sites.TRAINING_SITES).
        train_fraction: each site's sequences come from the first this share of its log.
        backfill, window, sequence_length: the QueueConfig (the cluster comes from the logs).
        meta_batch: sites per meta-iteration.
        site_sampling: how they are drawn. uniform: without replacement (meta_batch 5 = every site, every
            iteration). rule_gap: with replacement, site k with probability proportional to the starting
            policy's greedy bounded slowdown over the best rule's on k (gap_sequences sequences of
            validation_length jobs of its training range, selection seeds): the meta-gradient spends its
            samples where the shared start is furthest behind what a rule already does.
        gap_sequences: sequences per site that rule_gap's weights are measured on.
        inner_steps: REINFORCE steps inside a meta-iteration; 0 trains the mixture baseline.
        inner_lr: the inner SGD step (advantages are normalised, so it is a step in log-probabilities).
        sequences, episodes: each rollout's N sequences x E episodes.
        rollouts_per_site: rollouts of the meta-parameters per site when inner_steps is 0 (the mixture
            baseline's samples match a MAML run with inner_steps = this - 1).
        meta_lr: Adam's step on the meta-parameters.
        first_order: the meta-gradient taken at the adapted weights (no gradient through the inner steps).
        inner_params: which scorer weights the inner steps move: "all", or "prior_weights" (with
            QueuePolicySpec.prior_mix: only the weights over the rules' ranks, R numbers; the outer step
            still trains every weight). Recorded as fixed step sizes (1 on those, 0 elsewhere) in the
            checkpoint's adaptation record, so scripts/adapt.py --env queue adapts the same weights.
        learn_step_sizes: Meta-SGD (Li et al., 2017): meta-learn a step size exp(s) for every weight of the
            scorer, multiplying inner_lr (s starts at 0); saved in the checkpoint's adaptation record, which
            scripts/adapt.py --env queue then adapts with. Needs inner_steps >= 1 and second order.
        step_size_lr: Adam's step on s (log step sizes move much further than the weights; 0.01 as MAML's).
        validation_length: jobs of each site's validation sequence.
        iterations_per_epoch: pacing only.
        seed: seeds the sites drawn, the sequences and the actions.
    """

    def __init__(self, init_from: str | None = None, traces: str = TRACES_DIR, train_fraction: float = TRAIN_FRACTION,
                 backfill: str = QueueConfig.backfill, window: int = QueueConfig.window,
                 sequence_length: int = QueueConfig.sequence_length, meta_batch: int = 5,
                 inner_steps: int = QueueInnerLoop.steps, inner_lr: float = QueueInnerLoop.lr,
                 sequences: int = QueueInnerLoop.sequences, episodes: int = QueueInnerLoop.episodes,
                 rollouts_per_site: int = 1, meta_lr: float = 1e-4, first_order: bool = False,
                 learn_step_sizes: bool = False, step_size_lr: float = 0.01, validation_length: int = EVAL_LENGTH,
                 site_sampling: str = "uniform", gap_sequences: int = 8, iterations_per_epoch: int = 50,
                 seed: int = 0, policy: QueuePolicySpec | None = None, inner_params: str = "all"):
        super().__init__()
        self.save_hyperparameters()
        self.iterations_per_epoch = iterations_per_epoch
        self.automatic_optimization = False
        require_at_least("QueueMAML", 1, meta_batch=meta_batch, sequences=sequences, episodes=episodes,
                         rollouts_per_site=rollouts_per_site, iterations_per_epoch=iterations_per_epoch,
                         validation_length=validation_length, gap_sequences=gap_sequences)
        if site_sampling not in ("uniform", "rule_gap"):
            raise ConfigError(f"QueueMAML.site_sampling must be uniform or rule_gap, got {site_sampling!r}")
        require_at_least("QueueMAML", 0, inner_steps=inner_steps)
        require_positive("QueueMAML", inner_lr=inner_lr, meta_lr=meta_lr, step_size_lr=step_size_lr)
        if learn_step_sizes:
            require_learnable_step_sizes("QueueMAML", "sgd", first_order, inner_steps)
        if inner_steps > 0 and rollouts_per_site != 1:
            raise ConfigError("QueueMAML.rollouts_per_site is for the mixture baseline (inner_steps 0) only")
        if meta_batch > len(TRAINING_SITES):
            raise ConfigError(f"QueueMAML.meta_batch must be at most the {len(TRAINING_SITES)} training sites, "
                              f"got {meta_batch}")
        if (init_from is None) == (policy is None):
            raise ConfigError("QueueMAML needs one of init_from (a checkpoint) and policy (a fresh network's spec)")
        if inner_params not in ("all", "prior_weights"):
            raise ConfigError(f"QueueMAML.inner_params must be all or prior_weights, got {inner_params!r}")
        if inner_params != "all" and learn_step_sizes:
            raise ConfigError("QueueMAML.inner_params prior_weights fixes the step sizes; learn_step_sizes learns "
                              "them: choose one")
        if policy is None:
            self.net, _ = load_queue_policy(init_from)
        else:
            torch.manual_seed(seed)
            self.net = QueueNetwork(policy)
            self.hparams["policy"] = policy.to_dict()
        if inner_params == "prior_weights" and not self.net.spec.prior_mix:
            raise ConfigError("QueueMAML.inner_params prior_weights needs a policy with prior_mix: true")
        self.net.train()
        # MAML trains the scorer only; under DDP a parameter that never gets a gradient (the critic's)
        # would be waited for at every step
        self.net.value.requires_grad_(False)
        self.log_step_sizes = LearnedStepSizes(self.net.scorer) if learn_step_sizes else None
        self.sites = [(name, model, site_log(name, model, traces)) for name, model in TRAINING_SITES]
        first = self.sites[0][2]
        self.cfg = first.config(backfill=backfill, window=window, sequence_length=sequence_length,
                                **self.net.spec.observation())
        self.val_cfg = replace(self.cfg, sequence_length=validation_length)
        # a meta-iteration holds every site's inner and outer rollouts at once (second order: their graphs)
        rows, rollouts = sequences * episodes, meta_batch * (inner_steps + 1)
        decisions = rollouts * rows * sequence_length
        sizes = {"meta_batch": meta_batch, "inner_steps": inner_steps, "sequences": sequences, "episodes": episodes,
                 "sequence_length": sequence_length}
        require_total("QueueMAML", {"envs": rollouts * env_bytes(self.cfg, rows),
                                    "rollouts": rollouts * rollout_bytes(self.cfg, rows)}, sizes)
        require_time("QueueMAML", {"a meta-iteration": decisions * DECISION_SECONDS}, sizes)
        self.positions = [log.positions(0, log.jobs_before(train_fraction), sequence_length) for *_, log in self.sites]
        self._envs: dict = {}
        self.site_weights = torch.tensor(self.rule_gaps() if site_sampling == "rule_gap" else [1.0] * len(self.sites))

    def data_report(self) -> list[str]:
        """A line a training site: its log's reading and the site model that rewrote it (QueueLog.describe)."""
        return [log.describe() for *_, log in self.sites]

    def rule_gaps(self) -> list[float]:
        """Each training site's mean bounded slowdown of the meta-parameters (greedy, unadapted) over
        the best rule's, on gap_sequences sequences of validation_length jobs of its training range."""
        hp, gaps = self.hparams, []
        for site, (name, model, log) in enumerate(self.sites):
            starts = log.random_starts(hp.train_fraction, hp.validation_length, hp.gap_sequences,
                                       torch.Generator().manual_seed(seeds.SELECTION + site))
            policies = {**heuristic_policies(RULES, self.val_cfg), "policy": (QueuePolicy(self.net), self.val_cfg)}
            bsld = {n: float(r.sequences["mean_bounded_slowdown"].mean())
                    for n, r in compare_queue(policies, log, starts).items()}
            gaps.append(bsld.pop("policy") / min(bsld.values()))
            print(f"site {name}:{model.name}: policy / best rule {gaps[-1]:.3f}", flush=True)
        return gaps

    def meta_parameters(self) -> list[torch.nn.Parameter]:
        """The scorer's weights (the value head is not meta-learned)."""
        return list(self.net.scorer.parameters())

    def step_sizes(self) -> dict[str, torch.Tensor] | None:
        """Meta-SGD's per-weight multipliers of inner_lr, {scorer parameter name: exp(s)} in the order of
        scorer.parameters() (differentiable); with inner_params prior_weights the fixed ones (1 on
        them, 0 elsewhere); None otherwise."""
        if self.hparams.inner_params == "prior_weights":
            return {name: torch.full_like(p, float(name == "prior_weights")).detach()
                    for name, p in self.net.scorer.named_parameters()}
        return None if self.log_step_sizes is None else self.log_step_sizes.sizes()

    def env(self, site: int) -> QueueEnv:
        """Site `site`'s training env (fresh sequences at every reset; training_step seeds them), built once."""
        if site not in self._envs:
            hp = self.hparams
            self._envs[site] = site_env(self.sites[site][2], self.cfg, hp.sequences, hp.episodes,
                                        self.positions[site], seed=seeds.training(hp.seed, 0, stream=1 + site))
        return self._envs[site]

    def draw_sites(self, generator: torch.Generator) -> list[int]:
        """This meta-iteration's meta_batch sites (indices into self.sites; site_sampling)."""
        if self.hparams.site_sampling == "uniform":
            return torch.randperm(len(self.sites), generator=generator)[:self.hparams.meta_batch].tolist()
        return torch.multinomial(self.site_weights, self.hparams.meta_batch, replacement=True,
                                 generator=generator).tolist()

    def training_step(self, batch, batch_idx):
        hp = self.hparams
        rank = self.trainer.global_rank  # DDP ranks draw their own sites and sequences
        generator = torch.Generator().manual_seed(seeds.training(hp.seed, self.global_step, rank))
        chosen = self.draw_sites(generator)
        for site in set(chosen):  # the iteration's sequences follow from the seed and the iteration: a resume goes on
            self.env(site).set_seed(seeds.training(hp.seed, self.global_step, rank, stream=1 + site))
        optimizer = self.optimizers()
        optimizer.zero_grad()
        site_loss = self.mixture_loss if hp.inner_steps == 0 else self.adapted_loss
        meta_loss, bsld = 0.0, []
        for site in chosen:  # each site's backward runs in site_loss: its graph is freed before the next
            loss, seen = site_loss(self.env(site), generator)
            meta_loss, bsld = meta_loss + loss, bsld + seen
        self.check_loss(torch.tensor(meta_loss))
        if hp.first_order and hp.inner_steps > 0:
            self.mean_over_ranks(self.meta_parameters())
        self.check_gradients()
        # clipped as QueuePPO's steps (its max_grad_norm default): one site whose bounded slowdowns run to
        # thousands must not throw the shared start far (the learned step sizes, their own lr, are not clipped)
        torch.nn.utils.clip_grad_norm_(self.net.scorer.parameters(), PPOSettings.max_grad_norm)
        optimizer.step()
        self.log_dict({"train/meta_loss": meta_loss, "train/mean_bounded_slowdown": sum(bsld) / len(bsld)},
                      on_step=True, on_epoch=False)
        self.log("bsld", sum(bsld) / len(bsld), prog_bar=True, on_step=True, on_epoch=False, logger=False)
        self.log_step_size_means()

    def adapted_loss(self, env: QueueEnv, generator: torch.Generator) -> tuple[float, list[float]]:
        """One site's share of the meta-loss, backpropagated: inner_steps REINFORCE steps of a fast copy
        theta_k on the site's rollouts, then L_k(theta_k) on fresh ones / meta_batch. (The loss, the
        outer rollout's mean bounded slowdown.)"""
        hp = self.hparams
        inner = torch.optim.SGD(self.net.scorer.parameters(), lr=hp.inner_lr)
        scale = meta_sgd_callback(self.step_sizes())
        with higher.innerloop_ctx(self.net.scorer, inner, copy_initial_weights=False,
                                  track_higher_grads=not hp.first_order) as (fnet, diffopt):
            for _ in range(hp.inner_steps):
                played = rollout(env, fnet, self.net.spec, generator, device=self.device)
                diffopt.step(reinforce_loss(fnet, played, hp.episodes), grad_callback=scale)
            traj = rollout(env, fnet, self.net.spec, generator, device=self.device)
            loss = reinforce_loss(fnet, traj, hp.episodes) / hp.meta_batch
            self.meta_backward(loss, [fnet])
        return float(loss.detach()), [float(env.episode_metrics()["mean_bounded_slowdown"].mean())]

    def mixture_loss(self, env: QueueEnv, generator: torch.Generator) -> tuple[float, list[float]]:
        """The mixture baseline's share for one site, backpropagated: the meta-parameters' own loss on
        rollouts_per_site rollouts (as many episodes as a MAML iteration's), no inner step. (The loss,
        each rollout's mean bounded slowdown.)"""
        hp = self.hparams
        total, seen = 0.0, []
        for _ in range(hp.rollouts_per_site):
            traj = rollout(env, self.net.scorer, self.net.spec, generator, device=self.device)
            loss = reinforce_loss(self.net.scorer, traj, hp.episodes) / (hp.meta_batch * hp.rollouts_per_site)
            self.manual_backward(loss)
            total += float(loss.detach())
            seen.append(float(env.episode_metrics()["mean_bounded_slowdown"].mean()))
        return total, seen

    def evaluation_command(self, checkpoint: str) -> tuple[str, list[str]]:
        """(the script, its arguments) that adapt `checkpoint` with its own inner loop to the first
        held-out site and measure it beside the rules after each step."""
        hp = self.hparams
        return "adapt", ["--env", "queue", "--site", HELDOUT_SITES[0][1].name, "--traces_dir", str(hp.traces),
                         "--backfill", hp.backfill, "--sequence_length", str(hp.sequence_length), "--policy",
                         checkpoint, "--threads", "1"]

    # ----- validation: adapt as training does, then the greedy policy on fixed sequences ----------
    def validation_metrics(self) -> set[str]:
        return {"eval/mean_bounded_slowdown"}

    @torch.inference_mode(False)  # Lightning validates under inference mode; adapting needs gradients
    @torch.enable_grad()
    def validation_step(self, batch, batch_idx):
        hp = self.hparams
        results = []
        step_sizes = self.step_sizes()
        step_sizes = None if step_sizes is None else {name: a.detach() for name, a in step_sizes.items()}
        for site, (_, _, log) in enumerate(self.sites):
            # the sequence is drawn first, from a generator of its own: the same for every inner_steps
            # (MAML and its mixture baseline) and whatever the adaptation's rollouts drew
            seed = seeds.VALIDATION + site
            start = log.random_starts(hp.train_fraction, hp.validation_length, 1, torch.Generator().manual_seed(seed))
            # a copy adapted as training adapts (the meta-policy untouched), then measured greedily
            curve, _ = adaptation_curve(self.net, log, self.val_cfg, start, hp.inner_steps, hp.inner_lr, hp.sequences,
                                        hp.episodes, log.jobs_before(hp.train_fraction), seed,
                                        train_length=hp.sequence_length, measure_at=[hp.inner_steps],
                                        step_sizes=step_sizes)
            results.append(float(curve[hp.inner_steps][0]))
        value = sum(results) / len(results)
        self.log("eval/mean_bounded_slowdown", value, on_step=False, on_epoch=True, batch_size=1)
        self.log("val_bsld", value, prog_bar=True, logger=False, on_epoch=True, batch_size=1)

    def on_save_checkpoint(self, checkpoint):
        hp = self.hparams
        inner = QueueInnerLoop(hp.inner_steps, hp.inner_lr, hp.sequences, hp.episodes, self.step_sizes()).to_record()
        sites = [f"{name}:{model.name}" for name, model, _ in self.sites]  # log:site model (queue.sites)
        checkpoint[CHECKPOINT_KEY] = QueuePolicyRecord.of(self.net, self.cfg, sites, hp.train_fraction,
                                                          adaptation=inner).to_dict()
        super().on_save_checkpoint(checkpoint)

