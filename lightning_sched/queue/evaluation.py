"""Evaluating queue policies on a log under the field's protocols (docs/hpc_queue.md):

    "rlscheduler": RLScheduler's table (Zhang et al., SC'20): the 10 sequences of 1024 jobs its
                   seeded draw gives, each on an empty cluster; the score is the mean over
                   sequences of each sequence's mean bounded slowdown.
    "heldout":     `num_sequences` sequences of 1024 jobs starting evenly over the last 20% of the
                   log's jobs (train on the first 80% only); means with 95% CIs over sequences.
    "recent":      the same over the last quarter of the training range, 60-80% of the log's jobs:
                   a choice between trained policies made on data the held-out test never sees.
    "disjoint":    the log from its first job in sequences that share no job: CIs over
                   independent stretches (not held out: how a difference varies between them).

Policies are named as queue.specs resolves them: a rule ranks the whole queue, so it runs with a
window as long as the sequence; a network runs with the window it was trained with.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..cli import require_distinct
from ..config import ConfigError, is_number
from ..evaluation import ci_text, mean_ci95
from .config import QueueConfig
from .env import EPISODE_KEYS, QueueEnv
from .heuristics import RULES, QueueHeuristic
from .log import QueueLog, read_queue_log
from .rollout import collect
from .specs import QueueCheckpoint, heuristic_config, is_rule, network_config, policy_record, resolve  # noqa: F401

PROTOCOLS = ("rlscheduler", "heldout", "recent", "disjoint")
# 0-based positions in the log's job list of RLScheduler's 10 evaluation sequences (its seeded draw)
RLSCHEDULER_STARTS = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)
# RLScheduler's published RL cells (SC'20, average bounded slowdown; trained on the whole log): the
# reference a figure draws, never a result of this project
RLSCHEDULER_PUBLISHED = {("lublin_256.swf.gz", "off"): 254.67, ("lublin_256_new2.swf.gz", "off"): 724.51,
                         ("lublin_256.swf.gz", "easy"): 58.64, ("lublin_256_new2.swf.gz", "easy"): 118.79}
EVAL_LENGTH = 1024
RLSCHEDULER_JOBS = max(RLSCHEDULER_STARTS) + EVAL_LENGTH  # the jobs a log needs for RLScheduler's sequences
TRAIN_FRACTION = 0.8  # heldout: training sees jobs [0, 80%), evaluation starts in [80%, end - 1024]
RECENT_FRACTION = 0.6  # recent: sequences start in [60%, 80%) and end before 80%
METRICS = EPISODE_KEYS  # what an evaluation reports: the env's results of each episode
OVERLOADED = 2.0  # an offered load above this as read points to a misread cluster (a note, not a refusal)
SEQUENCES = 100  # heldout and recent: sequences by default, enough for a 95% CI on a paired difference


def log_stem(path) -> str:
    """A log's file name without .gz and .swf: the same log, gzipped or not."""
    return Path(str(path)).name.removesuffix(".gz").removesuffix(".swf")


def rlschedulers_log(path) -> bool:
    """Whether `path` is one of RLScheduler's Lublin logs (by file name, gzipped or not)."""
    return log_stem(path) in {log_stem(name) for name, _ in RLSCHEDULER_PUBLISHED}


def protocol_starts(log: QueueLog, protocol: str, num_sequences: int = SEQUENCES,
                    length: int = EVAL_LENGTH) -> torch.Tensor:
    """The evaluation sequences' start positions (LongTensor[N]) of `protocol` on `log`, sequences of
    `length` jobs (RLScheduler's are 1024): rlscheduler's 10; heldout's and recent's `num_sequences`,
    overlapping, from the last 20% and from 60-80%; disjoint's, every `length` jobs of the whole log."""
    if protocol == "rlscheduler":
        if length != EVAL_LENGTH:
            raise ConfigError(f"sequence_length {length}: the rlscheduler protocol's sequences are {EVAL_LENGTH} jobs")
        if log.num_jobs < RLSCHEDULER_JOBS:
            raise ConfigError(f"protocol rlscheduler: its sequences need {RLSCHEDULER_JOBS} jobs, "
                              f"{Path(log.path).name} has {log.num_jobs} (the protocol is defined on the Lublin logs; "
                              "try --protocol heldout)")
        return torch.tensor(RLSCHEDULER_STARTS)
    if protocol in ("heldout", "recent"):
        first, end = (log.jobs_before(TRAIN_FRACTION), log.num_jobs) if protocol == "heldout" else \
            (log.jobs_before(RECENT_FRACTION), log.jobs_before(TRAIN_FRACTION))
        return spread_starts(log, first, end, num_sequences, length)
    if protocol == "disjoint":  # the whole log cut in sequences that share no job: independent stretches
        if log.num_jobs < 2 * length:
            raise ConfigError(f"protocol disjoint: {Path(log.path).name} has {log.num_jobs} jobs, not two sequences of "
                              f"{length} (a shorter --sequence_length)")
        return torch.arange(0, log.num_jobs - length + 1, length)
    raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")


