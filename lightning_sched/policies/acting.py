"""How a network acts on its logits: `Acting` (the argmax or a draw, and when it may leave capacity
idle on purpose) and `NetworkPolicy` (a network that acts so, as a rollout policy).

A checkpoint records its `Acting` (checkpoints.PolicyRecord); scripts override it with
`Acting.override` (evaluate.py's --greedy/--sample, --idle_rule, --wait_rate), and a selection
tries `acting_modes()` (select_checkpoint.py --acting all, adapt.py --acting select).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torch.distributions import Categorical
from torchrl.modules import MaskedCategorical, ProbabilisticActor

from ..batched import acts_on_any_batch
from ..config import ConfigError, is_finite
from ..deeprm.observations import arrival_rate

# When may a network void while a slot job fits now (capacity stays idle on purpose)?
# "always": the network decides. "while_arriving": on an idle cluster (nothing runs or is reserved)
# only while jobs of the jobset are still to arrive (holding a long job back for the short ones to
# come can pay at high load), not once none is left: then waiting changes nothing (no capacity
# frees, no job comes), and an argmax that picks it would pick it forever. "not_when_idle": never on
# an idle cluster (the argmax's first guard). "work_conserving": never while any slot job fits now,
# busy cluster or not; the network only chooses which job goes first (where waiting does not pay,
# as on a lightly loaded log, this removes its cost). "while_frequent": as "while_arriving" while
# jobs have been arriving at least `wait_rate` a step, and as "work_conserving" below that rate:
# the waits win where short jobs keep coming and cost where almost nothing arrives to wait for.
IDLE_RULES = ("always", "while_arriving", "not_when_idle", "work_conserving", "while_frequent")

# Names the rules had in files written before; read only when loading (Acting.from_dict) and by
# the scripts' --idle_rule flag. An old name is never given to another rule.
RENAMED_RULES = {"never": "not_when_idle"}

# "while_frequent"'s rate in jobs a step of DeepRM's workload (arrival_rate with its default
# damping): chosen on selection jobsets at loads 0.1 to 1.5 (docs/outputs/select_wait_rate.txt,
# docs/slot_policy.md "The shipped slowdown policy").
WAIT_RATE = 0.11


def rule_name(name: str) -> str:
    """An idle rule's name as the code spells it now (an old name mapped), refused when unknown."""
    name = RENAMED_RULES.get(name, name)
    if name not in IDLE_RULES:
        raise ConfigError(f"Acting.idle_rule must be one of {', '.join(IDLE_RULES)}, got {name!r}")
    return name


def sample_actions(logits: torch.Tensor, greedy: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """argmax, or a draw from softmax(logits) by inverting its CDF with one uniform a row (no host
    sync; an action of probability 0 is never drawn): LongTensor[B]."""
    if greedy:
        return logits.argmax(-1)
    cdf = torch.softmax(logits, -1).cumsum(-1)
    u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device, dtype=cdf.dtype, generator=generator) * cdf[..., -1:]
    return (cdf <= u).sum(-1).clamp(max=logits.shape[-1] - 1)


