"""`evaluate(policy, ...)`: run any policy on N jobsets and summarise SPEC's episode metrics with
95% confidence intervals over jobsets; `compare(policies, ...)`: several policies on the same jobsets."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from .config import ClusterConfig, ConfigError
from .deeprm.objectives import METRICS, episode_metrics
from .deeprm.rollout import Policy, play, rollout_seconds
from .deeprm.state import state_bytes
from .jobs import JobSet
from .limits import require_time, require_total

# two-sided 95% Student-t quantiles for df = 1..30; beyond, the Cornish-Fisher series in 1/df around the
# normal quantile (Abramowitz & Stegun 26.7.5), within 1e-6 of the exact value from df = 30 on
_Z95 = 1.959963984540054
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t95(n: int) -> float:
    """The 95% two-sided t quantile for a mean of n samples."""
    if n < 2:
        return math.nan
    df = n - 1
    if df <= len(_T95):
        return _T95[df - 1]
    z = _Z95
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * df**4))


def ci_text(half_width: float, spec: str) -> str:
    """A 95% CI half-width as `format(half_width, spec)`, or "n/a" as wide where one sample gives none."""
    return format(half_width, spec).replace("nan", "n/a")


def json_line(record) -> str:
    """`record` as one line of strict JSON: NaN and infinities (a CI of one sample, a metric of no
    job) become null at any depth, since JSON has no such numbers and strict readers refuse them."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return [clean(v) for v in value] if isinstance(value, (list, tuple)) else value

    return json.dumps(clean(record), allow_nan=False)


def measured_jobsets(summary: dict) -> str:
    """ "N jobsets", or "K jobsets (N - K of the N drew no job)": a CI is over the jobsets with jobs."""
    n, k = summary["num_jobsets"], summary["jobsets_with_jobs"]
    return f"{n} jobsets" if k == n else f"{k} jobsets ({n - k} of the {n} drew no job)"


def mean_ci95(values: torch.Tensor) -> tuple[float, float]:
    """(mean, 95% confidence half-width) of a 1-D sample, ignoring NaNs."""
    v = values[~torch.isnan(values)].double()
    n = v.numel()
    if n == 0:
        return math.nan, math.nan
    mean = float(v.mean())
    if n < 2:
        return mean, math.nan
    return mean, t95(n) * float(v.std(unbiased=True)) / math.sqrt(n)


@dataclass
class EvalResult:
    """Per-episode metrics of N jobsets x E episodes (rows b*E..b*E+E-1 replay jobset b)."""

    episodes: dict[str, torch.Tensor]  # metric -> DoubleTensor[N*E]
    job_slowdown: torch.Tensor  # DoubleTensor[N*E, L], NaN for padding
    job_duration: torch.Tensor  # LongTensor[N*E, L]
    num_jobsets: int
    episodes_per_jobset: int
    steps: int
    summary: dict[str, float] = field(default_factory=dict)

    def per_jobset(self, metric: str) -> torch.Tensor:
        """The metric averaged over each jobset's episodes: DoubleTensor[N]."""
        return self.episodes[metric].view(self.num_jobsets, self.episodes_per_jobset).nanmean(1)


