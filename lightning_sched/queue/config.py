"""`QueueConfig`: the static description of a job-level batch queue (docs/hpc_queue.md).

The queue environment replays a log job by job in seconds, as RLScheduler (Zhang et al., SC'20) does:
processors only, the whole waiting queue, a visible window of it, and backfilling off or EASY.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..config import ConfigError, is_finite, is_int

BACKFILL = ("off", "easy")
REWARDS = ("per_job", "final")
# nodes, processors per node, window and sequence length: the kernel keeps slots and orders as int32
MAX_COUNT = (1 << 31) - 1
# the priority rules of queue.heuristics that a "best heuristic" is chosen among and whose window
# ranks an observation can carry (the buggy reproductions of RLScheduler's cells are not scheduling rules)
RULES = ("fcfs", "sjf", "f1", "wfp3", "unicep")
# the observation's [B, L] sequences (job_submit, ...): the rules read them, a network only the window's features
SEQUENCE_KEYS = ("job_submit", "job_requested", "job_processors")
JOB_FEATURES = 4  # a window slot's own features: wait, requested time, processor share, fits now
CLUSTER_FEATURES = 2  # a row's features: free node share, log queue length
# the queue-length feature log1p(q) / log1p(QUEUE_WINDOWS x window) reaches 1 at this many windows of jobs
QUEUE_WINDOWS = 4
CLOCK_FEATURES = 2  # with QueueConfig.clock: sin and cos of the time of day
# a span of seconds as a feature, log1p(seconds / MINUTE) / LOG_SPAN: 10 s .. weeks over 0.02 .. 1.2 (the fit
# delay, step.span_feature; the networks' view of wait and requested time, policy.networks.job_inputs)
MINUTE = 60.0
LOG_SPAN = 8.0
DAY = 86400  # seconds: the clock's period, and the daily forecast's shift


def row_features(clock: bool) -> int:
    """Features a row carries (cluster_features [B, this]): the cluster's, and the time of day's with `clock`."""
    return CLUSTER_FEATURES + CLOCK_FEATURES * int(clock)


def distinct_rules(field: str, rules) -> tuple[str, ...]:
    """`rules` as a tuple (YAML and JSON give lists); ConfigError naming `field` unless they are
    distinct names of RULES."""
    rules = tuple(rules)
    if any(r not in RULES for r in rules) or len(set(rules)) != len(rules):
        raise ConfigError(f"{field} must be distinct rules of {', '.join(RULES)}, got {list(rules)!r}")
    return rules


@dataclass(frozen=True)
class QueueConfig:
    """One queue: the cluster, what the policy sees and how an episode is scored."""

    nodes: int = 256
    """Nodes of the cluster. Lublin logs: 256 (SWF header MaxNodes)."""
    processors_per_node: int = 1
    """Processors of one node (MaxProcs / MaxNodes); a job takes ceil(processors / this) nodes."""
    window: int = 128
    """Waiting jobs the policy sees and may pick (RLScheduler's MAX_QUEUE_SIZE: 128); more wait beyond."""
    backfill: str = "off"
    """'off': a picked job that does not fit is held and nothing else starts; 'easy': EASY backfilling."""
    sequence_length: int = 256
    """Jobs of one episode (consecutive jobs of the log). RLScheduler: 256 to train, 1024 to evaluate."""
    bsld_threshold: float = 10.0
    """Seconds: bounded slowdown is max(1, (wait + run) / max(run, this)). The field's default: 10."""
    reward: str = "per_job"
    """'per_job': each step pays -(bounded slowdowns of the jobs it started) / sequence_length (the
    episode's return is minus its mean bounded slowdown); 'final': all of it at the last step
    (RLScheduler's reward)."""
    max_wait: float = 43200.0
    """Seconds: the wait feature's scale (RLScheduler's MAX_WAIT_TIME, 12 hours)."""
    max_requested: float = 43200.0
    """Seconds: the requested-time feature's scale (12 hours; not clipped)."""
    rule_ranks: tuple[str, ...] = ()
    """Priority rules (of RULES) whose ranking of the visible jobs each slot's features also
    carry, one column a rule after the four (job_features [B, W, 4 + R]): a job's place in each
    rule's order, which a policy can weigh by what it sees (F1 needs absolute submit times and
    processor counts, which the four features do not hold)."""
    fit_delay: bool = False
    """Each slot's features also carry, after the ranks, how long until the job would fit if nothing
    else started: the first requested end of a running job at which enough nodes are free, as
    log1p(seconds / MINUTE) / LOG_SPAN (0: it fits now). The four features show free nodes, not when they free."""
    clock: bool = False
    """The row's features also carry the time of day, sin and cos of 2 pi (now mod 86400) / 86400
    (cluster_features [B, 4]): arrivals follow a daily cycle (the Lublin model's logs: about 10x more an
    hour at noon than at 4 am), which the queue alone does not show. The log's time 0 is taken as
    midnight, as in the Lublin logs and in NASA iPSC/860's (its header: 00:00:03 local)."""

    def __post_init__(self) -> None:
        for name in ("nodes", "processors_per_node", "window", "sequence_length"):
            value = getattr(self, name)
            if not is_int(value, 1):
                raise ConfigError(f"QueueConfig.{name} must be an integer >= 1, got {value!r}")
            if value > MAX_COUNT:
                raise ConfigError(f"QueueConfig.{name} must be at most {MAX_COUNT} (2**31 - 1), got {value}")
        if self.backfill not in BACKFILL:
            raise ConfigError(f"QueueConfig.backfill must be one of {', '.join(BACKFILL)}, got {self.backfill!r}")
        if self.reward not in REWARDS:
            raise ConfigError(f"QueueConfig.reward must be one of {', '.join(REWARDS)}, got {self.reward!r}")
        object.__setattr__(self, "rule_ranks", distinct_rules("QueueConfig.rule_ranks", self.rule_ranks))
        for name in ("fit_delay", "clock"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"QueueConfig.{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("bsld_threshold", "max_wait", "max_requested"):
            value = getattr(self, name)
            if not is_finite(value) or value <= 0:
                raise ConfigError(f"QueueConfig.{name} must be a finite number > 0, got {value!r}")

    @property
    def job_features(self) -> int:
        """Features a window slot carries (job_features [B, W, this]): the 4 of JOB_FEATURES, then one a
        ranked rule (rule_ranks), then one for the fit delay."""
        return JOB_FEATURES + len(self.rule_ranks) + int(self.fit_delay)

    @property
    def cluster_features(self) -> int:
        """Features a row carries (`row_features`)."""
        return row_features(self.clock)

    @property
    def processors(self) -> int:
        return self.nodes * self.processors_per_node

    def to_dict(self) -> dict:
        """Plain values; rule_ranks as a list. The extra job features are left out when unused, so that a
        config without them equals a record that lacks these keys."""
        values = asdict(self)
        ranks, delay, clock = values.pop("rule_ranks"), values.pop("fit_delay"), values.pop("clock")
        return {**values, **({"rule_ranks": list(ranks)} if ranks else {}), **({"fit_delay": True} if delay else {}),
                **({"clock": True} if clock else {})}

    @classmethod
    def from_dict(cls, values: dict) -> QueueConfig:
        if not isinstance(values, dict):
            raise ConfigError(f"QueueConfig: expected a mapping of its fields, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"QueueConfig: unknown field(s) {', '.join(unknown)}")
        return cls(**values)
