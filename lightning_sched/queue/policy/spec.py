"""`QueuePolicySpec`: the sizes and inputs of a queue policy network, as a config and a checkpoint give them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ...config import ConfigError, is_int, is_number
from ..config import distinct_rules, row_features


@dataclass
class QueuePolicySpec:
    """The queue policy's sizes (`QueueNetwork`)."""

    hidden: tuple[int, ...] = (32, 16, 8)
    """The job scorer's hidden widths, ReLU. RLScheduler's kernel network: 32, 16, 8."""
    embedding: int = 32
    """Width of the value head's per-job embedding (pooled by mean and max over the window)."""
    value_hidden: tuple[int, ...] = (32, 16)
    """The value head's hidden widths after pooling, ReLU."""
    job_area: bool = False
    """Add a fifth job input, log requested time x processor share: the job's area on a log time
    scale, by which F1-like rules rank (a product that an MLP of RLScheduler's size fits poorly)."""
    context: bool = False
    """Give the scorer the window's make-up: a per-job embedding (width `embedding`) pooled by mean
    and max over the visible jobs enters every job's score beside the cluster features, so that one
    job's score can depend on what else waits (a rule's ranking cannot)."""

    rule_ranks: tuple[str, ...] = ()
    """Rules of the queue's RULES (queue.config) whose ranking of the window each job's inputs also carry (the
    env's `QueueConfig.rule_ranks`, set to these): the scorer can follow a rule, or weigh several
    by the queue it sees (with `context`, by the window's make-up)."""

    fit_delay: bool = False
    """Each job's inputs also carry how long until it would fit (the env's `QueueConfig.fit_delay`)."""
    clock: bool = False
    """The row's inputs also carry the time of day (the env's `QueueConfig.clock`): a departure from
    the prior can depend on where the daily cycle of arrivals stands."""

    prior: str | None = None
    """A rule of `rule_ranks` whose ranking the scores start from (residual policy learning, Silver
    et al. 2018): logit = scorer output - prior_scale x the job's rank feature under the rule, with
    the scorer's last layer zero at the start, so an untrained network plays the rule (sampling
    near it); training learns where to depart from it."""
    prior_mix: bool = False
    """Make the prior a weighted sum of the rank features of every rule of `rule_ranks`, with learned
    weights (`JobScorer.prior_weights`, [R]) that start at 1 on `prior` and 0 on the others: the
    untrained scorer still plays `prior`, and a few gradient steps on R numbers can move the ranking
    toward another rule (a site's adaptation: F1's order on one site, WFP3's aging on another)."""
    prior_scale: float = 20.0
    """The prior's weight on the rank feature log1p(rank) / log1p(window): with a window of 1024,
    20 gives the rule's first pick about 0.8 of the probability."""
    reserve: bool = False
    """Play the ranking with its own reservation (queue.reservation, backfilling off): the sampled
    (or greedy) job is the ranking's first; when it does not fit, a job that ends before its
    reservation starts instead. Needs `fit_delay`."""
    ensemble: int = 1
    """How many scorers of this spec, trained apart (one run each), act together: the logits are their
    mean, so with a shared `prior` the prior plus the mean of the learned residuals (departures the
    members agree on stay, one member's own fade). Built from trained checkpoints by
    scripts/ensemble.py (`ensemble_record`)."""

    def __post_init__(self) -> None:
        self.hidden, self.value_hidden = tuple(self.hidden), tuple(self.value_hidden)
        self.rule_ranks = distinct_rules("QueuePolicySpec.rule_ranks", self.rule_ranks)
        for name in ("hidden", "value_hidden"):
            widths = getattr(self, name)
            if not widths or any(not is_int(h, 1) for h in widths):
                raise ConfigError(f"QueuePolicySpec.{name} must be one or more integers >= 1, got {widths!r}")
        for name in ("job_area", "context", "fit_delay", "clock", "prior_mix"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"QueuePolicySpec.{name} must be true or false, got {getattr(self, name)!r}")
        if not is_int(self.embedding, 1):
            raise ConfigError(f"QueuePolicySpec.embedding must be an integer >= 1, got {self.embedding!r}")
        if self.prior is not None and self.prior not in self.rule_ranks:
            ranks = ", ".join(self.rule_ranks) or "none"
            raise ConfigError(f"QueuePolicySpec.prior must be one of rule_ranks ({ranks}), got {self.prior!r}")
        if self.prior_mix and self.prior is None:
            raise ConfigError("QueuePolicySpec.prior_mix needs a prior (the rule its weights start on)")
        if not is_number(self.prior_scale) or not self.prior_scale > 0:
            raise ConfigError(f"QueuePolicySpec.prior_scale must be a number > 0, got {self.prior_scale!r}")
        if not isinstance(self.reserve, bool):
            raise ConfigError(f"QueuePolicySpec.reserve must be true or false, got {self.reserve!r}")
        if self.reserve and not self.fit_delay:
            raise ConfigError("QueuePolicySpec.reserve needs fit_delay: true (the reservation reads each job's "
                              "fit delay)")
        if not is_int(self.ensemble, 1):
            raise ConfigError(f"QueuePolicySpec.ensemble must be an integer >= 1, got {self.ensemble!r}")

    def observation(self) -> dict:
        """The QueueConfig fields of the extra features this network reads."""
        return {"rule_ranks": self.rule_ranks, "fit_delay": self.fit_delay, "clock": self.clock}

    @property
    def cluster_inputs(self) -> int:
        """Row inputs: the cluster features, and the time of day with `clock` (config.row_features)."""
        return row_features(self.clock)

    @property
    def extra_inputs(self) -> int:
        """Job inputs after the four features."""
        return len(self.rule_ranks) + int(self.fit_delay)

    def to_dict(self) -> dict:
        """Plain lists and ints: readable by torch.load(weights_only=True)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> QueuePolicySpec:
        if not isinstance(values, dict):
            raise ConfigError(f"QueuePolicySpec: expected a mapping of its fields, got {type(values).__name__}")
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"QueuePolicySpec: unknown field(s) {', '.join(unknown)}")
        return cls(**values)
