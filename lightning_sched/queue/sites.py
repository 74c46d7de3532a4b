"""Sites: a log plus what differs between real clusters and a policy cannot see in its state
(docs/hpc_queue.md, "Sites"). A `SiteModel` rewrites a `QueueLog`:

- requested times: requested = actual x a factor drawn per job from the site's buckets (probability,
  low, high; log-uniform within a bucket), clipped at the site's maximum request. A job whose request
  ends below its run time is killed at its limit, as batch systems do: its run time becomes the
  request. No buckets and no maximum: the log's own requests and run times, as read (exact requests
  in both Lublin logs; a logged job that ran past its request still runs to its end);
- arrivals: inter-arrival gaps scaled to an offered load (`QueueLog.with_load`), or as logged;
- size and length: processors re-paired with run times so that their rank correlation is about
  `size_length_correlation` (a Gaussian copula on ranks; each column keeps its values), or as logged.

Every change is counted in the log's `summary()`, with the site's parameters, so a run records them.
`ArrivalCopies` redraws a log's arrivals around the logged ones: training data
beyond the log itself.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError, is_int
from .config import DAY
from .log import QueueLog, read_queue_log


@dataclass(frozen=True)
class SiteModel:
    """Hidden parameters of one site; `apply(log)` gives the log as that site would have run it."""

    name: str
    request_buckets: tuple[tuple[float, float, float], ...] = ()
    """(probability, low factor, high factor) per bucket; probabilities sum to 1. () keeps the log's requests."""
    max_request: int | None = None
    """Seconds: no request above this (a site's longest queue limit); None: no limit."""
    load: float | None = None
    """Offered load after scaling the inter-arrival gaps; None: as logged."""
    size_length_correlation: float | None = None
    """Target rank correlation of processors and run time in [-1, 1]; None: as logged."""
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_buckets", tuple(tuple(map(float, b)) for b in self.request_buckets))
        for i, bucket in enumerate(self.request_buckets):
            if len(bucket) != 3 or not (0 < bucket[0] <= 1 and 0 < bucket[1] <= bucket[2]) or \
                    not all(map(math.isfinite, bucket)):
                raise ConfigError(f"SiteModel {self.name}: request_buckets[{i}] must be (probability in (0, 1], "
                                  f"0 < low <= high), got {bucket!r}")
        if self.request_buckets and abs(sum(b[0] for b in self.request_buckets) - 1) > 1e-6:
            raise ConfigError(f"SiteModel {self.name}: request_buckets' probabilities must sum to 1, got "
                              f"{sum(b[0] for b in self.request_buckets):g}")
        if self.max_request is not None and not is_int(self.max_request, 1):
            raise ConfigError(f"SiteModel {self.name}: max_request must be an integer >= 1 (seconds), "
                              f"got {self.max_request!r}")
        rho = self.size_length_correlation
        if rho is not None and not (isinstance(rho, (int, float)) and -1 <= rho <= 1):
            raise ConfigError(f"SiteModel {self.name}: size_length_correlation must be in [-1, 1], got {rho!r}")

    def to_dict(self) -> dict:
        return {k: [list(b) for b in v] if k == "request_buckets" else v for k, v in asdict(self).items()}

    def apply(self, log: QueueLog) -> QueueLog:
        """`log` as this site: same jobs in the same order, rewritten as the class docstring says."""
        rng = np.random.default_rng(self.seed)
        run, requested, processors = log.run.copy(), log.requested.copy(), log.processors.copy()
        counts = {**log.counts, "site": self.to_dict()}
        if self.size_length_correlation is not None:
            processors = _repair(processors, run, self.size_length_correlation, rng)
        if self.request_buckets:
            probability = np.array([b[0] for b in self.request_buckets])
            bucket = rng.choice(len(probability), size=len(run), p=probability / probability.sum())
            low = np.log(np.array([b[1] for b in self.request_buckets]))[bucket]
            high = np.log(np.array([b[2] for b in self.request_buckets]))[bucket]
            requested = np.maximum(1, np.round(run * np.exp(rng.uniform(low, high)))).astype(np.int64)
        if self.max_request is not None:
            requested = np.minimum(requested, self.max_request)
        counts["site_killed_at_request"] = 0
        if self.request_buckets or self.max_request is not None:  # the site's limits: its jobs end at them
            killed = requested < run
            counts["site_killed_at_request"] = int(killed.sum())
            run = np.where(killed, requested, run)
        site = replace(log, run=run, requested=requested, processors=processors, counts=counts)
        return site if self.load is None else site.with_load(self.load)


