"""`ClusterConfig`: the static description of one cluster and its reward (../SPEC.md)."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, fields

OBJECTIVES = ("slowdown", "completion_time", "makespan", "utilization", "deadline")
# Fields that change only the reward, not the jobs or the dynamics: a policy trained with one value
# may start a run with another, and one evaluation table may hold policies trained for either.
REWARD_FIELDS = ("objective", "tardiness_weight")
# the integer fields that fix the cluster's size (and a DeepRM image network's input width)
SIZE_FIELDS = ("num_resources", "resource_units", "horizon", "num_slots", "backlog_size", "max_job_len",
               "max_job_units", "max_time", "max_track_since_new")
OBSERVATIONS = ("image", "compact", "none")
# a checkpoint's entry holding a policy readable without the training code, and what kind it is: a
# cluster policy (policies.checkpoints), a queue network (queue.policy) or a linear queue rule
CHECKPOINT_KEY = "lightning_sched"
QUEUE_POLICY_KIND = "queue"
QUEUE_RULE_KIND = "queue_linear_rule"
# DeepRM's image grows with units x slots x job units x horizon; past about a megabyte an episode
# (2**18 float cells) it is no longer an input any network can use, only memory traffic
MAX_IMAGE_CELLS = 1 << 18
# sizes and times past this would meet the state's "never" (deeprm.state.NEVER, 2**40), and int64 math
MAX_SIZE = (1 << 40) - 1


def is_int(value, low: int | None = None) -> bool:
    """`value` is an integer, `low` or more when given (not a bool: True is an int to Python, never a
    count or a size here)."""
    return not isinstance(value, bool) and isinstance(value, int) and (low is None or value >= low)


def is_number(value) -> bool:
    """`value` is an int or a float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float))


def is_finite(value) -> bool:
    """`value` is a finite int or float, not a bool (an int of any size: math.isfinite overflows on one
    past a float's range)."""
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


class ConfigError(ValueError):
    """A configuration or jobset outside the ranges SPEC.md allows; the message names the field.

    The latest messages are kept (`recent`): jsonargparse passes on the errors of a union's classes
    as text only, and fit.py tells a refusal of ours from a crash by its message."""

    recent: deque = deque(maxlen=64)

    def __init__(self, *args):
        super().__init__(*args)
        ConfigError.recent.append(str(self))


