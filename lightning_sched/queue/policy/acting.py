"""How a queue network acts: TorchRL's actor and critic over it (for PPO), and greedy or sampled
decisions with the reservation applied (`choose`, `QueuePolicy`)."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator

from ...batched import acts_on_any_batch
from ..reservation import reserve_pick
from .networks import QueueNetwork
from .spec import QueuePolicySpec

IN_KEYS = ("job_features", "cluster_features")


def make_actor(net: QueueNetwork) -> ProbabilisticActor:
    """The TorchRL actor: job_features, cluster_features, action_mask -> "logits" -> MaskedCategorical over the
    slots allowed by "action_mask" -> "action" (int64 [B]) and "action_log_prob". A finished row's
    mask allows slot 0 (the env sets it, and ignores the action), so the distribution stays defined."""
    scores = TensorDictModule(net.scorer, in_keys=[*IN_KEYS, "action_mask"], out_keys=["logits"])
    return ProbabilisticActor(scores, in_keys={"logits": "logits", "mask": "action_mask"}, out_keys=["action"],
                              distribution_class=MaskedCategorical, return_log_prob=True)


class DenseValue(nn.Module):
    """`QueueValue` pooling every slot of the window (`pooled_window`'s `dense`): the same values,
    and it runs under torch.vmap."""

    def __init__(self, value: nn.Module):
        super().__init__()
        self.value = value

    def forward(self, job_features, cluster_features, action_mask) -> torch.Tensor:
        return self.value(job_features, cluster_features, action_mask, dense=True)


def make_critic(net: QueueNetwork, dense: bool = True) -> ValueOperator:
    """The TorchRL critic: job_features, cluster_features, action_mask -> "state_value" [B, 1].
    `dense` (the default) computes every slot of the window, so that TorchRL's value estimators
    (GAE, and ClipPPOLoss's own), which run the critic under torch.vmap, take it; a trainer that
    computes the values itself (tasks/queue_ppo.py) passes False to compute only the visible jobs."""
    return ValueOperator(DenseValue(net.value) if dense else net.value, in_keys=[*IN_KEYS, "action_mask"])


def reserved_action(spec: QueuePolicySpec, logits: torch.Tensor, first: torch.Tensor, td) -> torch.Tensor:
    """The slot the env starts, LongTensor[B]: `first` (the job picked from `logits` [B, W]), or with
    `spec.reserve` the reservation's pick (queue.reservation.reserve_pick) for the ranking that puts
    `first` ahead and the rest in the order of their logits."""
    if not spec.reserve:
        return first
    score = torch.where(td["action_mask"], -logits.double(), torch.inf)
    score = score.scatter(1, first.unsqueeze(1), -torch.inf)
    return reserve_pick(score, td, len(spec.rule_ranks))


def network_inputs(td: TensorDictBase, device) -> TensorDictBase:
    """What a queue network reads of the env's TensorDict `td`, on `device` (the network's, which
    may not be the env's: the [B, L] sequences and the state stay behind)."""
    return td.select(*IN_KEYS, "action_mask").to(device)


def network_logits(net, td: TensorDictBase, device) -> tuple[TensorDictBase, torch.Tensor]:
    """(what `net` read of the env's `td`, on `device`; its masked logits [B, W] there)."""
    seen = network_inputs(td, device)
    return seen, net(seen["job_features"], seen["cluster_features"], seen["action_mask"])


def log_prob(net, td: TensorDictBase) -> torch.Tensor:
    """log pi(first | s) of `net` (a scorer or a functional copy of it) at the decisions `td` [D]
    (job_features, cluster_features, action_mask; "first", the jobs drawn): FloatTensor[D]."""
    # by hand: make_actor(...).get_dist(td).log_prob runs on a functional copy too, but its renormalised
    # logits differ in the last bits (about 1e-7), which would move every MAML and adaptation run
    logits = net(td["job_features"], td["cluster_features"], td["action_mask"])  # [D, W]
    return torch.log_softmax(logits, -1).gather(1, td["first"].unsqueeze(1)).squeeze(1)


@torch.no_grad()
def choose(net, spec: QueuePolicySpec, td: TensorDictBase, device, greedy: bool = True,
           generator: torch.Generator | None = None) -> tuple[TensorDictBase, torch.Tensor]:
    """One decision of `net` (a QueueNetwork, its scorer or a functional copy of it, of policy `spec`)
    running on `device` for every row of the env's `td`: the job it picks first, the argmax of the
    masked logits (greedy) or a draw from their softmax with `generator` (on the generator's device);
    writes td["action"], that job played with the reservation when `spec.reserve` (`reserved_action`,
    on the env's device). Returns (what the network read, on `device`; the first picks, LongTensor[B]
    on `device`). A finished row's mask allows slot 0 only (the env ignores its action)."""
    seen, logits = network_logits(net, td, device)
    if greedy:
        first = logits.argmax(-1)
    else:
        probs = torch.softmax(logits, -1)
        draw_on = probs.device if generator is None else generator.device
        first = torch.multinomial(probs.to(draw_on), 1, generator=generator).squeeze(-1).to(device)
    env_device = td["action_mask"].device
    td["action"] = reserved_action(spec, logits.to(env_device), first.to(env_device), td)
    return seen, first


class QueuePolicy:
    """A network as a policy of the queue env: td -> td with "action" (`choose`, the network on its
    own device): greedy, for evaluation, or sampled with `generator`."""

    def __init__(self, net: QueueNetwork, greedy: bool = True, generator: torch.Generator | None = None):
        self.net, self.greedy, self.generator = net, greedy, generator

    @acts_on_any_batch
    def __call__(self, td):
        choose(self.net, self.net.spec, td, next(self.net.parameters()).device, self.greedy, self.generator)
        return td

    @torch.no_grad()
    def ranking(self, td) -> torch.Tensor:
        """Minus the network's logits of the window's slots, DoubleTensor[B, W] on the env's device,
        lower first (empty slots inf): the order of its greedy picks."""
        _, logits = network_logits(self.net, td, next(self.net.parameters()).device)
        return torch.where(td["action_mask"], -logits.double().to(td["action_mask"].device), torch.inf)
