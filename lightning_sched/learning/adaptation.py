"""Fine-tuning a trained policy on a new workload in a few REINFORCE steps (what `scripts/adapt.py`
and the adaptation curves run). Each step is the MAML inner step done for real: roll out N x E
episodes of the workload, DeepRM's time-indexed baseline, one optimizer step."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import seeds
from ..config import ClusterConfig, ConfigError
from ..deeprm.rollout import collect
from ..evaluation import EvalResult, evaluate, make_jobsets
from ..jobs import JobSet
from ..policies.acting import SAMPLED, Acting, NetworkPolicy
from .baselines import Baseline, make_baseline
from .finite import require_finite
from .policy_gradient import policy_gradient


def scale_gradients(net: torch.nn.Module, step_sizes: dict[str, torch.Tensor] | None) -> None:
    """Meta-SGD (Li et al., 2017) before a plain SGD step: multiply each weight's gradient by its
    learned step size, `step_sizes` {parameter name of `net`: tensor of its shape}; None: no-op."""
    if step_sizes is None:
        return
    for name, p in net.named_parameters():
        if name not in step_sizes:
            raise ConfigError(f"adaptation step_sizes has no entry for the network's {name!r}")
        if step_sizes[name].shape != p.shape:
            raise ConfigError(f"adaptation step_sizes[{name!r}] has shape {tuple(step_sizes[name].shape)}, "
                              f"the network's {tuple(p.shape)}")
        if p.grad is not None:  # a weight the loss does not reach has no gradient to scale
            p.grad.mul_(step_sizes[name].to(p.device))


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """An adaptation step's optimizer: "sgd" (MAML's inner step), "adam", or "rmsprop" (DeepRM's
    training optimizer, with its alpha 0.9 and eps 1e-9)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=0.9, eps=1e-9)
    raise ConfigError(f"adaptation optimizer must be sgd, adam or rmsprop, got {name!r}")


def adaptation_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, step: int,
                    step_sizes: dict[str, torch.Tensor] | None = None) -> None:
    """One adaptation step of `net` on `loss`: its gradient (scaled per weight by Meta-SGD's
    `step_sizes`), then the optimizer's step; a non-finite gradient or weight is refused, naming `step`."""
    optimizer.zero_grad()
    loss.backward()
    scale_gradients(net, step_sizes)
    require_finite(net, f"at adaptation step {step}", gradients=True)
    optimizer.step()
    require_finite(net, f"after adaptation step {step}")


def meta_sgd_callback(step_sizes) -> Callable[[list], list] | None:
    """Meta-SGD inside a differentiable inner step (higher's `grad_callback`): each gradient times
    its weight's learned step size, out of place, so the meta-gradient reaches the step sizes.
    `step_sizes`: tensors in the network's parameter order (a sequence, or a dict by name); None: no
    scaling."""
    if step_sizes is None:
        return None
    sizes = list(step_sizes.values()) if isinstance(step_sizes, dict) else list(step_sizes)
    return lambda grads: [None if g is None else g * a for g, a in zip(grads, sizes, strict=True)]


