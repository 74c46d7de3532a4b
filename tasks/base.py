"""What every training algorithm of this project shares, so that an algorithm is its training step.

`IterationTask` (every module, both environments) owns the pacing dataloaders (one item an
iteration, one validation batch), the finite checks of the loss, gradients and weights, and plain
hyperparameters in checkpoints. `SchedulerTask` (DeepRM's cluster) adds:
    data          the dataloader only paces iterations; jobsets are drawn inside the step, on the
                  module's device, from seeds that follow (seed, iteration, rank): ranks under DDP
                  draw different jobsets and a resumed run draws the same ones (lightning_sched.seeds)
    evaluation    validation and test steps on fixed jobsets, logged as eval/... and test/...
    checkpoints   the policy alone under CHECKPOINT_KEY (readable without this code) and the
                  action sampler's state; a resume on another cluster is refused
    faults        a step that makes the parameters non-finite stops training before the next
                  validation or checkpoint, so the checkpoints on disk stay good
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, DistributedSampler

from lightning_sched import ClusterConfig, JobSet, seeds
from lightning_sched.config import ConfigError, is_finite, is_int
from lightning_sched.deeprm.objectives import METRICS
from lightning_sched.deeprm.rollout import rollout_seconds
from lightning_sched.evaluation import EvalResult, evaluate, make_jobsets, run_bytes
from lightning_sched.learning.baselines import Baseline, TimeIndexedBaseline
from lightning_sched.learning.finite import require_finite
from lightning_sched.limits import require_time, require_total
from lightning_sched.policies.acting import Acting, NetworkPolicy
from lightning_sched.policies.checkpoints import CHECKPOINT_KEY, PolicyRecord
from lightning_sched.policies.networks import PolicySpec, make_policy


@dataclass
class EvaluationSettings:
    """The fixed jobsets a task is measured on. Their seeds are in the held-out ranges of
    lightning_sched.seeds, which training never draws from."""

    val_jobsets: int = 100
    """Jobsets of the validation set, evaluated every trainer.val_check_interval iterations."""
    val_seed: int = seeds.VALIDATION
    """Seed of the validation set (and of the evaluation's action sampling)."""
    test_jobsets: int = 200
    """Jobsets of `fit.py test`."""
    test_seed: int = seeds.EVALUATION
    """Seed of the test set."""
    greedy: bool = False
    """Evaluate the policy's argmax; default: sample its actions, as DeepRM's evaluation does (an
    unmasked policy's argmax can keep picking a slot whose job does not fit, wasting time steps)."""


def plain_values(value):
    """`value` as plain dicts, lists, tuples, strings, numbers and tensors, so that a checkpoint loads
    with torch.load(weights_only=True): a dataclass as the dict of its constructor's fields, any
    other object as its repr (hyperparameters record a run's arguments; nothing rebuilds the module
    from them but LightningCLI, whose are plain)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_values(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, dict):
        return {key: plain_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):  # a named tuple as a plain one
        items = [plain_values(item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    return repr(value)


def require_at_least(owner: str, low: int, **values: int) -> None:
    """A ConfigError naming the first field that is not an integer >= `low` (a count: a module built
    from Python, not the CLI, may be given 2.5 or True)."""
    for name, value in values.items():
        if not is_int(value, low):
            raise ConfigError(f"{owner}.{name} must be an integer >= {low}, got {value!r}")


def require_positive(owner: str, **values: float) -> None:
    """A ConfigError naming the first field that is not a finite number > 0 (a step size, say)."""
    for name, value in values.items():
        if not is_finite(value) or value <= 0:
            raise ConfigError(f"{owner}.{name} must be a finite number > 0, got {value!r}")


def pacing_loader(iterations: int) -> DataLoader:
    """`iterations` steps an epoch on every rank: the steps draw their own data, so a DDP run's ranks
    each run every iteration (with a plain sampler Lightning would split them over the ranks, and an
    epoch would end after iterations / ranks steps)."""
    every_rank = DistributedSampler(range(iterations), num_replicas=1, rank=0, shuffle=False)
    return DataLoader(range(iterations), batch_size=None, sampler=every_rank)


class IterationTask(LightningModule):
    """One training iteration a step, `iterations_per_epoch` of them an epoch (pacing only: the
    data is drawn inside the step), one validation batch; the faults and checkpoint hygiene above.
    A subclass sets `self.iterations_per_epoch`."""

    iterations_per_epoch: int

    def validation_metrics(self) -> set[str] | None:
        """The keys its validation logs (fit.py checks a monitored eval/ key against them, and those of
        callbacks that log more, before training); None: not declared, nothing checked."""
        return None

    def train_dataloader(self):
        return pacing_loader(self.iterations_per_epoch)

    def val_dataloader(self):
        return DataLoader([0], batch_size=None)

    def check_loss(self, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite loss {loss.item()} at iteration {self.global_step}; training stops here, "
                "the checkpoints written so far are kept (lower lr?)")

    def check_gradients(self) -> None:
        """Before an optimizer step: non-finite gradients stop training before they are applied."""
        require_finite(self, f"at iteration {self.global_step}", gradients=True)

    def require_full_precision(self, why: str) -> None:
        """A ConfigError unless the trainer runs in 32 or 64 bits: steps taken past Lightning's optimizer
        wrapper (`why`) skip its precision plugin, whose loss scaling they would apply unscaled."""
        if str(self.trainer.precision) not in ("32-true", "32", "64-true", "64"):
            raise ConfigError(f"trainer.precision {self.trainer.precision}: {type(self).__name__} trains in 32-true "
                              f"or 64-true ({why})")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        # after the optimizer step and before any validation or checkpoint of this iteration: finite
        # gradients times a huge step size can still overflow
        require_finite(self, f"at iteration {self.global_step}")

    def mean_over_ranks(self, params) -> None:
        """Gradients set by hand (first-order MAML) never pass DDP's backward: average them over the
        ranks here (a parameter without one counts as zero), so every rank takes the same step."""
        if self.trainer.world_size > 1:
            for p in params:
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
                p.grad.copy_(self.trainer.strategy.reduce(p.grad, reduce_op="mean"))

    def on_save_checkpoint(self, checkpoint):
        # LightningCLI's are plain already; a module built in Python holds its arguments as objects
        if self.CHECKPOINT_HYPER_PARAMS_KEY in checkpoint:
            checkpoint[self.CHECKPOINT_HYPER_PARAMS_KEY] = plain_values(checkpoint[self.CHECKPOINT_HYPER_PARAMS_KEY])


class SchedulerTask(IterationTask):
    """The shared part of the training modules; a subclass implements `training_step`.

    Args (each subclass documents them again in its own terms):
        cluster: the cluster and the objective its reward follows (SPEC.md).
        workload: where jobsets come from (`DeepRMWorkload`, `WorkloadFamily`, `TraceWorkload`).
        policy: the network (`PolicySpec`).
        baseline: a `Baseline`; default DeepRM's time-indexed one.
        evaluation: the validation and test sets (`EvaluationSettings`).
        iterations_per_epoch: iterations between epoch ends (pacing only).
        seed: seeds the training jobsets and the action sampling.
    """

    def __init__(self, cluster: ClusterConfig, workload, policy: PolicySpec, baseline: Baseline | None,
                 evaluation: EvaluationSettings, iterations_per_epoch: int, seed: int):
        super().__init__()
        name = type(self).__name__
        require_at_least(name, 1, iterations_per_epoch=iterations_per_epoch,
                         **{f"evaluation.{k}": getattr(evaluation, k) for k in ("val_jobsets", "test_jobsets")})
        self.automatic_optimization = False  # the algorithms take their own optimizer steps
        # rollouts never render the image: the network reads structured keys
        self.cluster = cluster.replace(observation="none")
        workload.validate(self.cluster)
        self.workload = workload
        self.net = make_policy(policy, self.cluster)
        self.baseline = baseline or TimeIndexedBaseline()
        self.evaluation = evaluation
        self.iterations_per_epoch = iterations_per_epoch
        self.seed = seed
        self.sampler = torch.Generator().manual_seed(seed)
        self._sampler_step = None  # DDP ranks > 0: the iteration their sampler was seeded for
        self._held_out: dict[str, JobSet] = {}

    def require_rollouts_fit(self, jobsets: int, episodes: int, **fields) -> None:
        """One memory budget for the run, checked before anything is drawn: an iteration's `jobsets`
        x `episodes` rollouts (limits.require_total over evaluation.run_bytes) and the validation
        set held beside them; and one work budget (limits.require_time) for an iteration and a
        validation; one line naming `fields` and the estimate."""
        max_jobs = self.workload.max_jobs
        parts = run_bytes(self.cluster, max_jobs, jobsets, episodes)
        parts.update({f"validation {k}": v for k, v in
                      run_bytes(self.cluster, max_jobs, self.evaluation.val_jobsets).items()})
        fields = {**fields, "evaluation.val_jobsets": self.evaluation.val_jobsets,
                  "cluster.resource_units": self.cluster.resource_units, "job columns": max_jobs}
        require_total(f"{type(self).__name__}'s rollouts", parts, fields)
        # time: one iteration and one validation, the longest stretch before a logged result
        require_time(f"{type(self).__name__}'s rollouts",
                     {"an iteration": rollout_seconds(max_jobs, jobsets * episodes, network=True),
                      "a validation": rollout_seconds(max_jobs, self.evaluation.val_jobsets, network=True)}, fields)

    # ----- data ----------------------------------------------------------------------------------
    def test_dataloader(self):
        return DataLoader([0], batch_size=None)

    def share_of(self, total: int, field: str) -> int:
        """This rank's share of `total` items (jobsets, tasks) split evenly over the DDP ranks."""
        world = self.trainer.world_size
        if total % world:
            raise ConfigError(f"{type(self).__name__}.{field}={total} must divide evenly over {world} devices")
        return total // world

    def iteration_seed(self, stream: int = 0) -> int:
        """The seed of one draw (`stream`) of this iteration on this rank."""
        return seeds.training(self.seed, self.global_step, self.trainer.global_rank, stream)

    def action_sampler(self) -> torch.Generator:
        """The generator of the rollouts' action samples, on the module's device. Rank 0's runs on
        (checkpoints keep its state); under DDP the other ranks seed one for each iteration apart,
        so no two ranks sample alike (nor a resumed rank like rank 0)."""
        if self.trainer.world_size > 1 and self.trainer.global_rank > 0:
            if self._sampler_step != (self.global_step, self.device):  # one generator an iteration
                seed = self.iteration_seed(seeds.SAMPLER_STREAM)
                self.sampler = torch.Generator(device=self.device).manual_seed(seed)
                self._sampler_step = (self.global_step, self.device)
            return self.sampler
        if self.sampler.device != self.device:
            self.sampler = torch.Generator(device=self.device).manual_seed(self.seed + self.global_step)
        return self.sampler

    # ----- evaluation ----------------------------------------------------------------------------
    def held_out_jobsets(self, num_jobsets: int, seed: int) -> JobSet:
        """The validation or test jobsets: `num_jobsets` of the workload, drawn from `seed`."""
        return make_jobsets(self.workload, num_jobsets, seed)

    @property
    def val_jobs(self) -> JobSet:
        """The fixed validation jobsets (the same on every rank and every call)."""
        if "val" not in self._held_out:
            self._held_out["val"] = self.held_out_jobsets(self.evaluation.val_jobsets, self.evaluation.val_seed)
        return self._held_out["val"]

    def validation_step(self, batch, batch_idx):
        self.last_eval = self.evaluate_and_log(self.val_jobs, "eval")

    def validation_metrics(self) -> set[str]:
        return {f"eval/{m}{ci}" for m in METRICS for ci in ("", "_ci95")} | {"eval/unfinished_jobs"}

    def test_step(self, batch, batch_idx):
        jobs = self.held_out_jobsets(self.evaluation.test_jobsets, self.evaluation.test_seed)
        self.evaluate_and_log(jobs, "test")

    def evaluate_and_log(self, jobs: JobSet, prefix: str) -> EvalResult:
        """SPEC's episode metrics of the policy on fixed jobsets (sampled with the seed val_seed, or
        greedy), logged as `<prefix>/<metric>` and `<prefix>/<metric>_ci95`."""
        generator = torch.Generator(device=self.device).manual_seed(self.evaluation.val_seed)
        policy = NetworkPolicy(self.net, Acting(greedy=self.evaluation.greedy), generator)
        result = evaluate(policy, self.cluster, jobs, device=self.device)
        s = result.summary
        values = {f"{prefix}/{m}": s[m] for m in METRICS}
        values.update({f"{prefix}/{m}_ci95": s[f"{m}_ci95"] for m in METRICS})
        values[f"{prefix}/unfinished_jobs"] = float(s["unfinished_jobs"])
        self.log_dict(values, on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
        self.log("eval_slowdown", s["mean_slowdown"], prog_bar=True, logger=False, on_epoch=True, batch_size=1)
        return result

    # ----- checkpoints: the policy alone, readable without this module ---------------------------
    def policy_record(self) -> PolicyRecord:
        """The policy as a checkpoint holds it: acting as it is evaluated."""
        return PolicyRecord.of(self.net, Acting(greedy=self.evaluation.greedy))

    def on_save_checkpoint(self, checkpoint):
        checkpoint[CHECKPOINT_KEY] = self.policy_record().to_dict()
        checkpoint["sampler_state"] = self.sampler.get_state()
        super().on_save_checkpoint(checkpoint)

    def on_load_checkpoint(self, checkpoint):
        if CHECKPOINT_KEY in checkpoint:
            PolicyRecord.from_dict(checkpoint[CHECKPOINT_KEY]).cluster.require_same_cluster(self.cluster, "checkpoint",
                                                                                              "run")
        if "sampler_state" in checkpoint and self.sampler.device.type == "cpu":
            self.sampler.set_state(checkpoint["sampler_state"])