@dataclass
class ArrivalCopies:
    """Training data beyond the log: `copies` versions of each training log whose arrivals are
    redrawn around the logged ones (`perturbed`), replayed beside the log itself. Validation replays
    the logs as they are."""

    copies: int = 0
    """Perturbed versions of each log (0: the logs alone)."""
    gap_jitter: float = 0.5
    """Each inter-arrival gap is multiplied by exp(N(0, gap_jitter))."""
    load_spread: float = 0.15
    """... and the offered load by a factor uniform in [1 - load_spread, 1 + load_spread]."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.copies, 0):
            raise ConfigError(f"arrival_copies.copies must be an integer >= 0, got {self.copies!r}")
        if not self.gap_jitter >= 0:
            raise ConfigError(f"arrival_copies.gap_jitter must be >= 0, got {self.gap_jitter!r}")
        if not 0 <= self.load_spread < 1:
            raise ConfigError(f"arrival_copies.load_spread must be in [0, 1), got {self.load_spread!r}")

    def of(self, logs: list[QueueLog]) -> list[QueueLog]:
        """`logs` followed by their perturbed copies (copy c of log i seeded by seed, c and i)."""
        return [*logs, *(self.perturbed(log, self.seed + 1000 * c + i)
                         for c in range(self.copies) for i, log in enumerate(logs))]

    def perturbed(self, log: QueueLog, seed: int) -> QueueLog:
        """One copy of `log`: each inter-arrival gap times exp(N(0, gap_jitter)), then all gaps scaled
        to an offered load of the log's times a factor uniform in [1 - load_spread, 1 + load_spread].
        The jobs, their order and their requests stay; the change is counted in `summary()`."""
        rng = np.random.default_rng(seed)
        gaps = np.diff(log.submit.astype(np.float64)) * np.exp(rng.normal(0.0, self.gap_jitter, log.num_jobs - 1))
        submit = log.submit[0] + np.round(np.concatenate([[0.0], np.cumsum(gaps)])).astype(np.int64)
        counts = {**log.counts, "arrivals_perturbed": {"gap_jitter": self.gap_jitter, "load_spread": self.load_spread,
                                                       "seed": seed}}
        jittered = replace(log, submit=submit, counts=counts)
        return jittered.with_load(log.offered_load() * rng.uniform(1 - self.load_spread, 1 + self.load_spread))


def _repair(processors: np.ndarray, run: np.ndarray, rho: float, rng: np.random.Generator) -> np.ndarray:
    """`processors` re-assigned to jobs so that their rank correlation with `run` is about `rho`: a
    latent score rho * z(run rank) + sqrt(1 - rho^2) * noise orders the jobs, and the sorted
    processors go to them in that order (ties in run time broken at random)."""
    n = len(run)
    rank = np.empty(n)
    rank[np.lexsort((rng.random(n), run))] = np.arange(n)
    z = torch.special.ndtri(torch.from_numpy((rank + 0.5) / n)).numpy()  # normal scores of the ranks
    latent = rho * z + math.sqrt(max(0.0, 1 - rho * rho)) * rng.standard_normal(n)
    out = np.empty_like(processors)
    out[np.argsort(latent, kind="stable")] = np.sort(processors)
    return out


# Requested-time factor distributions (requested / actual): as measured on a real 8,192-processor log (not
# shipped here: 77% of jobs at >= 10x, 14% at 2-10x, 7% at 1-2x, 1.6% below their run time), a moderate
# site, and one whose users ask for little more than they use (some jobs killed at their limit).
OVERESTIMATING = ((0.016, 0.5, 1.0), (0.07, 1.0, 2.0), (0.14, 2.0, 10.0), (0.774, 10.0, 100.0))
MODERATE = ((0.3, 1.0, 2.0), (0.5, 2.0, 5.0), (0.2, 5.0, 20.0))
TIGHT = ((0.25, 0.5, 1.0), (0.5, 1.0, 1.5), (0.25, 1.5, 3.0))
FIVE_DAYS = 5 * DAY

# The meta-learning split, fixed before any training (docs/hpc_queue.md, "Sites"): (log file in
# ../shared/traces, site). Training sites use the first 80% of the Lublin logs; held-out sites pair a
# log with a site model never seen together in training: NASA's log never seen at all with exact
# requests, Lublin-2 with TIGHT requests (a distribution no training site has), Lublin-1 with
# overestimates and a negative size-length correlation.
TRAINING_SITES = (
    ("lublin_256.swf.gz", SiteModel("lublin1-exact")),
    ("lublin_256.swf.gz", SiteModel("lublin1-over", OVERESTIMATING, FIVE_DAYS, seed=11)),
    ("lublin_256_new2.swf.gz", SiteModel("lublin2-moderate", MODERATE, FIVE_DAYS, seed=12)),
    ("lublin_256_new2.swf.gz", SiteModel("lublin2-over-busy", OVERESTIMATING, FIVE_DAYS, load=1.2, seed=13)),
    ("lublin_256.swf.gz", SiteModel("lublin1-moderate-corr", MODERATE, FIVE_DAYS, size_length_correlation=0.6,
                                    seed=14)),
)
HELDOUT_SITES = (
    ("NASA-iPSC-1993-3.1-cln.swf.gz", SiteModel("nasa-exact", load=1.0)),
    ("lublin_256_new2.swf.gz", SiteModel("lublin2-tight", TIGHT, FIVE_DAYS, seed=21)),
    ("lublin_256.swf.gz", SiteModel("lublin1-over-anticorr", OVERESTIMATING, FIVE_DAYS, size_length_correlation=-0.4,
                                    seed=22)),
)


TRACES_DIR = "../shared/traces"  # where the declared sites' logs are, from a checkout


def site_log(file_name: str, model: SiteModel, traces_dir: str | Path = TRACES_DIR) -> QueueLog:
    """A declared site's log: `file_name` in `traces_dir`, rewritten with the site's hidden parameters."""
    return model.apply(read_queue_log(Path(traces_dir) / file_name))


def declared_sites() -> dict[str, tuple[str, SiteModel]]:
    """{site name: (its log's file name in ../shared/traces, the SiteModel)} of TRAINING_SITES and HELDOUT_SITES."""
    return {model.name: (name, model) for name, model in (*TRAINING_SITES, *HELDOUT_SITES)}