def spread_starts(log: QueueLog, first: int, end: int, num_sequences: int, length: int = EVAL_LENGTH) -> torch.Tensor:
    """Up to `num_sequences` distinct start positions (LongTensor[N]) spread evenly over the
    sequences of `length` jobs inside jobs [first, end) of `log`."""
    lo, hi = log.positions(first, end, length)
    return torch.from_numpy(np.unique(np.linspace(lo, hi, num_sequences).round().astype(np.int64)))


@dataclass
class QueueResult:
    """Per-sequence metrics (DoubleTensor[N] each) of one policy, and their summary."""

    sequences: dict[str, torch.Tensor]
    summary: dict[str, float]


def evaluate_queue(policy: Callable, cfg: QueueConfig, log: QueueLog, starts: torch.Tensor,
                   device="cpu") -> QueueResult:
    """Run `policy` (td -> td with "action") once on each sequence of `cfg.sequence_length` jobs
    starting at `starts` (LongTensor[N]), all N at once; every sequence runs to its end."""
    env = QueueEnv(cfg, log, batch_size=[len(starts)], starts=starts, device=device)
    with torch.no_grad():
        decisions = collect(env, policy).shape[1]
    m = env.episode_metrics()
    sequences = {k: m[k].double().cpu() for k in METRICS}
    summary: dict[str, float] = {}
    for name in METRICS:
        summary[name], summary[f"{name}_ci95"] = mean_ci95(sequences[name])
    summary.update(num_sequences=len(starts), jobs=len(starts) * cfg.sequence_length, decision_steps=decisions)
    return QueueResult(sequences, summary)


def compare_queue(policies: Mapping[str, tuple[Callable, QueueConfig]], log: QueueLog, starts: torch.Tensor,
                  device="cpu") -> dict[str, QueueResult]:
    """{name: (policy, its config)} -> {name: QueueResult}, all on the same sequences."""
    return {name: evaluate_queue(policy, cfg, log, starts, device) for name, (policy, cfg) in policies.items()}


def heuristic_policies(names, cfg: QueueConfig, seed: int = 0) -> dict[str, tuple[Callable, QueueConfig]]:
    """{name: (QueueHeuristic, the whole-queue config)} for each rule name."""
    full = heuristic_config(cfg)
    return {n: (QueueHeuristic(n, torch.Generator().manual_seed(seed)), full) for n in names}


def difference(a: QueueResult, b: QueueResult, metric: str = "mean_bounded_slowdown") -> torch.Tensor:
    """a - b on each sequence both ran: DoubleTensor[N]."""
    if a.sequences[metric].shape != b.sequences[metric].shape:
        raise ConfigError("paired: the two results ran different sequences")
    return a.sequences[metric] - b.sequences[metric]


def paired(a: QueueResult, b: QueueResult, metric: str = "mean_bounded_slowdown") -> tuple[float, float]:
    """a - b over the sequences both ran: (mean, 95% CI half-width)."""
    return mean_ci95(difference(a, b, metric))


def halves(diff: torch.Tensor, starts: torch.Tensor) -> list[float] | None:
    """A paired difference (DoubleTensor[N], one value a sequence) averaged over the sequences of the
    earlier and of the later half of the range, by start (`starts`, LongTensor[N]; the later half
    takes the middle one of an odd N): overlapping sequences share their jobs, so a CI over them
    says little about another stretch, while a difference that changes sign between the halves is
    not one to rely on. None for fewer than two sequences."""
    diff = diff[starts.argsort(stable=True)]
    n = len(diff) // 2
    return [float(diff[:n].mean()), float(diff[n:].mean())] if n else None


def halves_text(split: list[float]) -> str:
    """`halves`' two means as printed: "halves -1.23 / +4.56"."""
    return "halves " + " / ".join(f"{h:+.2f}" for h in split)


def overlap(starts: torch.Tensor, length: int) -> dict[str, float | int]:
    """How far sequences of `length` jobs at `starts` (LongTensor[N]) are from independent: the
    distinct jobs they cover, that over `length` (at most that many independent stretches), and
    the jobs the earlier and later halves of `halves` share (0 when they are disjoint)."""
    ordered = starts.sort().values
    covered = int(ordered.diff().clamp(max=length).sum()) + length
    n = len(ordered) // 2
    shared = max(0, int(ordered[n - 1]) + length - int(ordered[n])) if n else 0
    return {"covered_jobs": covered, "independent_stretches": round(covered / length, 2),
            "halves_shared_jobs": shared}


