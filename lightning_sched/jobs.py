"""`JobSet`: a batch of jobsets, one per env row, as padded tensors (SPEC "Jobs")."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ClusterConfig, ConfigError
from .deeprm.state import NEVER
from .files import load_torch_file, write_torch

TENSORS = ("arrival", "duration", "demand", "deadline", "running_left", "running_demand")


@dataclass
class JobSet:
    """B jobsets of up to L jobs over R resources. A job with duration 0 is padding.

    arrival:  LongTensor[B, L]    time step the job enters the system (>= 0)
    duration: LongTensor[B, L]    steps it runs, 1..max_job_len (0 = padding)
    demand:   LongTensor[B, L, R] units of each resource, 0..max_job_units
    deadline: LongTensor[B, L] or None; None means a_j + floor(slo_slowdown * d_j)

    Optionally, jobs already running when the episode starts (a trace window that starts from the
    log's own state): they hold their resources from time 0 for their remaining steps, are never
    scheduled, and are no part of the episode's jobs or metrics (only the occupancy they leave).
    running_left:   LongTensor[B, K] or None   steps each still occupies from time 0, 0..horizon (0 = padding)
    running_demand: LongTensor[B, K, R] or None  its units; together at most resource_units per resource
    """

    arrival: torch.Tensor
    duration: torch.Tensor
    demand: torch.Tensor
    deadline: torch.Tensor | None = None
    running_left: torch.Tensor | None = None
    running_demand: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # narrower integer tensors (int32 from numpy, uint8 from a file) widen losslessly to the
        # int64 the simulator computes in; anything else is left for `validate` to refuse
        for name in TENSORS:
            tensor = getattr(self, name)
            if (isinstance(tensor, torch.Tensor) and tensor.dtype != torch.long and tensor.dtype != torch.bool
                    and not tensor.is_floating_point() and not tensor.is_complex()):
                setattr(self, name, tensor.long())

    @property
    def batch_size(self) -> int:
        return self.arrival.shape[0]

    @property
    def max_jobs(self) -> int:
        return self.arrival.shape[1]

    @property
    def device(self) -> torch.device:
        return self.arrival.device

    @property
    def num_jobs(self) -> torch.Tensor:
        """LongTensor[B]: real (non-padding) jobs per jobset."""
        return (self.duration > 0).sum(-1)

    def deadlines(self, slo_slowdown: float) -> torch.Tensor:
        """LongTensor[B, L]: the given deadlines, or SPEC's default a_j + floor(slo * d_j)."""
        if self.deadline is not None:
            return self.deadline
        # floor in float64 is exact for the integer ranges a jobset can hold; a slack beyond any episode
        # is capped at NEVER, where int64 would wrap a huge slo_slowdown into a deadline in the past
        slack = torch.floor(slo_slowdown * self.duration.double()).clamp(max=NEVER)
        return self.arrival + slack.long()

    def validate(self, cfg: ClusterConfig) -> "JobSet":
        """Raise ConfigError naming the field, the position and the value of the first bad entry."""
        b, length = self.arrival.shape if self.arrival.dim() == 2 else (None, None)
        if b is None:
            raise ConfigError(f"JobSet.arrival must be [B, L], got shape {tuple(self.arrival.shape)}")
        if b == 0:
            raise ConfigError(f"JobSet has B=0 jobsets (arrival shape {tuple(self.arrival.shape)}); give at least one")
        for name, tensor, shape in (("duration", self.duration, (b, length)),
                                    ("demand", self.demand, (b, length, cfg.num_resources)),
                                    ("deadline", self.deadline, (b, length))):
            if tensor is not None and tuple(tensor.shape) != shape:
                raise ConfigError(f"JobSet.{name} must have shape {shape} (B, L{', R' if name == 'demand' else ''}), "
                                  f"got {tuple(tensor.shape)}")
        for name in TENSORS:
            tensor = getattr(self, name)
            if tensor is not None and (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool):
                raise ConfigError(f"JobSet.{name} must hold integers, got dtype {tensor.dtype}")
        real = self.duration > 0
        _check(self.arrival < 0, "arrival", self.arrival, "must be >= 0")
        _check((self.duration < 0) | (self.duration > cfg.max_job_len), "duration", self.duration,
               f"is outside 0..max_job_len={cfg.max_job_len}")
        _check(((self.demand < 0) | (self.demand > cfg.max_job_units)) & real.unsqueeze(-1), "demand", self.demand,
               f"is outside 0..max_job_units={cfg.max_job_units}")
        if self.deadline is not None:
            _check((self.deadline < self.arrival + self.duration) & real, "deadline", self.deadline,
                   "is before arrival + duration")
        self._validate_running(cfg)
        return self

    def _validate_running(self, cfg: ClusterConfig) -> None:
        left, demand = self.running_left, self.running_demand
        if (left is None) != (demand is None):
            raise ConfigError("JobSet.running_left and JobSet.running_demand come together: give both or neither")
        if left is None:
            return
        b = self.batch_size
        if left.dim() != 2 or left.shape[0] != b:
            raise ConfigError(f"JobSet.running_left must have shape (B={b}, K), got {tuple(left.shape)}")
        if tuple(demand.shape) != (*left.shape, cfg.num_resources):
            raise ConfigError(f"JobSet.running_demand must have shape {(*left.shape, cfg.num_resources)} (B, K, R), "
                              f"got {tuple(demand.shape)}")
        _check((left < 0) | (left > cfg.horizon), "running_left", left, f"is outside 0..horizon={cfg.horizon}")
        _check((demand < 0) | (demand > cfg.max_job_units), "running_demand", demand,
               f"is outside 0..max_job_units={cfg.max_job_units}")
        # every running job occupies row 0, so row 0 holds their sum
        total = (demand * (left > 0).unsqueeze(-1)).sum(1)  # [B, R]
        _check(total > cfg.resource_units, "running_demand.sum(jobs)", total,
               f"exceeds resource_units={cfg.resource_units}")

    @property
    def num_running(self) -> torch.Tensor:
        """LongTensor[B]: jobs already running at time 0 (0 without running_left)."""
        if self.running_left is None:
            return torch.zeros(self.batch_size, dtype=torch.long, device=self.device)
        return (self.running_left > 0).sum(-1)

    def _apply(self, fn) -> "JobSet":
        """A JobSet with fn applied to every tensor it holds (None stays None)."""
        return JobSet(*(None if getattr(self, n) is None else fn(getattr(self, n)) for n in TENSORS))

    def require_arrivals_in_episode(self, cfg: ClusterConfig) -> "JobSet":
        """Raise ConfigError at the first job arriving at or after max_time. SPEC accepts such jobs
        (they never enter the episode and episode metrics leave them out); a script evaluating a
        jobset file refuses them, since the user meant them to run."""
        _check((self.arrival >= cfg.max_time) & (self.duration > 0), "arrival", self.arrival,
               f"must be < ClusterConfig.max_time={cfg.max_time} (the episode ends before it arrives)")
        return self

    def to(self, device) -> "JobSet":
        return self._apply(lambda t: t.to(device))

    def repeat_interleave(self, episodes: int) -> "JobSet":
        """Each jobset `episodes` times in a row: rows b*E .. b*E+E-1 replay jobset b."""
        return self._apply(lambda t: t.repeat_interleave(episodes, dim=0))

    def __getitem__(self, rows) -> "JobSet":
        return self._apply(lambda t: t[rows])

    @staticmethod
    def cat(jobsets: list["JobSet"]) -> "JobSet":
        """Stack jobsets along B, padding L with duration-0 jobs (and K with no running jobs)."""
        length = max(j.max_jobs for j in jobsets)

        def pad(t, value=0, size=length):
            if t.shape[1] == size:
                return t
            extra = list(t.shape)
            extra[1] = size - t.shape[1]
            return torch.cat([t, t.new_full(extra, value)], dim=1)

        with_deadline = any(j.deadline is not None for j in jobsets)
        deadlines = None
        if with_deadline:
            if not all(j.deadline is not None for j in jobsets):
                raise ConfigError("JobSet.cat: either all jobsets give deadlines or none does")
            deadlines = torch.cat([pad(j.deadline) for j in jobsets])
        left = demand = None
        if any(j.running_left is not None for j in jobsets):
            r = jobsets[0].demand.shape[-1]
            filled = [j if j.running_left is not None else
                      JobSet(j.arrival, j.duration, j.demand, j.deadline, j.arrival.new_zeros(j.batch_size, 0),
                             j.arrival.new_zeros(j.batch_size, 0, r)) for j in jobsets]
            k = max(j.running_left.shape[1] for j in filled)
            left = torch.cat([pad(j.running_left, size=k) for j in filled])
            demand = torch.cat([pad(j.running_demand, size=k) for j in filled])
        return JobSet(torch.cat([pad(j.arrival) for j in jobsets]), torch.cat([pad(j.duration) for j in jobsets]),
                      torch.cat([pad(j.demand) for j in jobsets]), deadlines, left, demand)

    # ----- files: fixed evaluation sets ----------------------------------------------------
    def save(self, path: str | Path, overwrite: bool = False, **meta) -> Path:
        """Write the jobsets (and any metadata, e.g. the workload that drew them) with torch.save,
        atomically; an existing file is replaced only with `overwrite` (files.write_torch)."""
        return write_torch({**{n: None if getattr(self, n) is None else getattr(self, n).cpu() for n in TENSORS},
                            "meta": meta}, path, overwrite)

    @staticmethod
    def load(path: str | Path, device="cpu") -> "JobSet":
        return JobSet.load_with_meta(path, device)[0]

    @staticmethod
    def load_with_meta(path: str | Path, device="cpu") -> tuple["JobSet", dict]:
        """(the jobsets, the metadata saved with them: e.g. evaluate.py's workload and seed; {} if none)."""
        data = load_torch_file(path, "JobSet file (JobSet.save)", weights_only=True, map_location=device)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: not a JobSet file (JobSet.save), it holds a {type(data).__name__}")
        missing = {"arrival", "duration", "demand"} - set(data)
        if missing:
            raise ConfigError(f"{path}: not a JobSet file, missing {sorted(missing)}")
        for name in TENSORS:  # a hand-edited file: a string where a tensor belongs
            if data.get(name) is not None and not isinstance(data[name], torch.Tensor):
                raise ConfigError(f"{path}: JobSet.{name} must be a tensor, got a {type(data[name]).__name__}")
        try:
            jobs = JobSet(data["arrival"], data["duration"], data["demand"], data.get("deadline"),
                          data.get("running_left"), data.get("running_demand"))
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None
        meta = data.get("meta")
        return jobs, meta if isinstance(meta, dict) else {}


def _check(bad: torch.Tensor, field: str, values: torch.Tensor, what: str) -> None:
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ConfigError(f"JobSet.{field}{list(where)} = {int(values[where])} {what}")

