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
from dataclasses import dataclass, replace

import torch

from ..config import ConfigError
from ..learning.adaptation import adaptation_step, make_optimizer
from ..learning.policy_gradient import sequence_advantages, std_scaled
from ..limits import require_total
from .env import QueueEnv, env_bytes, rollout_bytes
from .policy import QueuePolicySpec, choose


@dataclass
class QueueRollout:
    """T decisions of B episodes, rows b*E..b*E+E-1 replaying one sequence.

    job_features: FloatTensor[T, B, W, F]; cluster_features: FloatTensor[T, B, C]
    action_mask: BoolTensor[T, B, W]; reward: FloatTensor[T, B]
    action: LongTensor[T, B]  the job drawn from the policy's softmax (its log-probability is the loss's);
                              with a reservation (QueuePolicySpec.reserve) the ranking's first job, and
                              the env may have started a filler before it
    active: BoolTensor[T, B]  the row was not finished before decision t (its action counted)
    metrics: the episodes' metrics (QueueEnv.episode_metrics), DoubleTensor[B] each
    """

    job_features: torch.Tensor
    cluster_features: torch.Tensor
    action_mask: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    active: torch.Tensor
    metrics: dict


@torch.no_grad()
def rollout(env: QueueEnv, net, spec: QueuePolicySpec, generator: torch.Generator | None = None,
            greedy: bool = False, device: torch.device | str | None = None) -> QueueRollout:
    """Every row of `env` from its reset to its end with `net` (a QueueNetwork, its scorer or a
    functional copy of it) of policy `spec`, each decision by `choose` (drawn with `generator`, or
    greedy). `net` runs on `device` (None: where its weights are), and so does the returned
    trajectory; the metrics stay on the env's."""
    device = next(net.parameters()).device if device is None else torch.device(device)
    td = env.reset()
    steps = []
    while not bool(td["done"].all()):
        seen, action = choose(net, spec, td, device, greedy, generator)
        active = ~td["done"].squeeze(-1).to(device)
        steps.append((seen["job_features"], seen["cluster_features"], seen["action_mask"], action, active))
        td = env.step(td)["next"]
        steps[-1] += (td["reward"].squeeze(-1).to(device),)
    fields = [torch.stack(column) for column in zip(*steps)]
    return QueueRollout(*fields[:4], reward=fields[5], active=fields[4], metrics=env.episode_metrics())


def reinforce_loss(net, traj: QueueRollout, episodes: int) -> torch.Tensor:
    """DeepRM's REINFORCE loss of `net` on the decisions of `traj`: -mean over active decisions of
    log pi(a_t | s_t) x A_t, A_t the return from t minus its mean over the `episodes` episodes of the
    sequence (TimeIndexedBaseline), divided by the advantages' standard deviation (so one step size
    serves sites whose bounded slowdowns differ by orders of magnitude). A scalar tensor."""
    advantage, _ = sequence_advantages(traj.reward, traj.active, episodes)
    advantage = std_scaled(advantage, traj.active)[traj.active]
    active = traj.active
    logits = net(traj.job_features[active], traj.cluster_features[active], traj.action_mask[active])  # [D, W]
    log_prob = torch.log_softmax(logits, -1).gather(1, traj.action[active].unsqueeze(1)).squeeze(1)
    return -(log_prob * advantage.detach()).mean()


def site_env(log, cfg, sequences: int, episodes: int, positions: tuple[int, int], seed: int) -> QueueEnv:
    """The training env of one site: `sequences` fresh sequences a reset, drawn from `positions`, each
    played `episodes` times."""
    return QueueEnv(cfg, log, batch_size=[sequences * episodes], positions=positions, seed=seed,
                    episodes_per_sequence=episodes)


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
        seen.append(float(traj.metrics["mean_bounded_slowdown"].mean()))
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
                curve[step] = rollout(test_env, net, net.spec, greedy=True).metrics["mean_bounded_slowdown"]

    measure(0)
    adapt(net.scorer, net.spec, train_env, steps, lr, episodes, torch.Generator().manual_seed(seed), optimizer,
          after_step=measure, step_sizes=step_sizes)
    return curve, net
