"""The analysis behind the figures and the selection scripts, each step once: sweeps over loads,
tables against the best heuristic, slowdown by job length, held-out workloads for adaptation, a
trace's held-out range, a run's logged curves, and the rule that picks a candidate (those that
finish every job first, then the best). Values in, plain values out (lists, dicts, (mean, 95% CI
half-width) pairs): no plotting and no command-line flags here."""
from __future__ import annotations

import copy
import csv
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from . import seeds
from .config import ClusterConfig, ConfigError
from .deeprm.objectives import METRICS
from .deeprm.rollout import Policy
from .evaluation import HIGHER_IS_BETTER, Comparison, EvalResult, compare, make_jobsets, mean_ci95
from .heuristics import make_heuristic
from .jobs import JobSet
from .learning.adaptation import AdaptationSettings, adapt
from .policies.acting import WAIT_RATE, Acting, NetworkPolicy, acting_modes
from .policies.checkpoints import load_network
from .policies.networks import make_policy
from .workloads import DeepRMWorkload

MeanCI = tuple[float, float]  # (mean over jobsets, 95% CI half-width)


# --- sweeps and tables against the best heuristic ---

def sweep_seeds(offset: int, count: int) -> list[int]:
    """The evaluation seeds of a sweep's `count` points: the i-th is seeds.evaluation(offset + i), so
    every point (and every figure, by its offset) has unseen jobsets of its own."""
    return [seeds.evaluation(offset + i) for i in range(count)]


def by_load(policies: Mapping[str, Policy], cfg: ClusterConfig, loads: Sequence[float], jobsets: int, offset: int,
            device="cpu", scaled: bool = False) -> Iterator[tuple[float, Comparison]]:
    """(load, Comparison of `policies` on `jobsets` unseen jobsets of DeepRM's workload at that load)
    for each of `loads`, the jobsets seeded by `sweep_seeds(offset, len(loads))`; `scaled`: the job
    mix scaled to `cfg`'s units (DeepRMWorkload.for_cluster)."""
    for load, seed in zip(loads, sweep_seeds(offset, len(loads))):
        workload = DeepRMWorkload.for_cluster(cfg, load=load) if scaled else DeepRMWorkload(load=load)
        yield load, compare(policies, cfg, make_jobsets(workload, jobsets, seed), device)


def table(case: Comparison, metrics: Sequence[str]) -> dict[str, dict[str, MeanCI]]:
    """{policy: {metric: (mean, ci)}} of every policy of `case`, in its order."""
    return {name: {m: case.mean_ci(name, m) for m in metrics} for name in case.results}


def versus_best(case: Comparison, name: str, heuristics: Sequence[str], slo: bool = False) -> dict:
    """`name`'s mean slowdown against the best of `heuristics` on `case`, paired over its jobsets:
    {"best_heuristic", "slowdown_minus_best", "ci95"}; with `slo` also "ratio_to_best" (of the means),
    "slo_minus_<h>" ((mean, ci) of the SLO hit rate minus each heuristic's) and "best_slo_heuristic"."""
    best = case.best(heuristics)
    diff, ci = case.minus(name, best)
    row = {"best_heuristic": best, "slowdown_minus_best": diff, "ci95": ci}
    if slo:
        row["ratio_to_best"] = case.mean_ci(name)[0] / case.mean_ci(best)[0]
        row.update({f"slo_minus_{h}": case.minus(name, h, "slo_hit_rate") for h in heuristics})
        row["best_slo_heuristic"] = case.best(heuristics, "slo_hit_rate")
    return row


@dataclass
class Sweep:
    """A sweep over loads (`sweep`): every policy's metrics at each load, and each learned policy
    against the best heuristic at each load."""

    values: dict[str, dict[float, dict[str, MeanCI]]]  # {policy: {load: {metric: (mean, ci)}}}
    versus_best: dict[str, dict[str, dict]]  # {learned policy: {str(load): versus_best's row}}

    def metric(self, metric: str) -> dict[str, dict[float, MeanCI]]:
        """{policy: {load: (mean, ci) of `metric`}}."""
        return {name: {load: row[metric] for load, row in by_load.items()} for name, by_load in self.values.items()}