def evaluate(policy: Policy, cfg: ClusterConfig, jobs: JobSet, episodes: int = 1, device="cpu") -> EvalResult:
    """Run `policy` on every jobset `episodes` times (a stochastic policy differs between them).

    jobs: JobSet [N, L]. Confidence intervals treat the N jobsets as the independent samples.
    """
    jobs = jobs.validate(cfg).to(device).repeat_interleave(episodes)
    state, steps = play(policy, cfg, jobs)
    m = episode_metrics(state)
    kept = (*METRICS, "num_jobs", "num_not_arrived", "final_time")
    result = EvalResult(episodes={k: m[k].double().cpu() for k in kept},
                        job_slowdown=m["job_slowdown"].cpu(), job_duration=m["job_duration"].cpu(),
                        num_jobsets=jobs.batch_size // episodes, episodes_per_jobset=episodes, steps=steps)
    summary = {}
    for name in METRICS:
        summary[name], summary[f"{name}_ci95"] = mean_ci95(result.per_jobset(name))
    summary["num_jobs"] = int(result.episodes["num_jobs"].sum()) // episodes
    summary["num_jobsets"] = result.num_jobsets
    summary["jobsets_with_jobs"] = int((result.per_jobset("num_jobs") > 0).sum())  # the others' metrics are NaN
    not_arrived = int(result.episodes["num_not_arrived"].sum())  # arrived at or after the final time
    unfinished = int((~m["job_finished"] & (m["job_duration"] > 0)).sum()) - not_arrived  # arrived, not done
    summary["unfinished_jobs"], summary["jobs_not_arrived"] = unfinished // episodes, not_arrived // episodes
    result.summary = summary
    return result


def paired_difference(a: EvalResult, b: EvalResult, metric: str = "mean_slowdown") -> tuple[float, float]:
    """(mean of a - b, 95% CI half-width) over jobsets both results share (same jobsets, same order).

    Pairing removes the jobset-to-jobset variance both share, so a difference can be significant
    while the two CIs overlap."""
    if a.num_jobsets != b.num_jobsets:
        raise ValueError(f"paired_difference needs the same jobsets: {a.num_jobsets} vs {b.num_jobsets}")
    return mean_ci95(a.per_jobset(metric) - b.per_jobset(metric))


# the metrics where a larger mean is the better policy; for the others smaller is better
HIGHER_IS_BETTER = frozenset({"utilization", "slo_hit_rate"})


@dataclass
class Comparison:
    """Every named policy's EvalResult on the same jobsets (one case: a load, a workload), in the
    order the policies were given."""

    results: dict[str, EvalResult]

    def mean_ci(self, policy: str, metric: str = "mean_slowdown") -> tuple[float, float]:
        """(mean over jobsets, 95% CI half-width) of `policy`'s `metric`."""
        summary = self.results[policy].summary
        return summary[metric], summary[metric + "_ci95"]

    def best(self, among: Iterable[str] | None = None, metric: str = "mean_slowdown") -> str:
        """The policy with the best mean `metric` among `among` (default: all); the first on ties."""
        pick = max if metric in HIGHER_IS_BETTER else min
        return pick(self.results if among is None else among, key=lambda name: self.mean_ci(name, metric)[0])

    def minus(self, policy: str, reference: str, metric: str = "mean_slowdown") -> tuple[float, float]:
        """`policy`'s metric minus `reference`'s, paired over the jobsets: (mean, 95% CI half-width)."""
        return paired_difference(self.results[policy], self.results[reference], metric)


def compare(policies: Mapping[str, Policy], cfg: ClusterConfig, jobs: JobSet, device="cpu") -> Comparison:
    """Run each policy of `policies` ({name: policy}) once on every jobset of `jobs` (JobSet [N, L]).

    The policies run in the given order and keep their state: a sampled policy's generator goes on
    from where the last call left it, so a caller that wants each case to stand alone (its numbers
    not depending on the cases before) passes freshly made policies per case."""
    return Comparison({name: evaluate(policy, cfg, jobs, device=device) for name, policy in policies.items()})


def make_jobsets(workload, num_jobsets: int, seed: int) -> JobSet:
    """`num_jobsets` jobsets drawn on the CPU from a generator seeded with `seed`: the same jobsets
    on every device (ConfigError when none holds a job). Evaluation seeds should differ from
    training seeds (unseen jobsets)."""
    generator = torch.Generator().manual_seed(seed)
    jobs = workload.sample(num_jobsets, generator, "cpu")
    if not bool((jobs.duration > 0).any()):  # every metric would be NaN: a table of them measures nothing
        raise ConfigError(f"the {num_jobsets} jobsets drawn hold no job (a load too low for their simu_len?): "
                          "nothing to measure")
    return jobs


def run_bytes(cfg: ClusterConfig, max_jobs: int, jobsets: int, episodes: int = 1) -> dict[str, float]:
    """Estimated bytes a rollout of `jobsets` x `episodes` episodes of `max_jobs` job columns holds
    at once: the draw (its peak), the episodes' copy of the jobs, the env's state and the per-job
    results (`limits.require_total` sums them)."""
    rows, columns = jobsets * episodes, 8 * max_jobs * (3 + cfg.num_resources)
    return {"drawing the jobsets": 8 * jobsets * max_jobs * (12 + 6 * cfg.num_resources),
            "the episodes' jobs": rows * columns, "the environment's state": state_bytes(cfg, rows, max_jobs),
            "per-job results": 16 * rows * max_jobs}


def require_run_fits(cfg: ClusterConfig, max_jobs: int, jobsets: int, episodes: int = 1, what: str = "the run",
                     policies: int = 1, networks: int = 0, **fields) -> None:
    """ConfigError in one line, before anything is drawn, when `run_bytes` exceeds the memory budget
    or the rollouts of `policies` policies (`networks` of them network policies) on the jobsets'
    episodes (`rollout_seconds`) the work budget."""
    fields = {**fields, "jobsets": jobsets, "episodes": episodes, "job columns": max_jobs}
    require_total(what, run_bytes(cfg, max_jobs, jobsets, episodes), fields)
    rows = jobsets * episodes
    seconds = {"heuristics' rollouts": (policies - networks) * rollout_seconds(max_jobs, rows),
               "networks' rollouts": networks * rollout_seconds(max_jobs, rows, network=True)}
    require_time(what, {k: v for k, v in seconds.items() if v}, {**fields, "policies": policies})