@dataclass
class AdaptationSettings:
    """How to adapt: the defaults of a meta-policy come from its checkpoint (its inner loop)."""

    steps: int = 5
    jobsets: int = 20
    episodes: int = 20
    lr: float = 0.05
    optimizer: str = "sgd"  # sgd (MAML's inner step), adam, rmsprop (DeepRM's)
    normalize_advantage: bool = True
    # Meta-SGD (Li et al., 2017): a learned step size per weight, multiplying lr; {parameter name:
    # tensor of its shape}. Only with sgd (Adam and RMSprop divide any gradient scale away).
    step_sizes: dict[str, torch.Tensor] | None = field(default=None, repr=False, compare=False)
    baseline: str = "TimeIndexedBaseline"  # learning.baselines.BASELINES: the inner loop's, in a meta-policy's record

    def __post_init__(self) -> None:
        for name in ("jobsets", "episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"adaptation {name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise ConfigError(f"adaptation steps must be >= 0, got {self.steps}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"adaptation lr must be a finite number > 0, got {self.lr}")
        if self.optimizer not in ("sgd", "adam", "rmsprop"):
            raise ConfigError(f"adaptation optimizer {self.optimizer!r} is unknown; choose sgd, adam or rmsprop")
        make_baseline(self.baseline)  # a name adapt() can rebuild (a meta-policy's record keeps only the name)
        if self.steps and self.episodes == 1 and self.baseline == "TimeIndexedBaseline":
            raise ConfigError("adaptation episodes 1 with TimeIndexedBaseline: a decision's baseline is then its "
                              "own return (the mean over the jobset's one episode), so every advantage is 0 and no "
                              "step moves the policy; give episodes >= 2")
        if self.step_sizes is not None and self.optimizer != "sgd":
            raise ConfigError(f"adaptation step_sizes (learned per weight) need optimizer 'sgd', "
                              f"got {self.optimizer!r}")

    @classmethod
    def from_checkpoint(cls, adaptation: dict | None, steps: int, **overrides) -> "AdaptationSettings":
        """The inner loop a checkpoint's policy was meta-trained with (`adaptation`: its record's,
        checkpoints.PolicyRecord: optimizer, lr, jobsets, episodes, learned step sizes), with the
        `overrides` that are not None on top; a checkpoint without an inner loop gets this class's
        defaults. Learned step sizes are dropped when the optimizer is not SGD (they scale an SGD
        step only)."""
        inner = {k: v for k, v in (adaptation or {}).items() if k != "steps"}
        inner.update({k: v for k, v in overrides.items() if v is not None})
        if inner.get("optimizer", cls.optimizer) != "sgd":
            inner.pop("step_sizes", None)
        return cls(steps=steps, **inner)

    def describe(self) -> dict:
        """The settings as plain values (step sizes summarised by their geometric mean per tensor)."""
        out = {k: v for k, v in vars(self).items() if k != "step_sizes"}
        if self.step_sizes is not None:
            out["step_sizes_geometric_mean"] = {name: float(s.abs().log().mean().exp())
                                                for name, s in self.step_sizes.items()}
        return out

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        return make_optimizer(self.optimizer, params, self.lr)


def adapt(net: torch.nn.Module, cfg: ClusterConfig, workload, settings: AdaptationSettings, eval_jobs: JobSet,
          seed: int = 0, device="cpu", baseline: Baseline | None = None, acting: Acting = SAMPLED,
          report: Callable[[int, dict, EvalResult], None] | None = None,
          eval_steps: set[int] | None = None) -> list[dict]:
    """Adapt `net` in place for `settings.steps` steps on `workload`; after step 0 (before any update) and each step,
    evaluate it on `eval_jobs`, acting as `acting` says (draws with a fixed seed).
    Returns the evaluation summaries, one per step, each with the step's training figures; `report(step, summary,
    result)` sees each as it comes, with its EvalResult (per-jobset values, to pair with another policy's).
    `eval_steps`: evaluate only after these steps (default: all; the last step always)."""
    baseline = baseline or make_baseline(settings.baseline)
    optimizer = settings.make_optimizer(net.parameters())
    generator = torch.Generator(device=device).manual_seed(seed)
    summaries = []

    def measure(step: int, extra: dict) -> None:
        if eval_steps is not None and step not in eval_steps and step != settings.steps:
            return
        policy = NetworkPolicy(net, acting, torch.Generator(device=device).manual_seed(seed))
        result = evaluate(policy, cfg, eval_jobs, device=device)
        summary = {"step": step, **result.summary, **extra}
        summaries.append(summary)
        if report is not None:
            report(step, summary, result)

    measure(0, {})
    for step in range(1, settings.steps + 1):
        jobs = make_jobsets(workload, settings.jobsets, seeds.adaptation(seed, step)).to(device)
        traj = collect(net, cfg, jobs.repeat_interleave(settings.episodes), generator=generator)
        pg = policy_gradient(net, traj, baseline, settings.episodes, normalize_advantage=settings.normalize_advantage)
        adaptation_step(net, optimizer, pg.loss, step, settings.step_sizes)
        measure(step, {"train_mean_return": float(pg.mean_return), "train_decisions": pg.decisions})
    return summaries