def sweep(policies: Mapping[str, Policy], cfg: ClusterConfig, loads: Sequence[float], jobsets: int, offset: int,
          metrics: Sequence[str] = ("mean_slowdown",), learned: Sequence[str] = (), heuristics: Sequence[str] = (),
          slo: bool = False, scaled: bool = False, device="cpu",
          report: Callable[[float, Comparison, dict[str, dict]], None] | None = None) -> Sweep:
    """`by_load`'s cases as a Sweep: each policy's `metrics`, and each of `learned` against the best
    of `heuristics` (`versus_best`, with `slo`); `report(load, case, {learned: row})` sees each load."""
    result = Sweep({name: {} for name in policies}, {name: {} for name in learned})
    for load, case in by_load(policies, cfg, loads, jobsets, offset, device, scaled):
        for name, row in table(case, metrics).items():
            result.values[name][load] = row
        rows = {name: versus_best(case, name, heuristics, slo) for name in learned}
        for name, row in rows.items():
            result.versus_best[name][str(load)] = row
        if report is not None:
            report(load, case, rows)
    return result


def slowdown_quantiles(result: EvalResult) -> tuple[torch.Tensor, dict[str, float]]:
    """(every finished job's slowdown: DoubleTensor[jobs], {"jobs", "share_slowdown_le_2", "median",
    "p90", "p99", "mean_slowdown"}): the per-job slowdown distribution of one policy's evaluation."""
    values = result.job_slowdown[~torch.isnan(result.job_slowdown)]
    q = torch.quantile(values, torch.tensor([0.5, 0.9, 0.99], dtype=values.dtype))
    return values, {"jobs": values.numel(), "share_slowdown_le_2": float((values <= 2).double().mean()),
                    "median": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
                    "mean_slowdown": result.summary["mean_slowdown"]}


# --- where the gains come from (DeepRM section 5.3) ---

def slowdown_by_length(result: EvalResult) -> dict[int, MeanCI]:
    """{job length: (mean, ci)} over jobsets of each jobset's mean slowdown of its jobs of that
    length (a jobset without such a job is left out of that length's mean), lengths ascending."""
    by_length = {}
    for length in sorted(set(result.job_duration[result.job_duration > 0].tolist())):
        per_jobset = torch.stack([row[d == length].mean() if bool((d == length).any()) else torch.tensor(float("nan"))
                                  for row, d in zip(result.job_slowdown, result.job_duration)])
        by_length[length] = mean_ci95(per_jobset)
    return by_length


def offered_lengths(jobs: JobSet) -> dict[int, int]:
    """{job length: how many jobs of `jobs` (JobSet [N, L]) have it}, in order of first appearance."""
    offered: dict[int, int] = {}
    for length in jobs.duration[jobs.duration > 0].tolist():
        offered[length] = offered.get(length, 0) + 1
    return offered


class Withholding:
    """A policy that acts as `policy` and counts, by length, the slot jobs that fit now
    (slot_offset 0) at each decision where it voids: what it leaves waiting while it could run."""

    def __init__(self, policy: Policy, cfg: ClusterConfig):
        self.policy, self.void = policy, cfg.num_slots
        self.counts: dict[int, int] = {}  # {job length: decisions it waited at}

    def __call__(self, obs):
        obs = self.policy(obs)
        fits = (obs["slot_offset"] == 0) & (obs["action"] == self.void).unsqueeze(1)  # BoolTensor[B, M]
        for length, count in zip(*torch.unique(obs["slot_duration"][fits], return_counts=True)):
            self.counts[int(length)] = self.counts.get(int(length), 0) + int(count)
        return obs


# --- held-out workloads for the adaptation figures ---

# Each outside configs/base/maml.yaml's meta-training ranges (load 0.4..1.0, short_prob 0.7..0.9,
# short jobs 1..(2-3), long (10-11)..(12-15), dominant 4-5..8-10).
HELD_OUT = {
    "heavy load 1.5": dict(load=1.5),
    "long-job mix (short_prob 0.5)": dict(load=0.9, short_prob=0.5),
    "small demands (dominant 2..4)": dict(load=0.9, dominant_units=(2, 4)),
    "medium jobs (long 5..8)": dict(load=0.9, long_len=(5, 8)),
}
ADAPT_EVAL_STEPS = {0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 40, 50}


@dataclass
class HeldOut:
    """One held-out workload: adapt on `workload`, measure on `eval_jobs` (JobSet [N, L], unseen)."""

    label: str
    cfg: ClusterConfig
    workload: object
    eval_jobs: JobSet
    heuristics: dict[str, MeanCI]  # {heuristic: (mean, ci) of the metric on eval_jobs}