@dataclass(frozen=True)
class ClusterConfig:
    """A DeepRM cluster: d resources of U units, a look-ahead of T steps, M job slots, a backlog.

    Defaults are DeepRM's (Mao et al., HotNets 2016, section 5 and its code's parameters.py).
    """

    num_resources: int = 2
    """d: resource types (CPU, memory). DeepRM: 2."""
    resource_units: int = 10
    """U: units of each resource in the cluster. DeepRM: 10."""
    horizon: int = 20
    """T: time steps of occupancy the state shows ahead. DeepRM: 20."""
    num_slots: int = 10
    """M: waiting jobs visible (and schedulable) at once. DeepRM: 10."""
    backlog_size: int = 60
    """Waiting jobs beyond the slots that the image counts (the backlog itself is unbounded). DeepRM: 60."""
    max_job_len: int = 15
    """Longest job duration in steps (<= horizon). DeepRM: 15."""
    max_job_units: int = 10
    """Largest demand of one job on one resource (<= resource_units). DeepRM: 10."""
    max_time: int = 1000
    """Time step at which an unfinished episode is truncated."""
    max_track_since_new: int = 10
    """Cap of the 'steps since the last arrival' column. DeepRM: 10."""
    objective: str = "slowdown"
    """Reward: one of slowdown, completion_time, makespan, utilization, deadline (SPEC table)."""
    tardiness_weight: float = 0.0
    """Beyond SPEC: each step a job spends in the system past its deadline also costs this much, so
    the return of a terminated episode falls by this times the total tardiness sum_j max(0, f_j -
    deadline_j) (a truncated one charges unfinished jobs up to the final time). SPEC's
    deadline reward stops counting a job once it is late, and policies learn to leave late jobs
    until max_time; a small weight makes finishing them pay. 0 (the default) is SPEC's reward."""
    slo_slowdown: float = 2.0
    """Default deadline a_j + floor(slo_slowdown * d_j) when a jobset gives none (>= 1)."""
    observation: str = "image"
    """'image' (DeepRM's), 'compact' (DeepRM's compact vector) or 'none' (structured keys only)."""

    def __post_init__(self) -> None:
        for f in SIZE_FIELDS:
            value = getattr(self, f)
            if not is_int(value, 1):
                raise ConfigError(f"ClusterConfig.{f} must be an integer >= 1, got {value!r}")
            if value > MAX_SIZE:
                raise ConfigError(f"ClusterConfig.{f} must be at most {MAX_SIZE} (2**40 - 1), got {value}")
        if self.max_job_len > self.horizon:
            raise ConfigError(f"ClusterConfig.max_job_len={self.max_job_len} exceeds horizon={self.horizon}")
        if self.max_job_units > self.resource_units:
            raise ConfigError(f"ClusterConfig.max_job_units={self.max_job_units} "
                              f"exceeds resource_units={self.resource_units}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"ClusterConfig.objective={self.objective!r} is unknown; choose one of {OBJECTIVES}")
        if self.observation not in OBSERVATIONS:
            raise ConfigError(f"ClusterConfig.observation={self.observation!r} is unknown; "
                              f"choose one of {OBSERVATIONS}")
        if self.observation == "image" and self.horizon * self.image_width > MAX_IMAGE_CELLS:
            raise ConfigError(f"ClusterConfig.observation='image' would render {self.horizon} x {self.image_width} "
                              f"cells an episode (resource_units={self.resource_units}, num_slots={self.num_slots}, "
                              f"max_job_units={self.max_job_units}, horizon={self.horizon}), more than "
                              f"{MAX_IMAGE_CELLS}; use observation='none' (structured keys) or 'compact'")
        if not is_finite(self.tardiness_weight) or self.tardiness_weight < 0:
            raise ConfigError(f"ClusterConfig.tardiness_weight must be a finite number >= 0, "
                              f"got {self.tardiness_weight!r}")
        if not is_finite(self.slo_slowdown) or self.slo_slowdown < 1:
            raise ConfigError(f"ClusterConfig.slo_slowdown must be a finite number >= 1, got {self.slo_slowdown!r}")

    # ----- derived sizes (SPEC "Observation") ---------------------------------------------
    @property
    def backlog_width(self) -> int:
        return math.ceil(self.backlog_size / self.horizon)

    @property
    def image_width(self) -> int:
        """W = R*(U + M*MU) + backlog_width + 1."""
        r, u, m, mu = self.num_resources, self.resource_units, self.num_slots, self.max_job_units
        return r * (u + m * mu) + self.backlog_width + 1

    @property
    def compact_size(self) -> int:
        """Free units per (time row, resource), (duration, demands) per slot, backlog, since-new."""
        return self.horizon * self.num_resources + self.num_slots * (1 + self.num_resources) + 2

    @property
    def num_actions(self) -> int:
        """M slots plus void."""
        return self.num_slots + 1

    def to_dict(self) -> dict:
        return asdict(self)

    def differences(self, other: "ClusterConfig", ignore: tuple[str, ...] = ()) -> dict:
        """{field: (self's value, other's value)} for every field that differs, except `ignore`."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
                if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)}

    def require_same_cluster(self, other: "ClusterConfig", mine: str, theirs: str,
                             may_differ: tuple[str, ...] = ()) -> None:
        """Raise ConfigError naming every field that differs between two clusters a policy must share
        (the observation mode does not matter: policies read the structured state). `may_differ`
        names more fields to ignore, e.g. the objective when only the reward changes."""
        ignore = ("observation", *may_differ)
        differs = self.differences(other, ignore=ignore)
        if differs:
            raise ConfigError(f"the {mine}'s ClusterConfig differs from the {theirs}'s in "
                              + ", ".join(f"{k} ({mine} {a!r}, {theirs} {b!r})" for k, (a, b) in differs.items()))

    def replace(self, **changes) -> "ClusterConfig":
        return ClusterConfig(**{**self.to_dict(), **changes})