@dataclass(frozen=True)
class Acting:
    """How a network acts: its argmax (`greedy`) or a draw from its softmax, with void while a slot
    job fits now allowed where `idle_rule` says (IDLE_RULES; None: the mode's default,
    "not_when_idle" for the argmax, "always" for a draw) and, for "while_frequent", at or above
    `wait_rate` arrivals a step (> 0)."""

    greedy: bool = True
    idle_rule: str | None = None
    wait_rate: float = WAIT_RATE

    def __post_init__(self) -> None:
        if not isinstance(self.greedy, bool):
            raise ConfigError(f"Acting.greedy must be true or false, got {self.greedy!r}")
        if self.idle_rule is None:
            object.__setattr__(self, "idle_rule", "not_when_idle" if self.greedy else "always")
        if self.idle_rule not in IDLE_RULES:
            raise ConfigError(f"Acting.idle_rule must be one of {', '.join(IDLE_RULES)}, got {self.idle_rule!r}")
        if self.greedy and self.idle_rule == "always":
            raise ConfigError("Acting.idle_rule 'always' with greedy acting can wait forever on an idle cluster once "
                              "no job is left to arrive: use 'while_arriving' or 'not_when_idle'")
        if not is_finite(self.wait_rate) or self.wait_rate <= 0:
            raise ConfigError(f"Acting.wait_rate must be a finite number > 0 (jobs a step; 'while_arriving' waits at "
                              f"any rate), got {self.wait_rate!r}")

    def __str__(self) -> str:
        """"greedy, not_when_idle", "sampled, always", "greedy, while_frequent (wait_rate 0.11)", ..."""
        rate = f" (wait_rate {self.wait_rate:g})" if self.idle_rule == "while_frequent" else ""
        return f"{'greedy' if self.greedy else 'sampled'}, {self.idle_rule}{rate}"

    def override(self, greedy: bool | None = None, idle_rule: str | None = None,
                 wait_rate: float | None = None) -> Acting:
        """This acting with the given (not None) flags on top. A mode (`greedy`) given without a rule
        acts by that mode's default rule: the saved rule was chosen for the saved mode."""
        if greedy is None:
            greedy, idle_rule = self.greedy, self.idle_rule if idle_rule is None else idle_rule
        return Acting(greedy, idle_rule, self.wait_rate if wait_rate is None else wait_rate)

    def to_dict(self) -> dict:
        return {"greedy": self.greedy, "idle_rule": self.idle_rule, "wait_rate": self.wait_rate}

    @classmethod
    def from_dict(cls, saved: dict) -> Acting:
        """From `to_dict`'s form; a rule saved under its old name (RENAMED_RULES) acts as it did."""
        unknown = sorted(set(saved) - {"greedy", "idle_rule", "wait_rate"})
        if unknown:
            raise ConfigError(f"Acting has no field {unknown[0]!r} (fields: greedy, idle_rule, wait_rate)")
        rule = saved.get("idle_rule")
        return cls(saved.get("greedy", True), None if rule is None else rule_name(rule),
                   saved.get("wait_rate", WAIT_RATE))

    def mask(self, logits: torch.Tensor, obs) -> torch.Tensor:
        """`logits` [B, M+1] with void's set to -inf in the rows where a slot job fits now and the
        idle rule forbids leaving capacity idle there (reads only the keys its rule needs)."""
        if self.idle_rule == "always":
            return logits
        rule = self.idle_rule
        fits = (obs["slot_offset"] == 0).any(-1)
        if rule == "work_conserving":
            stuck = torch.ones_like(fits)
        else:
            stuck = obs["used"].sum((1, 2)) == 0  # idle: nothing runs or is reserved
            if rule != "not_when_idle":  # while_arriving, while_frequent: waits on an idle cluster while jobs come
                stuck = stuck & (obs["to_arrive"].view(-1) == 0)
            if rule == "while_frequent":
                stuck = stuck | (arrival_rate(obs) < self.wait_rate)
        stuck = fits & stuck
        return torch.cat([logits[:, :-1], logits[:, -1:].masked_fill(stuck.unsqueeze(1), float("-inf"))], -1)

    def choose(self, logits: torch.Tensor, obs, generator: torch.Generator | None = None) -> torch.Tensor:
        """The actions on `logits` [B, M+1], void masked as `mask` says: LongTensor[B]."""
        return sample_actions(self.mask(logits, obs), self.greedy, generator)


SAMPLED = Acting(greedy=False)  # a draw from the softmax, void whenever it is drawn: how training acts