def held_out_workloads(cfg: ClusterConfig, heuristics: Callable[[ClusterConfig], Mapping[str, Policy]],
                       eval_jobsets: int, metric: str, device="cpu",
                       extra: Sequence[tuple[str, ClusterConfig, object, object]] = ()) -> Iterator[HeldOut]:
    """HELD_OUT's DeepRM job mixes on `cfg`, then each `extra` (label, cluster, workload to adapt on,
    workload to measure on), with `eval_jobsets` unseen jobsets and the heuristics' `metric` on them;
    `heuristics(cluster)` makes them anew per workload, so random's line does not depend on those before."""
    panels = [(label, cfg, DeepRMWorkload(**params), DeepRMWorkload(**params)) for label, params in HELD_OUT.items()]
    for label, panel_cfg, workload, held_out in [*panels, *extra]:
        eval_jobs = make_jobsets(held_out, eval_jobsets, seeds.evaluation())
        case = compare(heuristics(panel_cfg), panel_cfg, eval_jobs, device)
        yield HeldOut(label, panel_cfg, workload, eval_jobs, {h: case.mean_ci(h, metric) for h in case.results})


def curve(summaries: Sequence[dict], metric: str) -> dict[int, MeanCI]:
    """{step: (mean, ci) of `metric`} of adaptation.adapt's summaries."""
    return {s["step"]: (s[metric], s[metric + "_ci95"]) for s in summaries}


def first_step_at_or_below(summaries: Sequence[dict], metric: str, threshold: float) -> int | None:
    """The first step of adaptation.adapt's summaries whose mean `metric` is <= `threshold` (None: never)."""
    return next((s["step"] for s in summaries if s[metric] <= threshold), None)


class AdaptationStarts:
    """The networks an adaptation figure fine-tunes: checkpoints by name ({name: path}), each acting
    as its record says, and with `fresh` a new network of the first one's spec (seeded with `seed`)
    that acts and adapts as the first one. `cfg`: the first one's cluster, with `objective` if given."""

    def __init__(self, paths: Mapping[str, str], device="cpu", objective: str | None = None,
                 fresh: str | None = None, seed: int = 0):
        self.paths, self.device, self.fresh, self.seed = dict(paths), device, fresh, seed
        self.loaded = {name: load_network(path, device) for name, path in self.paths.items()}
        self.first, cfg, self.first_record = next(iter(self.loaded.values()))
        self.cfg = cfg if objective is None else cfg.replace(objective=objective)

    def on(self, cfg: ClusterConfig) -> dict[str, tuple[torch.nn.Module, Acting]]:
        """{name: (network on `cfg`'s cluster, its Acting)}: a slot policy runs on any size."""
        on = self.loaded if cfg == self.cfg else {
            name: load_network(path, self.device, cluster=cfg) for name, path in self.paths.items()}
        starts = {name: (net, record.acting) for name, (net, _, record) in on.items()}
        if self.fresh is not None:
            torch.manual_seed(self.seed)
            starts[self.fresh] = (make_policy(self.first.spec, cfg).to(self.device), self.first_record.acting)
        return starts

    def settings(self, steps: int, jobsets: int, episodes: int, lr: float, optimizer: str
                 ) -> dict[str, AdaptationSettings]:
        """{name: AdaptationSettings}: the same steps and samples for every start; a meta-policy adapts
        with the inner loop it was meta-trained for (optimizer, lr, learned step sizes), a policy with
        none with `optimizer` and `lr`; the fresh network as the first checkpoint."""
        records = {name: record for name, (_, _, record) in self.loaded.items()}
        if self.fresh is not None:
            records[self.fresh] = self.first_record
        return {name: AdaptationSettings.from_checkpoint(
                    record.adaptation, steps, jobsets=jobsets, episodes=episodes,
                    **({} if record.adaptation else {"lr": lr, "optimizer": optimizer}))
                for name, record in records.items()}


@dataclass
class AdaptationRuns:
    """Adaptation curves on held-out workloads (`adapt_on_held_out`), keyed by HeldOut.label."""

    curves: dict[str, dict[str, dict[int, MeanCI]]] = field(default_factory=dict)  # {label: {start: {step: ...}}}
    heuristics: dict[str, dict[str, MeanCI]] = field(default_factory=dict)  # {label: HeldOut.heuristics}
    clusters: dict[str, dict] = field(default_factory=dict)  # {label: ClusterConfig.to_dict()}
    # {label: {start: first step at or below the reference heuristic's mean}}, with a reference
    first_step: dict[str, dict[str, int | None]] = field(default_factory=dict)


