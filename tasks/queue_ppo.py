"""PPO on the job-level queue env (RLScheduler's formulation, docs/hpc_queue.md) as a LightningModule,
with TorchRL's objectives: `GAE` for the advantages and `ClipPPOLoss` for the update.

    for each iteration:                                        (training_step)
        draw B sequences of L consecutive jobs from the training range of the log
        roll them out with pi_theta, one batched QueueEnv      (rollout)
        [policy.reserve: pi_theta samples the ranking's first job, the env starts the reservation's
         pick (queue.reservation); the update is on the first job's probabilities]
        [the first `imitation_iterations`: roll out the teacher `imitate` instead (a rule, or the
         rollout lookahead over all rules: expert iteration), and fit pi_theta to its picks
         (cross-entropy) and V to its returns; with `imitation_aggregate`, to all its decisions so far;
         with `dagger`, after the first the network acts and the teacher labels the states it visits]
        V(s_t) for every decision, GAE(gamma, lambda)          (advantages)
        for each of `epochs` passes, over shuffled minibatches:
            ClipPPOLoss: clipped surrogate + critic + entropy  (one Adam step a minibatch)
            [+ prior_kl x KL(pi_theta || the prior rule's softmax), with policy.prior]

RLScheduler (Zhang et al., SC'20) trains its kernel network with PPO, gamma 1, lambda 0.97, clip
0.2 on sequences of 256 jobs; those are the defaults here. Validation runs the greedy policy on
fixed sequences (of the training range unless `validation.end_fraction` says otherwise) and logs
eval/mean_bounded_slowdown, which the best checkpoint monitors (configs/base/queue.yaml). Checkpoints
hold the policy alone under "lightning_sched" (`lightning_sched.queue.policy.load_queue_policy` reads it,
weights_only=True).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from lightning_sched import seeds
from lightning_sched.cli import log_reading_args
from lightning_sched.config import ConfigError
from lightning_sched.learning.policy_gradient import per_sequence_scaled, sequence_advantages
from lightning_sched.limits import require_time, require_total
from lightning_sched.queue import native as queue_native
from lightning_sched.queue.config import QueueConfig
from lightning_sched.queue.env import DECISION_SECONDS, QueueEnv, env_bytes, rollout_bytes
from lightning_sched.queue.evaluation import EVAL_LENGTH, METRICS, RLSCHEDULER_JOBS, TRAIN_FRACTION
from lightning_sched.queue.heuristics import HEURISTICS, RULES, QueueHeuristic
from lightning_sched.queue.log import QueueLog, read_queue_logs, reading_report
from lightning_sched.queue.lookahead import LookaheadPolicy, LookaheadSettings
from lightning_sched.queue.policy import (
    CHECKPOINT_KEY,
    IN_KEYS,
    QueueNetwork,
    QueuePolicy,
    QueuePolicyRecord,
    QueuePolicySpec,
    load_queue_policy,
    make_actor,
    make_critic,
    network_inputs,
    reserved_action,
)
from lightning_sched.queue.rollout import collect, labelled
from lightning_sched.queue.sites import ArrivalCopies

from .base import IterationTask, require_at_least
from .queue_ppo_settings import PPOSettings, QueueValidation

# what the rollout keeps of each step: the observation the network reads, the action's record ("first": a
# reserving policy's sampled job, which its log-prob is of; "action" is what the env started), a teacher's label
ROLLOUT_KEYS = (*IN_KEYS, "action_mask", "action", "first", "action_log_prob", "label", "done", ("next", "reward"),
                ("next", "done"), ("next", "terminated"))
ENV_DEVICES = ("auto", "cpu", "module")  # QueuePPO.env_device


class QueuePPO(IterationTask):
    """PPO on B queue episodes at once.

    Args:
        log: an SWF log (.swf or .swf.gz), read as RLScheduler reads it (queue.log), or several logs
            of one cluster size: row b of every batch replays log (b // E) % len(log), E the
            episodes a sequence (ppo.episodes_per_sequence), so each iteration and each validation
            sees them all.
        nodes, processors_per_node: the cluster (default: each log header's); oversize: a job larger
            than it is refused ("refuse", naming its line) or dropped and counted ("drop").
        load: scale each log's inter-arrival times to this offered load (as evaluate.py's --load); None:
            as recorded. A lightly loaded log, where almost no job waits, gives PPO nothing to learn.
        train_fraction: training sequences come from the first this share of the log's jobs in
            submit order: 1.0 as RLScheduler, 0.8 for the held-out protocol (its test sequences come
            from the last 20%); validation's by default too (`QueueValidation.range`).
        backfill, window, sequence_length, bsld_threshold, reward: the QueueConfig fields (the
            cluster comes from the log; the feature scales are QueueConfig's, the same for every log).
        policy: the network's sizes (`QueuePolicySpec`).
        batch_size: B, episodes per iteration. RLScheduler: 100 trajectories an epoch.
        ppo: `PPOSettings`.
        validation: `QueueValidation`.
        iterations_per_epoch: iterations between epoch ends (pacing only).
        imitate: the teacher the first `imitation_iterations` iterations imitate: a rule of
            lightning_sched.queue.heuristics (ranking the window, as the network sees it), or
            "lookahead" (`lightning_sched.queue.lookahead`, with the `lookahead` settings; CPU
            only); None: PPO throughout.
        imitation_iterations: how many.
        imitation_aggregate: each imitation iteration fits all the teacher's decisions so far
            (expert iteration's growing dataset; kept in memory, not in checkpoints), not only its own.
        dagger: DAgger (Ross et al., 2011): imitation iterations after the first roll out the
            network (sampling) and fit it to the teacher's picks in the states it visits.
        lookahead: `LookaheadSettings` of the "lookahead" teacher.
        init_from: a queue policy checkpoint whose network (its sizes and weights) this run starts
            from, e.g. to go on with longer sequences; the run's own settings stay.
        arrival_copies: `ArrivalCopies`, training logs beyond the logs themselves.
        env_device: where the training and validation envs step: "auto", on the CPU when the native
            kernel loads (at training batch sizes it outruns the torch step on a GPU, many times over
            with EASY: docs/performance.md, "On a GPU"), else with the network; "cpu"; "module",
            with the network. The network runs on the module's device either way.
        seed: seeds the training sequences and the action sampling.
    """

    def __init__(self, log: str | list[str], train_fraction: float = 1.0, backfill: str = QueueConfig.backfill,
                 window: int = QueueConfig.window, sequence_length: int = QueueConfig.sequence_length,
                 bsld_threshold: float = QueueConfig.bsld_threshold, reward: str = QueueConfig.reward,
                 policy: QueuePolicySpec = QueuePolicySpec(), batch_size: int = 16, ppo: PPOSettings = PPOSettings(),
                 validation: QueueValidation = QueueValidation(), iterations_per_epoch: int = 100,
                 imitate: str | None = None, imitation_iterations: int = 0, imitation_aggregate: bool = False,
                 dagger: bool = False, lookahead: LookaheadSettings = LookaheadSettings(), init_from: str | None = None,
                 arrival_copies: ArrivalCopies = ArrivalCopies(), env_device: str = "auto", seed: int = 0,
                 nodes: int | None = None, processors_per_node: int | None = None, oversize: str = "refuse",
                 load: float | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.iterations_per_epoch = iterations_per_epoch
        self.automatic_optimization = False  # several optimizer steps an iteration
        require_at_least("QueuePPO", 1, batch_size=batch_size, iterations_per_epoch=iterations_per_epoch,
                         **{f"validation.{k}": getattr(validation, k) for k in ("sequences", "sequence_length")})
        if env_device not in ENV_DEVICES:
            raise ConfigError(f"QueuePPO.env_device must be one of {', '.join(ENV_DEVICES)}, got {env_device!r}")
        if not 0 < train_fraction <= 1:
            raise ConfigError(f"QueuePPO.train_fraction must be in (0, 1], got {train_fraction}")
        if imitate not in (None, "lookahead", *HEURISTICS):
            raise ConfigError(f"QueuePPO.imitate must be 'lookahead' or one of {', '.join(HEURISTICS)}, "
                              f"got {imitate!r}")
        val_start, val_end = validation.range(train_fraction)
        self.read_fraction = max(train_fraction, val_end)  # what the checkpoint says the run has seen
        if init_from is None:
            self.net = QueueNetwork(policy)
        else:  # the checkpoint's network, sizes and weights: `policy` does not apply
            self.net, _ = load_queue_policy(init_from)
            self.net.train()
            self.hparams["policy"] = self.net.spec.to_dict()
        self.logs: list[QueueLog] = read_queue_logs(log, nodes, processors_per_node, oversize, load, "QueuePPO.")
        sizes = {(one.nodes, one.processors_per_node): one.path for one in self.logs}
        if len(sizes) > 1:  # the env replays every row on the first log's cluster
            (a, path_a), (b, path_b) = list(sizes.items())[:2]
            raise ConfigError(f"QueuePPO.log: {Path(path_a).name} is {a[0]} nodes x {a[1]}, {Path(path_b).name} "
                              f"{b[0]} x {b[1]}: one run trains on logs of one cluster size (nodes and "
                              "processors_per_node replay them all on one)")
        self.cfg = self.logs[0].config(backfill=backfill, window=window, sequence_length=sequence_length,
                                       bsld_threshold=bsld_threshold, reward=reward,
                                       **self.net.spec.observation())  # the extra job features it reads
        self.val_cfg = replace(self.cfg, sequence_length=validation.sequence_length)
        # what an iteration holds at once: the training env, the validation env and the rollout's decisions
        require_total("QueuePPO", {"training env": env_bytes(self.cfg, batch_size),
                                   "validation env": env_bytes(self.val_cfg, validation.sequences),
                                   "rollout": rollout_bytes(self.cfg, batch_size)},
                      {"batch_size": batch_size, "sequence_length": sequence_length, "window": window,
                       "validation.sequences": validation.sequences})
        require_time("QueuePPO", {"an iteration": batch_size * sequence_length * DECISION_SECONDS,
                                  "a validation": validation.sequences * validation.sequence_length * DECISION_SECONDS},
                     {"batch_size": batch_size, "sequence_length": sequence_length,
                      "validation.sequences": validation.sequences,
                      "validation.sequence_length": validation.sequence_length})
        self.train_logs = arrival_copies.of(self.logs)  # the copies keep the jobs: the same training range
        if batch_size % ppo.episodes_per_sequence:  # the env's groups of episodes replaying one sequence
            raise ConfigError(f"QueuePPO.batch_size {batch_size} must be a multiple of ppo.episodes_per_sequence "
                              f"{ppo.episodes_per_sequence}")
        if len(self.train_logs) * ppo.episodes_per_sequence > batch_size:  # a log without rows would never train
            copies = " (with arrival_copies)" if arrival_copies.copies else ""
            raise ConfigError(f"QueuePPO.batch_size {batch_size} is below {len(self.train_logs)} training logs{copies} "
                              f"x ppo.episodes_per_sequence {ppo.episodes_per_sequence}")
        self.positions = [one.positions(0, one.jobs_before(train_fraction), sequence_length) for one in self.train_logs]
        self.val_positions = []
        for one in self.logs:
            try:
                first = one.jobs_before(val_start)
                self.val_positions.append(one.positions(first, one.jobs_before(val_end), validation.sequence_length))
            except ConfigError as error:
                raise ConfigError(f"QueuePPO.validation.sequence_length: {error}") from None
        self.imitation_data: TensorDict | None = None
        if ppo.prior_kl > 0 and self.net.spec.prior is None:
            raise ConfigError(f"QueuePPO.ppo.prior_kl {ppo.prior_kl} needs a network with a prior (policy.prior)")
        if imitate is not None and self.net.spec.reserve:
            raise ConfigError("QueuePPO.imitate: a reserving policy (policy.reserve) learns its ranking's first job, "
                              "which a rule's pick does not give; start it from a rule with policy.prior instead")
        if imitation_iterations < 0 or (imitation_iterations > 0) != (imitate is not None):
            raise ConfigError(f"QueuePPO.imitation_iterations must be > 0 with imitate and 0 without, got "
                              f"{imitation_iterations} with imitate={imitate!r}")
        self.loss = self.make_loss(ppo)
        # no value network: the rollout computes every value in one call (next values are the next
        # decision's), so GAE only runs the recursion
        self.gae = GAE(gamma=ppo.gamma, lmbda=ppo.gae_lambda, value_network=None)
        self.ppo, self.validation, self.lookahead, self.seed = ppo, validation, lookahead, seed
        self._envs: dict[str, QueueEnv] = {}

    def make_loss(self, ppo: PPOSettings) -> ClipPPOLoss:
        """TorchRL's clipped PPO loss over the network's actor and critic."""
        # functional=False: the loss calls the network's own modules (no parameter copies, DDP works);
        # the state_dict names the shared weights twice, under net. and loss.
        loss = ClipPPOLoss(make_actor(self.net), make_critic(self.net, dense=False), clip_epsilon=ppo.clip,
                           entropy_coeff=ppo.entropy_coef, critic_coeff=ppo.critic_coef, normalize_advantage=True,
                           functional=False)
        # a reserving policy's probabilities are of the job its ranking puts first; the env starts the
        # reservation's pick, a function of that job and the state (policy.reserved_action)
        loss.set_keys(sample_log_prob="action_log_prob", action="first" if self.net.spec.reserve else "action")
        return loss

    @property
    def actor(self):
        """The sampling actor (TorchRL ProbabilisticActor over self.net's scorer)."""
        return self.loss.actor_network

    @property
    def critic(self):
        """The critic (TorchRL ValueOperator over self.net's value head)."""
        return self.loss.critic_network

    def env_device(self) -> torch.device:
        """The device the envs step on (`env_device`)."""
        choice = self.hparams.env_device
        if choice == "cpu" or (choice == "auto" and queue_native.kernel() is not None):
            return torch.device("cpu")
        return self.device

    def env(self, name: str) -> QueueEnv:
        """The training env (fresh sequences at every reset) or the validation env (fixed ones), on
        `env_device()`, built once."""
        env = self._envs.get(name)
        if env is None or env.device != self.env_device():
            if name == "train":
                env = QueueEnv(self.cfg, self.train_logs, batch_size=[self.hparams.batch_size],
                               positions=self.positions, device=self.env_device(),
                               episodes_per_sequence=self.ppo.episodes_per_sequence)
            else:  # row b validates on log b % len(logs), as the training rows
                v = self.validation
                generator = torch.Generator().manual_seed(v.seed)
                ranges = [self.val_positions[b % len(self.logs)] for b in range(v.sequences)]
                starts = torch.stack([torch.randint(lo, hi + 1, (), generator=generator) for lo, hi in ranges])
                env = QueueEnv(self.val_cfg, self.logs, batch_size=[v.sequences], starts=starts,
                               device=self.env_device())
            self._envs[name] = env
        return env

    # ----- training ------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, policy=None, labeler=None) -> tuple[TensorDict, dict[str, torch.Tensor]]:
        """B episodes with the sampling actor, or with `policy`: (the decisions, [N], with
        "advantage" and "value_target", and with a `labeler` policy its pick in each state as
        "label"; the episodes' metrics, each DoubleTensor[B]). Rows that finish early step on
        (ignored by the env) until all are done; those steps are dropped. A teacher acts on the env's
        device, the network on the module's."""
        env = self.env("train")
        env.set_seed(seeds.training(self.seed, self.global_step, self.trainer.global_rank))
        act = self.sample if policy is None else policy
        traj = collect(env, act if labeler is None else labelled(act, labeler), ROLLOUT_KEYS).to(self.device)
        decided = self.add_advantages(traj)
        return traj[decided], self.on_module_device(env.episode_metrics())

    def sample(self, td: TensorDict) -> TensorDict:
        """The sampling actor's decisions for the env's `td` [B]: only what the network reads travels to
        its device, and its picks back ("action"; a reserving policy's sampled job as "first")."""
        with set_exploration_type(ExplorationType.RANDOM):  # the actor's default is its mode
            picked = self.actor(network_inputs(td, self.device))
        td.update(picked.select("logits", "action", "action_log_prob").to(td.device))
        if self.net.spec.reserve:
            td["first"] = td["action"]
            td["action"] = reserved_action(self.net.spec, td["logits"], td["first"], td)
        return td

    def add_advantages(self, traj: TensorDict) -> torch.Tensor:
        """Set "advantage" and "value_target" [B, T, 1] on the rollout `traj` [B, T] (GAE over the
        critic's values, or DeepRM's sequence baseline); the mask [B, T] of the steps that were
        decisions (the row was not finished before them)."""
        value = self.critic(traj.select(*IN_KEYS, "action_mask"))["state_value"]  # [B, T, 1]
        traj["state_value"] = value
        # s_{t+1} is the next decision's state; after the last decision every row is terminated
        traj["next", "state_value"] = torch.cat([value[:, 1:], torch.zeros_like(value[:, :1])], 1)
        traj["next", "reward"] = traj["next", "reward"] / self.ppo.reward_scale
        decided = ~traj["done"].squeeze(-1)  # the row was not finished before this step
        if self.ppo.advantage == "gae":
            self.gae(traj)
        else:  # [T, B] as the DeepRM baselines lay decisions out
            active = decided.T
            advantage, returns = sequence_advantages(traj["next", "reward"].squeeze(-1).T, active,
                                                     self.ppo.episodes_per_sequence, self.ppo.gamma)
            if self.ppo.scale_per_sequence:
                advantage = per_sequence_scaled(advantage, active, self.ppo.episodes_per_sequence)
            traj["advantage"], traj["value_target"] = advantage.T.unsqueeze(-1), returns.T.unsqueeze(-1)
        return decided

    def teacher(self, env: QueueEnv):
        """The policy the warm start imitates, acting on `env`."""
        if self.hparams.imitate == "lookahead":
            return LookaheadPolicy(env, self.lookahead)
        return QueueHeuristic(self.hparams.imitate, window_only=True)

    def imitation(self, data: TensorDict) -> TensorDict:
        """The warm start's losses on the teacher's decisions `data` [N] (job_features [N, W, F],
        action_mask [N, W], label [N]; or, with DAgger, its labels of the network's states):
        cross-entropy of pi_theta against its picks, and the critic's squared error to the rollout's
        value targets [N, 1]; each a scalar."""
        log_prob = self.actor.get_dist(data.select(*IN_KEYS, "action_mask")).log_prob(data["label"])
        value = self.critic(data.select(*IN_KEYS, "action_mask"))["state_value"]
        return TensorDict({"loss_objective": -log_prob.mean(),
                           "loss_critic": self.ppo.critic_coef * (value - data["value_target"]).pow(2).mean()}, [])

    def prior_kl(self, data: TensorDict) -> torch.Tensor:
        """Mean over the decisions of `data` [N] (job_features [N, W, F], action_mask [N, W]) of
        KL(pi_theta || softmax of the prior rule's logits): a scalar."""
        mask = data["action_mask"]
        logits = self.net.scorer(data["job_features"], data["cluster_features"], mask)
        log_p = torch.log_softmax(logits, -1).masked_fill(~mask, 0.0)  # empty slots: -inf - -inf would be nan
        log_q = torch.log_softmax(self.net.scorer.prior_logits(data["job_features"], mask), -1).masked_fill(~mask, 0.0)
        return (log_p.exp() * mask * (log_p - log_q)).sum(-1).mean()

    def training_step(self, batch, batch_idx):
        # the iteration's draws from torch's generators (the actor's samples, the minibatches' order)
        # follow from the seed, the iteration and the rank alone: a resume from last.ckpt goes on as
        # the run would have, whatever Lightning drew from them meanwhile (its dataloaders do)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seeds.training(self.seed, self.global_step, self.trainer.global_rank, stream=1))
            self.iterate()

    def iterate(self) -> None:
        """One PPO iteration: a rollout (or the teacher's), then the update's epochs in minibatches."""
        start = time.perf_counter()
        imitating = self.global_step < self.hparams.imitation_iterations
        data, metrics = self.collect(imitating)
        rollout_s, decisions = time.perf_counter() - start, data.shape[0]
        losses = self.update(data, imitating)
        values = {f"train/{k}": v for k, v in losses.items()}
        values.update({f"train/{m}": metrics[m].mean().float() for m in METRICS})
        values.update({"train/decisions": float(decisions), "perf/rollout_s": rollout_s,
                       "perf/iteration_s": time.perf_counter() - start, "perf/decisions_per_s": decisions / rollout_s})
        self.log_dict(values, on_step=True, on_epoch=False, sync_dist=self.trainer.world_size > 1)
        self.log("bsld", metrics["mean_bounded_slowdown"].mean().float(), prog_bar=True, on_step=True,
                 on_epoch=False, logger=False)

    def collect(self, imitating: bool) -> tuple[TensorDict, dict[str, torch.Tensor]]:
        """This iteration's decisions [N] and episode metrics: the network's rollout, or while
        `imitating` the teacher's (or with DAgger the network's, labelled by the teacher), reduced to
        what the warm start fits and, with `imitation_aggregate`, joined to the earlier iterations'."""
        if imitating and self.hparams.dagger and self.global_step > 0:
            data, metrics = self.rollout(labeler=self.teacher(self.env("train")))
        else:
            data, metrics = self.rollout(self.teacher(self.env("train")) if imitating else None)
        if not imitating:
            self.imitation_data = None
            return data, metrics
        # when the teacher acted, its picks are the labels
        data = data.set("label", data.get("label", data["action"])).select(*IN_KEYS, "action_mask", "label",
                                                                          "value_target")
        if self.hparams.imitation_aggregate:
            earlier = [] if self.imitation_data is None else [self.imitation_data.to(data.device)]
            self.imitation_data = data = torch.cat([*earlier, data])
        return data, metrics

    def update(self, data: TensorDict, imitating: bool) -> dict[str, float]:
        """`ppo.epochs` passes over `data` [N] in shuffled minibatches, one Adam step each, on the PPO
        loss (or while `imitating` the warm start's); the losses' means over the steps."""
        optimizer = self.optimizers()
        n = data.shape[0]
        own = -(-n // self.ppo.minibatch_size)
        # under DDP every backward averages the ranks' gradients, so every rank takes as many steps: the
        # most any rank needs (with EASY backfilling the ranks' episodes make different numbers of decisions)
        batches = int(self.all_gather(torch.tensor(own, device=self.device)).max()) if self.trainer.world_size > 1 \
            else own
        count = steps = self.ppo.epochs * batches  # optimizer steps this iteration
        sums: dict[str, float] = {}
        for _ in range(self.ppo.epochs):
            for index in minibatches(n, self.ppo.minibatch_size, batches, self.device):
                parts = self.imitation(data[index]) if imitating else self.loss(data[index])
                if self.ppo.prior_kl > 0 and not imitating:
                    parts["loss_prior_kl"] = self.ppo.prior_kl * self.prior_kl(data[index])
                loss = parts["loss_objective"] + parts["loss_critic"] + parts.get("loss_entropy", 0.0) + \
                    parts.get("loss_prior_kl", 0.0)
                self.check_loss(loss)
                optimizer.zero_grad()
                self.manual_backward(loss)
                self.check_gradients()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.ppo.max_grad_norm)
                # only the iteration's last step goes through Lightning's wrapper, which counts
                # trainer.global_step: max_steps, seeds and checkpoints count iterations (the others
                # skip its precision plugin: queue training runs in fp32)
                steps -= 1
                optimizer.step() if steps == 0 else optimizer.optimizer.step()
                for key in ("loss_objective", "loss_critic", "loss_prior_kl", "entropy", "clip_fraction", "kl_approx"):
                    if key in parts.keys():
                        sums[key] = sums.get(key, 0.0) + float(parts[key].detach())
        return {key: total / count for key, total in sums.items()}

    def configure_optimizers(self):
        self.require_full_precision("its minibatch steps within an iteration bypass Lightning's precision plugin")
        return torch.optim.Adam(self.net.parameters(), lr=self.ppo.lr)

    # ----- validation: the greedy policy on fixed sequences --------------------------------------
    @torch.no_grad()
    def evaluate(self, env: QueueEnv) -> dict[str, torch.Tensor]:
        """The greedy policy's episode metrics on `env`'s sequences (each DoubleTensor[B])."""
        collect(env, QueuePolicy(self.net, greedy=True))  # the network on its device, the env on its own
        return self.on_module_device(env.episode_metrics())

    def on_module_device(self, metrics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`metrics` where logging (and DDP's reduction of them) expects them."""
        return {name: value.to(self.device) for name, value in metrics.items()}

    def evaluation_command(self, checkpoint: str) -> tuple[str, list[str]]:
        """(the script, its arguments) that measure `checkpoint` beside the rules: on the held-out
        protocol (the last 20% of each log) when the run read at most the first 80% (or a log is too short
        for RLScheduler's: evaluate.py then names the sequences it read), else on RLScheduler's (whose model
        also trained on whole logs)."""
        hp = self.hparams
        reading = log_reading_args(hp.nodes, hp.processors_per_node, hp.oversize, hp.load)
        whole_logs = self.read_fraction > TRAIN_FRACTION and \
            min(one.num_jobs for one in self.logs) >= RLSCHEDULER_JOBS
        protocol = "rlscheduler" if whole_logs else "heldout"
        held_out = min(one.num_jobs - one.jobs_before(TRAIN_FRACTION) for one in self.logs)
        if protocol == "heldout" and held_out < EVAL_LENGTH:  # a short log: sequences that fit its last 20%
            reading.append(f"--sequence_length={max(1, held_out // 2)}")
        return "evaluate", ["--env", "queue", "--protocol", protocol, "--trace", *[one.path for one in self.logs],
                            *reading, "--backfill", self.cfg.backfill, "--policy", *RULES, checkpoint]

    def data_report(self) -> list[str]:
        """What fit.py prints at the start: what reading did to each log, and a light load (`reading_report`)."""
        return reading_report(self.logs)

    def validation_metrics(self) -> set[str]:
        return {f"eval/{m}" for m in METRICS}

    def validation_step(self, batch, batch_idx):
        metrics = self.evaluate(self.env("val"))
        values = {f"eval/{m}": metrics[m].mean().float() for m in METRICS}
        self.log_dict(values, on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
        self.log("val_bsld", values["eval/mean_bounded_slowdown"], prog_bar=True, logger=False, on_epoch=True,
                 batch_size=1)

    # ----- checkpoints: the policy alone, readable without this module ---------------------------
    def on_save_checkpoint(self, checkpoint):
        checkpoint[CHECKPOINT_KEY] = QueuePolicyRecord.of(self.net, self.cfg, [one.path for one in self.logs],
                                                          self.read_fraction).to_dict()
        super().on_save_checkpoint(checkpoint)

    def on_load_checkpoint(self, checkpoint):
        saved = checkpoint.get(CHECKPOINT_KEY, {}).get("queue")
        if saved is not None and saved != self.cfg.to_dict():
            differ = [f"{k} (checkpoint {v!r}, run {self.cfg.to_dict().get(k)!r})" for k, v in saved.items()
                      if self.cfg.to_dict().get(k) != v]
            raise ConfigError(f"the checkpoint's queue differs from this run's: {', '.join(differ)}")
        step = checkpoint.get("global_step", 0)
        if self.hparams.imitation_aggregate and 0 < step < self.hparams.imitation_iterations:
            raise ConfigError(f"a resume at iteration {step}, inside the warm start that aggregates its imitation "
                              "data, would lose that data (checkpoints do not keep it: it grows by a rollout an "
                              "iteration); start the run again")


def minibatches(n: int, size: int, count: int, device) -> tuple[torch.Tensor, ...]:
    """One epoch's minibatches of n decisions in a random order: of `size` each (the last one shorter),
    or, where another DDP rank needs more of them, `count` nearly equal ones (every decision in one,
    and in more than one only when there are fewer decisions than minibatches): LongTensor indices
    into the n decisions, one tensor a minibatch."""
    order = torch.randperm(n, device=device)
    if count == -(-n // size):
        return order.split(size)
    return order.repeat(-(-count // n))[:max(n, count)].tensor_split(count)
