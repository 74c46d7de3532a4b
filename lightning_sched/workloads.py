"""Workloads: generators of `JobSet`s. DeepRM's synthetic jobs and families of them (SPEC "The
default workload").

A workload has `sample(batch_size, generator, device) -> JobSet` with a fixed number of job columns
`max_jobs`, so an env's specs do not change between resets.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch

from .config import ClusterConfig, ConfigError
from .jobs import JobSet
from .limits import require_memory

ARRIVALS = ("auto", "bernoulli", "poisson")


def _pair(name: str, value) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(f"{name} must be a (low, high) pair, got {value!r}")
    lo, hi = value
    if lo > hi:
        raise ConfigError(f"{name}=({lo}, {hi}) has low > high")
    return (lo, hi)


@dataclass
class DeepRMWorkload:
    """DeepRM's job generator (Mao et al. 2016, section 5; its code's job_distribution.py).

    Each step of `simu_len` a job arrives (Bernoulli, at most one a step, as DeepRM) or a Poisson
    number of jobs arrive. A job is short with probability `short_prob`, else long; one dominant
    resource, chosen uniformly, gets `dominant_units`, the others `other_units` (ranges inclusive).
    The arrival rate is set from `load`, the expected offered load per resource:
    load = rate * E[d] * E[q] / U.
    """

    load: float = 0.7
    """Offered load per resource; DeepRM sweeps 0.1..1.9 (Figure 4)."""
    simu_len: int = 50
    """Steps with arrivals. DeepRM: 50."""
    short_prob: float = 0.8
    """Share of short jobs. DeepRM: 0.8."""
    short_len: tuple = (1, 3)
    """Short job durations, inclusive. DeepRM: 1..3."""
    long_len: tuple = (10, 15)
    """Long job durations, inclusive. DeepRM: 10..15."""
    dominant_units: tuple = (5, 10)
    """Dominant-resource demand, inclusive. DeepRM: U/2..U."""
    other_units: tuple = (1, 2)
    """Other resources' demand, inclusive. DeepRM: 1..2."""
    arrivals: str = "auto"
    """'bernoulli', 'poisson', or 'auto' (Bernoulli while it can reach the load, else Poisson)."""
    num_resources: int = 2
    resource_units: int = 10

    def __post_init__(self) -> None:
        self.short_len = _pair("short_len", self.short_len)
        self.long_len = _pair("long_len", self.long_len)
        self.dominant_units = _pair("dominant_units", self.dominant_units)
        self.other_units = _pair("other_units", self.other_units)
        if self.arrivals not in ARRIVALS:
            raise ConfigError(f"arrivals={self.arrivals!r} is unknown; choose one of {ARRIVALS}")
        if not isinstance(self.simu_len, int) or self.simu_len < 1:
            raise ConfigError(f"simu_len must be an integer >= 1, got {self.simu_len!r}")
        if not 0 <= self.short_prob <= 1:
            raise ConfigError(f"short_prob must be in [0, 1], got {self.short_prob}")
        if not (math.isfinite(self.load) and self.load > 0):
            raise ConfigError(f"load must be a finite number > 0, got {self.load}")
        for name in ("short_len", "long_len"):
            lo, hi = getattr(self, name)
            if lo < 1:
                raise ConfigError(f"{name}=({lo}, {hi}): durations must be >= 1")
        for name in ("dominant_units", "other_units"):
            lo, hi = getattr(self, name)
            if lo < 0 or hi > self.resource_units:
                raise ConfigError(f"{name}=({lo}, {hi}) is outside 0..resource_units={self.resource_units}")
        if self.units_per_job == 0:
            raise ConfigError(f"dominant_units={self.dominant_units} and other_units={self.other_units} "
                              f"give jobs that demand nothing; no load can be reached")
        if self.process == "bernoulli" and self.rate > 1:
            raise ConfigError(
                f"load={self.load} needs {self.rate:.3f} arrivals a step; a Bernoulli process reaches at most "
                f"load {self.max_bernoulli_load:.3f}; use arrivals='poisson' or 'auto'")

    @classmethod
    def for_cluster(cls, cfg: ClusterConfig, **params) -> "DeepRMWorkload":
        """DeepRM's defaults scaled to the cluster: dominant demand U/2..MU, others 1..max(1, U/5)."""
        units = cfg.resource_units
        defaults = dict(dominant_units=(min(cfg.max_job_units, max(1, units // 2)), cfg.max_job_units),
                        other_units=(min(1, cfg.max_job_units), min(cfg.max_job_units, max(1, units // 5))),
                        long_len=(min(10, cfg.max_job_len), cfg.max_job_len), short_len=(1, min(3, cfg.max_job_len)))
        return cls(**{**defaults, **params, "num_resources": cfg.num_resources, "resource_units": units})

    def scaled_to(self, cfg: ClusterConfig) -> "DeepRMWorkload":
        """The same job mix on a cluster of cfg.resource_units units a resource: each demand bound
        scaled by cfg.resource_units / resource_units (rounded; a bound >= 1 stays >= 1; at most
        cfg.max_job_units). The load, a share of capacity, and the durations are unchanged."""
        def scale(bound: int) -> int:
            if bound == 0:
                return 0
            return min(cfg.max_job_units, max(1, round(bound * cfg.resource_units / self.resource_units)))

        return replace(self, resource_units=cfg.resource_units,
                       dominant_units=tuple(map(scale, self.dominant_units)),
                       other_units=tuple(map(scale, self.other_units)))

    # ----- the load identity: load = rate * E[d] * E[q] / U ------------------------------------
    @property
    def mean_duration(self) -> float:
        return self.short_prob * sum(self.short_len) / 2 + (1 - self.short_prob) * sum(self.long_len) / 2

    @property
    def units_per_job(self) -> float:
        """E[q] on one resource: dominant with probability 1/R."""
        r = self.num_resources
        return (sum(self.dominant_units) / 2 + (r - 1) * sum(self.other_units) / 2) / r

    @property
    def load_per_arrival(self) -> float:
        return self.mean_duration * self.units_per_job / self.resource_units

    @property
    def rate(self) -> float:
        """Expected arrivals per step."""
        return self.load / self.load_per_arrival

    @property
    def max_bernoulli_load(self) -> float:
        return self.load_per_arrival

    @property
    def process(self) -> str:
        if self.arrivals == "auto":
            return "bernoulli" if self.rate <= 1 else "poisson"
        return self.arrivals

    @property
    def max_jobs(self) -> int:
        """Job columns: simu_len for Bernoulli; for Poisson a cap far in the tail (checked on sampling)."""
        if self.process == "bernoulli":
            return self.simu_len
        mean = self.rate * self.simu_len
        return int(math.ceil(mean + 8 * math.sqrt(mean) + 16))

    def validate(self, cfg: ClusterConfig) -> None:
        _require_arrivals_before_max_time(self.simu_len, cfg)
        if self.num_resources != cfg.num_resources or self.resource_units != cfg.resource_units:
            raise ConfigError(f"workload has num_resources={self.num_resources}, resource_units={self.resource_units}; "
                              f"the cluster has {cfg.num_resources}, {cfg.resource_units}")
        if max(self.short_len[1], self.long_len[1]) > cfg.max_job_len:
            raise ConfigError(f"workload job length up to {max(self.short_len[1], self.long_len[1])} "
                              f"exceeds max_job_len={cfg.max_job_len}")
        if max(self.dominant_units[1], self.other_units[1]) > cfg.max_job_units:
            raise ConfigError(f"workload demand up to {max(self.dominant_units[1], self.other_units[1])} "
                              f"exceeds max_job_units={cfg.max_job_units}")

    def params(self, batch_size: int, device) -> dict[str, torch.Tensor]:
        """The same parameters for every row, as [B] tensors (the form `sample_jobs` takes)."""
        def col(value, dtype=torch.float64):
            return torch.full((batch_size,), value, dtype=dtype, device=device)

        return {"rate": col(self.rate), "poisson": col(self.process == "poisson", torch.bool),
                "short_prob": col(self.short_prob),
                "short_lo": col(self.short_len[0], torch.long), "short_hi": col(self.short_len[1], torch.long),
                "long_lo": col(self.long_len[0], torch.long), "long_hi": col(self.long_len[1], torch.long),
                "dom_lo": col(self.dominant_units[0], torch.long), "dom_hi": col(self.dominant_units[1], torch.long),
                "other_lo": col(self.other_units[0], torch.long), "other_hi": col(self.other_units[1], torch.long)}

    def sample(self, batch_size: int, generator: torch.Generator | None = None, device="cpu") -> JobSet:
        """B jobsets: JobSet with arrival/duration LongTensor[B, max_jobs], demand [B, max_jobs, R]."""
        _require_sampling_memory(batch_size, self.max_jobs, self.num_resources, load=self.load, simu_len=self.simu_len)
        return sample_jobs(self.params(batch_size, device), self.simu_len, self.max_jobs, self.num_resources,
                           generator, device)

    def to_dict(self) -> dict:
        return asdict(self)


def _require_arrivals_before_max_time(simu_len: int, cfg: ClusterConfig) -> None:
    """Arrivals fall in 0..simu_len-1; an episode is truncated at max_time, so a later one would
    never be in it (a given JobSet may hold such jobs: episode metrics leave them out)."""
    if simu_len > cfg.max_time:
        raise ConfigError(f"workload simu_len={simu_len} exceeds ClusterConfig.max_time={cfg.max_time}: jobs would "
                          f"arrive after the episode is truncated; use simu_len <= max_time")


def _require_sampling_memory(batch_size: int, max_jobs: int, num_resources: int, **fields) -> None:
    """Refuse a draw whose tensors would not fit in memory, before allocating them. `sample_jobs`
    holds about twelve 8-byte [B, L] tensors and six [B, L, R] at its peak."""
    require_memory("drawing the jobsets", 8 * batch_size * max_jobs * (12 + 6 * num_resources),
                   {**fields, "jobsets": batch_size, "job columns": max_jobs})


def _uniform_int(lo: torch.Tensor, hi: torch.Tensor, shape, generator, device) -> torch.Tensor:
    """Integers uniform in lo..hi inclusive, per row (lo, hi: LongTensor[B]), of shape [B, ...]."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    view = (-1,) + (1,) * (len(shape) - 1)
    span = (hi - lo + 1).view(view).double()
    return lo.view(view) + (u * span).long().clamp(max=(hi - lo).view(view))


def sample_jobs(p: dict[str, torch.Tensor], simu_len: int, max_jobs: int, num_resources: int,
                generator: torch.Generator | None, device) -> JobSet:
    """Draw jobsets from per-row DeepRM parameters (each a [B] tensor; see `DeepRMWorkload.params`).

    Bernoulli rows: column i is the job of step i (padding when none arrives). Poisson rows:
    exponential inter-arrival times, floor-ed to steps; jobs arriving at or after simu_len are padding.
    """
    b = p["rate"].shape[0]
    shape = (b, max_jobs)
    column = torch.arange(max_jobs, device=device)
    bernoulli_arrives = ((torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
                          < p["rate"].unsqueeze(1)) & (column < simu_len))
    gaps = (torch.empty(shape, device=device, dtype=torch.float64).exponential_(1.0, generator=generator)
            / p["rate"].unsqueeze(1))
    poisson_time = gaps.cumsum(1)  # a Poisson process: exponential gaps from time 0
    poisson_arrives = poisson_time < simu_len
    if bool((p["poisson"] & poisson_arrives[:, -1]).any()):
        raise ConfigError(f"Poisson arrivals filled all {max_jobs} job columns before simu_len={simu_len}; "
                          "the job-column cap is too small for this rate")
    poisson = p["poisson"].unsqueeze(1)
    exists = torch.where(poisson, poisson_arrives, bernoulli_arrives)
    arrival = torch.where(poisson, poisson_time.floor().long().clamp(max=simu_len), column)
    short = torch.rand(shape, generator=generator, device=device, dtype=torch.float64) < p["short_prob"].unsqueeze(1)
    duration = torch.where(short, _uniform_int(p["short_lo"], p["short_hi"], shape, generator, device),
                           _uniform_int(p["long_lo"], p["long_hi"], shape, generator, device))
    dominant = torch.randint(num_resources, shape, generator=generator, device=device)
    dshape = (b, max_jobs, num_resources)
    is_dominant = torch.arange(num_resources, device=device) == dominant.unsqueeze(-1)
    demand = torch.where(is_dominant, _uniform_int(p["dom_lo"], p["dom_hi"], dshape, generator, device),
                         _uniform_int(p["other_lo"], p["other_hi"], dshape, generator, device))
    duration = duration * exists
    demand = demand * exists.unsqueeze(-1)
    arrival = arrival * exists
    return JobSet(arrival=arrival, duration=duration, demand=demand)


@dataclass
class WorkloadFamily:
    """DeepRM workloads whose parameters are drawn per row from ranges: the meta-learning tasks.

    `load` and `short_prob` are (low, high) ranges of uniform reals. The integer ranges
    (`short_len`, ...) are given as (range of the low end, range of the high end): each task draws
    its low end from the first and its high end from the second.
    """

    load: tuple = (0.3, 1.5)
    short_prob: tuple = (0.6, 0.9)
    short_len: tuple = ((1, 1), (2, 4))
    long_len: tuple = ((8, 10), (12, 15))
    dominant_units: tuple = ((3, 5), (7, 10))
    other_units: tuple = ((0, 1), (1, 3))
    arrivals: str = "auto"
    simu_len: int = 50
    num_resources: int = 2
    resource_units: int = 10

    def __post_init__(self) -> None:
        self.load = _pair("load", self.load)
        self.short_prob = _pair("short_prob", self.short_prob)
        for name in ("short_len", "long_len", "dominant_units", "other_units"):
            lo_range, hi_range = _pair(name, getattr(self, name))
            setattr(self, name, (_pair(f"{name}[0]", lo_range), _pair(f"{name}[1]", hi_range)))
        # each integer range at its lowest ends: the shortest, smallest jobs, so the most arrivals a step
        lowest = {name: (getattr(self, name)[0][0], getattr(self, name)[1][0])
                  for name in ("short_len", "long_len", "dominant_units", "other_units")}
        try:  # the lightest task checks the ranges' low ends (a load must be > 0, a probability in [0, 1])
            self.workload(load=self.load[0], short_prob=self.short_prob[0], **lowest)
        except ConfigError as error:
            raise ConfigError(f"WorkloadFamily(load={self.load}, short_prob={self.short_prob}): {error}") from None
        # The densest task (most arrivals a step) sets the job columns; building it checks the ranges.
        self._densest = self.workload(load=self.load[1], short_prob=self.short_prob[1], **lowest)

    def with_load_upto(self, fraction: float) -> "WorkloadFamily":
        """The family with its load range cut to the first `fraction` of it (a curriculum over load:
        training starts on the light end)."""
        if not 0 < fraction <= 1:
            raise ConfigError(f"WorkloadFamily.with_load_upto: fraction must be in (0, 1], got {fraction}")
        low, high = self.load
        return replace(self, load=(low, low + (high - low) * fraction))

    def workload(self, **params) -> DeepRMWorkload:
        return DeepRMWorkload(simu_len=self.simu_len, arrivals=self.arrivals, num_resources=self.num_resources,
                              resource_units=self.resource_units, **params)

    @property
    def max_jobs(self) -> int:
        return max(self.simu_len, self._densest.max_jobs)

    def validate(self, cfg: ClusterConfig) -> None:
        _require_arrivals_before_max_time(self.simu_len, cfg)
        longest = max(self.short_len[1][1], self.long_len[1][1])
        largest = max(self.dominant_units[1][1], self.other_units[1][1])
        if longest > cfg.max_job_len:
            raise ConfigError(f"WorkloadFamily job length up to {longest} exceeds max_job_len={cfg.max_job_len}")
        if largest > cfg.max_job_units:
            raise ConfigError(f"WorkloadFamily demand up to {largest} exceeds max_job_units={cfg.max_job_units}")
        if (self.num_resources, self.resource_units) != (cfg.num_resources, cfg.resource_units):
            raise ConfigError(f"WorkloadFamily has num_resources={self.num_resources}, "
                              f"resource_units={self.resource_units}; "
                              f"the cluster has {cfg.num_resources}, {cfg.resource_units}")

    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> list[DeepRMWorkload]:
        """One concrete DeepRMWorkload per row (the tasks of a meta-batch)."""
        def real(rng):
            lo, hi = rng
            return lo + (hi - lo) * float(torch.rand((), generator=generator, dtype=torch.float64))

        def integer(rng):
            lo, hi = rng
            return int(torch.randint(lo, hi + 1, (), generator=generator))

        out = []
        for _ in range(batch_size):
            params = {"load": real(self.load), "short_prob": real(self.short_prob)}
            for name in ("short_len", "long_len", "dominant_units", "other_units"):
                lo_range, hi_range = getattr(self, name)
                lo = integer(lo_range)
                params[name] = (lo, max(lo, integer(hi_range)))
            out.append(self.workload(**params))
        return out

    def sample(self, batch_size: int, generator: torch.Generator | None = None, device="cpu") -> JobSet:
        """One task per row, drawn fresh: JobSet [B, max_jobs]."""
        _require_sampling_memory(batch_size, self.max_jobs, self.num_resources, load=self.load,
                                 simu_len=self.simu_len)
        return sample_from(self.draw(batch_size, generator), self.simu_len, self.max_jobs, generator, device)


def sample_from(workloads: list[DeepRMWorkload], simu_len: int, max_jobs: int, generator, device) -> JobSet:
    """One jobset per row, row b from workloads[b], in one batched draw."""
    rows = [w.params(1, device) for w in workloads]
    params = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    return sample_jobs(params, simu_len, max_jobs, workloads[0].num_resources, generator, device)