def adapt_on_held_out(panels: Iterable[HeldOut], starts: Callable[[ClusterConfig], Mapping[str, tuple]],
                      settings: Mapping[str, AdaptationSettings], metric: str, eval_steps: set[int], seed: int = 0,
                      device="cpu", reference: str | None = None,
                      report: Callable[[HeldOut, str, dict[int, MeanCI], int | None], None] | None = None
                      ) -> AdaptationRuns:
    """Fine-tune a copy of each of `starts(panel.cfg)` ({name: (network, the Acting it is measured in)},
    networks on that cluster) on each panel's workload with `settings[name]`, measured on its
    eval_jobs after `eval_steps` (adaptation.adapt, `seed`); with `reference` (a heuristic of the
    panels) also the first step at or below its mean `metric`. `report(panel, name, curve, first
    step)` sees each curve as it is done."""
    runs = AdaptationRuns()
    for panel in panels:
        label, runs.heuristics[panel.label] = panel.label, panel.heuristics
        runs.curves[label], runs.clusters[label] = {}, panel.cfg.to_dict()
        for name, (net, acting) in starts(panel.cfg).items():
            summaries = adapt(copy.deepcopy(net), panel.cfg, panel.workload, settings[name], panel.eval_jobs,
                              seed=seed, device=device, acting=acting, eval_steps=eval_steps)
            runs.curves[label][name] = curve(summaries, metric)
            first = None
            if reference is not None:
                first = first_step_at_or_below(summaries, metric, panel.heuristics[reference][0])
                runs.first_step.setdefault(label, {})[name] = first
            if report is not None:
                report(panel, name, runs.curves[label][name], first)
    return runs


# --- a real trace's held-out range ---



def trace_case(report, jobs: JobSet, case: Comparison) -> dict:
    """One trace setting: its TraceReport's split (load, steps, seconds, jobs, window starts, max
    jobs), how its windows start (from the log's state or empty) and what they carried from the log
    (running jobs outside the metrics, running jobs left out as overfilling the cluster, waiting
    jobs), the jobs in `jobs` (JobSet [N, L], cut from it), and each policy of `case` on them:
    METRICS as [mean, ci] and its unfinished jobs."""
    return {**{k: getattr(report, k) for k in ("split_load", "split_steps", "split_seconds", "split_jobs",
                                               "window_starts", "max_jobs", "start_state", "carried")},
            "jobs_in_jobsets": int(jobs.num_jobs.sum()),
            "results": {name: {**{m: list(case.mean_ci(name, m)) for m in METRICS},
                               "unfinished_jobs": result.summary["unfinished_jobs"]}
                        for name, result in case.results.items()}}


def trace_mapping(report) -> dict:
    """How a TraceReport's log became jobs: the file, its lines kept, dropped and clipped, the
    resources and capacity, seconds a step and the load the log offers."""
    return {k: getattr(report, k) for k in ("path", "format", "job_lines", "kept", "dropped", "clipped", "resources",
                                            "zero_demand_resources", "capacity", "seconds_per_step", "natural_load")}


# --- a run's logged curves (CSVLogger's metrics.csv) ---

def read_metrics(paths: Sequence) -> list[dict]:
    """The rows of CSVLogger metrics files, in order (a resumed run has several)."""
    rows = []
    for path in paths:
        with open(path) as f:
            reader = csv.DictReader(f)
            if "step" not in (reader.fieldnames or ()):
                raise ConfigError(f"{path}: not a run's metrics.csv (CSVLogger's: no 'step' column)")
            rows.extend(reader)
    return rows


def last_per_step(rows: list[dict], key: str) -> list[dict]:
    """Rows holding `key`, one per step, by step; the last wins (a resumed run repeats the steps
    after its checkpoint)."""
    return sorted({int(r["step"]): r for r in rows if r.get(key)}.values(), key=lambda r: int(r["step"]))


def heuristic_lines(rows: list[dict], heuristics: Sequence[str]) -> dict[str, float]:
    """Each of `heuristics`' validation slowdown in the run's last validation (those it logged)."""
    evals = last_per_step(rows, "eval/mean_slowdown")
    return {h: float(evals[-1][f"eval/{h}/mean_slowdown"]) for h in heuristics
            if evals and evals[-1].get(f"eval/{h}/mean_slowdown")}