def acting_modes(wait_rate: float = WAIT_RATE) -> tuple[Acting, ...]:
    """Every acting mode (the argmax with each rule but "always", a draw with each), "while_frequent"
    at `wait_rate`: the candidates when a mode is selected."""
    return tuple(Acting(greedy, rule, wait_rate) for greedy in (True, False) for rule in IDLE_RULES
                 if not (greedy and rule == "always"))


@dataclass
class NetworkPolicy:
    """A network as a rollout policy: obs -> obs with "action" (LongTensor[B]), acting as `acting`
    says; a draw uses `generator`."""

    net: nn.Module
    acting: Acting = field(default_factory=Acting)
    generator: torch.Generator | None = field(default=None, repr=False)

    @torch.no_grad()
    @acts_on_any_batch
    def __call__(self, td):  # named td: TorchRL's rollout passes TensorDicts to such a callable as they are
        try:
            inputs = self.net.encode(td)
        except KeyError as error:  # the evaluation's observations compute some keys on reading, so ask after
            said = re.match(r'key "([^"]+)" not found', str(error.args[0]))  # TensorDict's words; a dict's: the key
            key = said.group(1) if said else error.args[0]
            if key in NONE_LACKS:
                raise ConfigError(none_lacks([key])) from None
            raise
        td["action"] = self.acting.choose(self.net(inputs), td, self.generator)
        return td


# the observation keys a network's encode() may read (which of them depends on its kind and spec);
# observation "none" lacks "used" and "slot_waited": networks need "image" or "compact"
NETWORK_KEYS = ("used", "slot_duration", "slot_demand", "backlog", "since_new", "action_mask", "free_now",
                "slot_offset", "slot_waited", "slot_deadline", "time", "to_arrive", "arrived")
NONE_LACKS = ("used", "slot_waited")


def none_lacks(missing: list[str]) -> str:
    """The one-line refusal of a network handed an observation without `missing` (of NONE_LACKS)."""
    return (f"a cluster network reads the observation's {', '.join(missing)}: build the env with "
            "ClusterConfig(observation='image') or 'compact' (not 'none')")


class NetworkLogits(TensorDictModuleBase):
    """A network as a TorchRL module: an observation of any leading dims ([], [B] or a collector's
    [B, T]) -> "logits" [..., M+1], void masked where `acting`'s idle rule says."""

    def __init__(self, net: nn.Module, acting: Acting = SAMPLED):
        super().__init__()
        self.net, self.acting = net, acting
        self.in_keys, self.out_keys = list(NETWORK_KEYS), ["logits"]

    def forward(self, td):
        missing = [key for key in NONE_LACKS if key not in td.keys()]
        if missing:
            raise ConfigError(none_lacks(missing))
        flat = td.reshape(-1) if td.batch_dims else td.unsqueeze(0)  # the networks read rows [B, ...]
        logits = self.acting.mask(self.net(self.net.encode(flat)), flat)
        td["logits"] = logits.reshape(*td.batch_size, logits.shape[-1])
        return td


def make_actor(net: nn.Module, acting: Acting = SAMPLED) -> ProbabilisticActor:
    """The TorchRL actor of a cluster network (for TorchRL's collectors and objectives, e.g.
    ClipPPOLoss): "logits" -> "action" (int64) and "action_log_prob". It draws where TorchRL's
    exploration type is random (a collector's default, or `set_exploration_type(RANDOM)`) and takes
    the argmax elsewhere (`env.rollout`'s default); `acting`'s idle rule masks void (SAMPLED, the
    default: void whenever it is picked). A masked network's actions stay within "action_mask"
    (MaskedCategorical); an unmasked one's may be an invalid slot, which the env takes as void."""
    masked = getattr(getattr(net, "spec", None), "masked", False)
    return ProbabilisticActor(NetworkLogits(net, acting),
                              in_keys={"logits": "logits", "mask": "action_mask"} if masked else ["logits"],
                              out_keys=["action"], distribution_class=MaskedCategorical if masked else Categorical,
                              return_log_prob=True)