def overlap_note(spread: dict, length: int, sequences: int, halves_shown: bool = True) -> str:
    """What `overlap`'s figures for `sequences` sequences mean for the CIs printed after them (and
    for the halves of each paired difference, when they are printed)."""
    if spread["covered_jobs"] == sequences * length:
        return f"covering {spread['covered_jobs']} jobs (the sequences share no job)"
    shared = f", sharing {spread['halves_shared_jobs']} jobs" if spread["halves_shared_jobs"] else ""
    halves_text = ("; a paired difference's halves, the earlier and the later half of the starts"
                   f"{shared}, show whether it holds across them") if halves_shown else ""
    return (f"covering {spread['covered_jobs']} jobs (at most {spread['covered_jobs'] / length:.1f} independent "
            "stretches: a CI over overlapping sequences measures how a mean moves with the start within these jobs, "
            f"not what another stretch of the log would give{halves_text})")


class TrainingNotes(NamedTuple):
    """What a checkpoint trained on, set against one evaluation (`training_notes`)."""

    notes: list[str]  # for this backfilling setting (e.g. trained with another)
    read_note: str | None  # on the sequences holding jobs its run read: the same for every setting
    read: int | None  # how many of the sequences hold such jobs; None when it never read this log


def training_notes(spec: str, log: QueueLog, starts: torch.Tensor, backfill: str,
                   record: QueueCheckpoint | None = None) -> TrainingNotes:
    """What checkpoint `spec` (its `record` when already read) trained on, set against an evaluation
    on the sequences `starts` of `log` with `backfill`. Nothing for a rule."""
    record = policy_record(spec) if record is None else record
    if record is None:
        return TrainingNotes([], None, None)
    logs, fraction, trained_backfill = record.trained_on()
    logs = [logs] if isinstance(logs, str) else logs  # a record may hold one log as a string
    if not isinstance(logs, (list, tuple)) or not all(isinstance(one, str) for one in logs):
        raise ConfigError(f"{spec}: its record of the logs it trained on is not a list of file names: {logs!r}")
    notes = []
    if trained_backfill not in (None, backfill):
        notes.append(f"note: {spec} trained with backfilling {trained_backfill}, runs here with {backfill}")
    name = Path(log.path).name
    stems = [log_stem(str(one).split(":")[0]) for one in logs]
    if log_stem(name) not in stems:  # gzipped or not: one log
        return TrainingNotes(notes, None, None)
    if isinstance(fraction, (list, tuple)):  # one share a log
        fraction = max(f for f, stem in zip(fraction, stems) if stem == log_stem(name))
    if not is_number(fraction) or not 0 < fraction <= 1:
        raise ConfigError(f"{spec}: the share of the log it trained on must be in (0, 1], got {fraction!r}")
    read = int((starts < log.jobs_before(fraction)).sum())  # a sequence [s, s + L) meets jobs [0, T) when s < T
    read_note = (f"note: {spec} trained on the first {fraction:.0%} of {name}'s jobs (a log of that file name, "
                 f"gzipped or not): {read} of these {len(starts)} sequences hold jobs it read") if read else None
    return TrainingNotes(notes, read_note, read)