def shared_heuristic_lines(runs: dict[str, list[dict]], heuristics: Sequence[str]) -> dict[str, float]:
    """heuristic_lines of several runs ({run: metric rows}), which must agree: one line per heuristic on
    one axis is only right for runs validated on the same jobsets (a heuristic is deterministic there)."""
    lines, source = {}, {}
    for run, rows in runs.items():
        for name, value in heuristic_lines(rows, heuristics).items():
            if name in lines and not math.isclose(lines[name], value, rel_tol=1e-6):
                raise ConfigError(f"runs {source[name]} and {run} validate on different jobsets ({name} "
                                  f"{lines[name]:.4g} vs {value:.4g}): draw runs of one workload together")
            lines.setdefault(name, value)
            source.setdefault(name, run)
    return lines


def validation_curve(rows: list[dict]) -> dict:
    """A run's validation against iterations and wall time: {"iteration", "wall_s" (the iterations'
    seconds up to each validation), "slowdown", "slo_hit_rate": lists, one per validation;
    "median_iteration_s"}."""
    seconds = {int(r["step"]): float(r["perf/iteration_s"]) for r in last_per_step(rows, "perf/iteration_s")}
    evals = last_per_step(rows, "eval/mean_slowdown")
    return {"iteration": [int(r["step"]) + 1 for r in evals],
            "wall_s": [sum(v for k, v in seconds.items() if k <= int(r["step"])) for r in evals],
            "slowdown": [float(r["eval/mean_slowdown"]) for r in evals],
            "slo_hit_rate": [float(r["eval/slo_hit_rate"]) for r in evals],
            "median_iteration_s": sorted(seconds.values())[len(seconds) // 2]}


def run_title(metrics: str) -> str:
    """A learning curve's default title: the run folder of `metrics` (its metrics.csv) and what its
    config.yaml says: the module, the workload's load, the validation jobsets."""
    run = Path(metrics).parent
    config = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else None
    if not isinstance(config, dict):
        return f"learning curve of {run}"
    model = config.get("model") or {}
    init = model.get("init_args") or {}
    workload = init.get("workload") or {}
    workload = workload.get("init_args", workload) if isinstance(workload, dict) else {}
    parts = [str(model.get("class_path", "a module")).rsplit(".", 1)[-1]]
    if workload.get("load") is not None:
        parts.append(f"load {workload['load']}")
    if (init.get("evaluation") or {}).get("val_jobsets"):
        parts.append(f"validation on {init['evaluation']['val_jobsets']} jobsets")
    return f"{run.name}: " + ", ".join(parts)


# what learning_curve's steps count (its JSON says so): iterations done, as a checkpoint's name
# (best-25.ckpt: after 25), not the 0-based step an iteration logs its rows at
ITERATIONS_DONE = "iterations done"


def learning_curve(rows: list[dict], source: Sequence = ("metrics",)) -> dict[str, list]:
    """A run's validation slowdown and its training episodes' slowdown, mean and max total reward,
    each by the iterations done when logged (ITERATIONS_DONE), and each iteration's seconds: lists
    (DeepRM Figure 6's numbers). ConfigError naming `source` (the files read) when no row holds
    either curve: a figure of empty axes would look like a run that learned nothing."""
    evals = last_per_step(rows, "eval/mean_slowdown")
    train = last_per_step(rows, "train/mean_return")
    if not evals and not train:
        logged = sorted({k for r in rows for k, v in r.items() if v and k.startswith(("eval/", "train/"))})
        raise ConfigError(f"{', '.join(map(str, source))}: no row holds eval/mean_slowdown or train/mean_return "
                          f"(what DeepRM's modules log); logged: {', '.join(logged[:6]) or 'no eval/ or train/ value'}"
                          + (", ..." if len(logged) > 6 else ""))
    return {"eval_step": [int(r["step"]) + 1 for r in evals],
            "eval_mean_slowdown": [float(r["eval/mean_slowdown"]) for r in evals],
            "train_step": [int(r["step"]) + 1 for r in train],
            "train_mean_slowdown": [float(r["train/mean_slowdown"]) for r in train],
            "mean_return": [float(r["train/mean_return"]) for r in train],
            "max_return": [float(r["train/max_return"]) for r in train],
            "iteration_s": [float(r["perf/iteration_s"]) for r in last_per_step(rows, "perf/iteration_s")]}


# --- picking one candidate ---

def finishers_first(scores: Mapping[str, float], unfinished: Mapping[str, int], higher_is_better: bool) -> str:
    """The candidate with the best score among those that left no job unfinished (all of them when
    none did); the first in `scores`' order on ties. A policy that leaves jobs waiting until
    max_time can score well on the jobs it finishes, so it wins only when every candidate does."""
    eligible = [name for name in scores if not unfinished[name]] or list(scores)
    return (max if higher_is_better else min)(eligible, key=scores.get)


def select_acting(net: torch.nn.Module, cfg: ClusterConfig, jobs: JobSet, metric: str = "mean_slowdown",
                  seed: int = 0, device="cpu", wait_rate: float = WAIT_RATE) -> tuple[Acting, dict[str, float]]:
    """The acting mode of `acting_modes(wait_rate)` under which `net` scores best by `metric` on
    `jobs` (JobSet [N, L]; selection jobsets, never the ones it is then evaluated on), by
    `finishers_first`; and each mode's mean score by its name (str).

    Whether holding capacity idle pays depends on the load (it wins under contention and costs
    where jobs rarely queue), so the mode is chosen on the workload the policy will serve."""
    modes = {str(mode): mode for mode in acting_modes(wait_rate)}
    results = compare({name: NetworkPolicy(net, mode, torch.Generator(device=device).manual_seed(seed))
                       for name, mode in modes.items()}, cfg, jobs, device=device)
    scores = {name: results.mean_ci(name, metric)[0] for name in modes}
    unfinished = {name: results.results[name].summary["unfinished_jobs"] for name in modes}
    return modes[finishers_first(scores, unfinished, metric in HIGHER_IS_BETTER)], scores


@dataclass
class Selection:
    """Candidates scored against the best heuristic at each load (`select_by_worst_load`)."""

    scores: dict[str, dict[float, float]]  # {candidate: {load: score}}
    unfinished: dict[str, int]  # {candidate: jobs left waiting at max_time, over all loads}
    worst: dict[str, float]  # {candidate: its worst score over the loads}
    winner: str


def score_against(value: float, best: float, metric: str) -> float:
    """A policy's `metric` against the best heuristic's: the ratio for a metric where lower is better,
    the difference in percentage points for one where higher is (an SLO hit rate)."""
    return 100 * (value - best) if metric in HIGHER_IS_BETTER else value / best


def select_by_worst_load(candidates: Callable[[], Mapping[str, Policy]], cfg: ClusterConfig,
                         heuristics: Sequence[str], loads: Sequence[float], jobsets: int, seed: int,
                         metric: str = "mean_slowdown",
                         report: Callable[[float, float, dict[str, float]], None] | None = None) -> Selection:
    """Score each of `candidates()` (made anew at each load, so a sampled policy's actions at one load
    do not depend on the loads before) at each of `loads` on `jobsets` jobsets of DeepRM's workload
    scaled to `cfg` (seeded by seeds.selection(load, seed): a subset of the loads sees the same
    jobsets), by `score_against` the best of `heuristics`; the winner is the one whose worst load is
    best, by `finishers_first`. `report(load, best heuristic's metric, {candidate: score})` sees each load."""
    scores: dict[str, dict[float, float]] = {}
    unfinished: dict[str, int] = {}
    for load in loads:
        workload = DeepRMWorkload.for_cluster(cfg, load=load)
        workload.validate(cfg)
        jobs = make_jobsets(workload, jobsets, seeds.selection(load, seed))
        reference = compare({h: make_heuristic(h, cfg) for h in heuristics}, cfg, jobs)
        best, _ = reference.mean_ci(reference.best(metric=metric), metric)
        for name, result in compare(candidates(), cfg, jobs).results.items():
            scores.setdefault(name, {})[load] = score_against(result.summary[metric], best, metric)
            unfinished[name] = unfinished.get(name, 0) + result.summary["unfinished_jobs"]
        if report is not None:
            report(load, best, {name: s[load] for name, s in scores.items()})
    higher = metric in HIGHER_IS_BETTER
    worst = {name: (min if higher else max)(s.values()) for name, s in scores.items()}
    return Selection(scores, unfinished, worst, finishers_first(worst, unfinished, higher))