def run_protocol(trace: str, protocol: str, policies: list[str], backfill: str = "off", sequences: int = SEQUENCES,
                 site=None, bsld_threshold: float = QueueConfig.bsld_threshold, device="cpu", versus: str | None = None,
                 echo=print, sequence_length: int = EVAL_LENGTH, nodes: int | None = None,
                 processors_per_node: int | None = None, oversize: str = "refuse",
                 said: set[str] | None = None) -> tuple[list[dict], dict[str, torch.Tensor]]:
    """Every policy of `policies` on `trace` (its cluster `nodes` x `processors_per_node` when given,
    else its header's; jobs larger than it refused or dropped as `oversize` says; rewritten as `site`,
    a queue.sites.SiteModel, when given) under `protocol`, on sequences of `sequence_length` jobs;
    prints a table through `echo` and returns one dict per policy (the metrics with 95% CIs over
    sequences, and, where a rule of RULES ran, the paired difference to the best of them, "best
    heuristic"; with `versus`, one of `policies`, also the paired difference to it) and each
    policy's per-sequence mean bounded slowdowns. A note on the sequences holding jobs a checkpoint
    read is the same for every backfilling setting: it is printed unless in `said` (one set for a run
    of several settings prints it once), and added to it."""
    if versus is not None and versus not in policies:
        raise ConfigError(f"--versus {versus!r} is not one of the policies evaluated ({', '.join(policies)})")
    require_distinct("--policy", list(policies))
    log = read_queue_log(trace, nodes, processors_per_node, oversize)
    if site is not None:
        log = site.apply(log)
    length = sequence_length
    cfg = log.config(sequence_length=length, backfill=backfill, bsld_threshold=bsld_threshold)
    records = {spec: policy_record(spec) for spec in policies}  # each file read once
    resolved = {spec: resolve(spec, cfg, device, record=records[spec]) for spec in policies}
    starts = protocol_starts(log, protocol, sequences, length)
    echo(log.describe())
    if log.offered_load() > OVERLOADED:
        echo(f"note: an offered load of {log.offered_load():.2f}: more work than the cluster could ever run, so its "
             "queue grows without end; is the cluster right? (a header with MaxNodes alone is read as nodes of one "
             "processor: give --processors_per_node)")
    spread = overlap(starts, length)
    fewer = f" (of {sequences} asked: the range has no more distinct starts)" \
        if protocol in ("heldout", "recent") and len(starts) < sequences else ""
    if protocol == "disjoint" and log.num_jobs > len(starts) * length:
        fewer = f" (the log's last {log.num_jobs - len(starts) * length} jobs left out: less than a sequence)"
    note = overlap_note(spread, length, len(starts), halves_shown=protocol != "rlscheduler")
    echo(f"protocol {protocol}: {len(starts)} sequences{fewer} of {length} jobs, backfill {backfill}, {note}; mean "
         "bounded slowdown (lower is better) ± 95% CI over sequences, minus the best of the rules given on these "
         "sequences; wait in seconds (lower is better); utilization (higher is better)")
    if protocol == "rlscheduler" and not rlschedulers_log(trace):
        echo(f"note: RLScheduler's protocol is its 10 start positions in the Lublin logs; on {Path(trace).name} "
             "they are positions only (--protocol heldout draws from the log's own last 20%)")
    trained = {spec: training_notes(spec, log, starts, backfill, records[spec]) for spec in policies}
    said = set() if said is None else said
    for one in trained.values():
        for note in one.notes:
            echo(note)
        if one.read_note and one.read_note not in said:
            echo(one.read_note)
            said.add(one.read_note)
    results = compare_queue(resolved, log, starts, device)
    if all(r.summary["mean_bounded_slowdown"] == 1.0 for r in results.values()):
        echo(f"note: every job's bounded slowdown is 1 under every policy (offered load {log.offered_load():.2f}: "
             f"no job waited, but for jobs shorter than the {bsld_threshold:g} s threshold a few seconds): nothing to "
             "compare; --load scales the arrivals to a load where jobs wait")
    rules = [name for name in results if name in RULES]
    best = min(rules, key=lambda n: results[n].summary["mean_bounded_slowdown"]) if rules else None
    lines, width = [], max(34, *(len(name) + 1 for name in results))  # long paths keep the columns aligned
    for name, result in results.items():
        s = result.summary
        line = {"policy": name, "trace": Path(trace).name, "protocol": protocol, "backfill": backfill, **s,
                **spread, "log": log.summary()}
        if trained[name].read is not None:
            line["sequences_with_training_jobs"] = trained[name].read
        bsld_ci = ci_text(s["mean_bounded_slowdown_ci95"], "8.2f")
        text = (f"{name:{width}s} bsld {s['mean_bounded_slowdown']:10.2f} ± {bsld_ci}  "
                f"wait {s['mean_wait']:10.0f} s  util {s['utilization']:.3f}")
        if best is not None and name != best:
            diff, ci = paired(result, results[best])
            line.update(best_heuristic=best, best_among=rules, minus_best_heuristic=diff, minus_best_heuristic_ci95=ci)
            text += f"  minus {best}: {diff:+.2f} ± {ci_text(ci, '.2f')} (paired 95% CI, {len(starts)} sequences"
            split = halves(difference(result, results[best]), starts) if protocol != "rlscheduler" else None
            if split is not None:  # consecutive starts: the range's two halves (they may share jobs: `spread`)
                line["minus_best_heuristic_halves"] = split
                text += "; " + halves_text(split)
            text += ")"
        if versus is not None and name != versus:
            diff, ci = paired(result, results[versus])
            line.update(versus=versus, minus_versus=diff, minus_versus_ci95=ci)
            split = halves(difference(result, results[versus]), starts) if protocol != "rlscheduler" else None
            if split is not None:
                line["minus_versus_halves"] = split
            if versus != best:
                text += f"  minus {versus}: {diff:+.2f} ± {ci_text(ci, '.2f')}" + (
                    "; " + halves_text(split) if split is not None else "")
        echo(text)
        lines.append(line)
    return lines, {name: r.sequences["mean_bounded_slowdown"] for name, r in results.items()}
