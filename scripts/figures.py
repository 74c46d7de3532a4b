"""Regenerate the figures in docs/figures/ (each also writes its numbers as JSON beside it).

    python scripts/figures.py load_sweep [--ckpt NAME=PATH ...] [--jobsets 200]

load_sweep: mean slowdown vs load 0.1..1.9 (DeepRM Figure 4) and SLO hit rate vs load, heuristics
and any checkpoints, 200 unseen jobsets a point, 95% CIs over jobsets; each checkpoint's paired
difference to the best heuristic at each load in the JSON.

    python scripts/figures.py ablation --ckpt deeprm=A.ckpt "+ mask=B.ckpt" ... [--loads 0.7 1.1 1.5]
    python scripts/figures.py cdf --ckpt RL=A.ckpt [--loads 0.9 1.3]
    python scripts/figures.py recipes --runs deeprm=runs/a/version_0/metrics.csv upgraded=runs/b/...

ablation: each recipe's mean slowdown and SLO hit rate at a few loads. cdf: per-job slowdown CDF
per scheme. recipes: validation curves of runs against iterations and against wall time.

    python scripts/figures.py trace [--trace PATH] [--compressions 1 2] [--jobsets 200]

trace: heuristics on a real trace's held-out (test) time range, as recorded and time-compressed
(docs/traces.md; default: the NASA iPSC/860 log in ../shared/traces).

    python scripts/figures.py objectives --ckpt slowdown=A.ckpt completion_time=B.ckpt [--load 1.3]

objectives: policies trained for different objectives and the heuristics, on both metrics (DeepRM Figure 5).

    python scripts/figures.py learning_curve --metrics runs/deeprm_slowdown/version_0/metrics.csv

learning_curve: a run's validation slowdown per iteration with the heuristics' lines, and the mean
and max total reward of its training episodes (DeepRM Figure 6); the curve's numbers are kept
in docs/figures/learning_curve.json.

    python scripts/figures.py gains --ckpt RL=checkpoints/reinforce_slowdown.ckpt [--load 0.7]

gains: lengths of the jobs the policy leaves waiting while they fit, and slowdown by job length
against Tetris (DeepRM section 5.3, "where the gains come from").

    python scripts/figures.py adaptation --ckpt maml=checkpoints/maml.ckpt mixture=checkpoints/reinforce_mixture.ckpt

adaptation: on held-out workloads outside the meta-training ranges, the objective on unseen
jobsets vs adaptation steps for the meta-policy, the mixture-trained policy and a fresh network,
each with the same steps and episodes (a meta-policy with its own inner loop, the others with
--optimizer/--lr), with heuristic lines; and the first step at which each beats Tetris.

    python scripts/figures.py headroom [--ckpt checkpoints/reinforce_mixture_masked.ckpt --steps 300]

headroom: one checkpoint fine-tuned long on the same held-out workloads and jobsets (how far
fine-tuning goes at all).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import ROOT, set_threads

from lightning_sched import ClusterConfig, DeepRMWorkload, seeds
from lightning_sched.evaluation import evaluate, make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.plots import slowdown_vs_load

FIGURES = ROOT / "docs" / "figures"
LOADS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9]


def named_policies(cfg: ClusterConfig, heuristics: list[str], ckpts: list[str], device: str):
    import torch

    policies = {h: make_heuristic(h, cfg, **({"generator": torch.Generator().manual_seed(0)} if h == "random" else {}))
                for h in heuristics}
    for item in ckpts:
        name, _, path = item.partition("=")
        from lightning_sched.policies import load_policy

        policies[name], _ = load_policy(path, device=device)  # acting as the checkpoint says
    return policies


def load_sweep(args) -> None:
    """Mean slowdown and SLO hit rate vs load for heuristics and checkpoints; for each checkpoint,
    the paired difference to the best heuristic at each load."""
    from lightning_sched.evaluation import paired_difference

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    metrics = ("mean_slowdown", "slo_hit_rate")
    results = {m: {name: {} for name in policies} for m in metrics}
    versus_best: dict[str, dict[str, dict]] = {name.partition("=")[0]: {} for name in args.ckpt}
    for i, load in enumerate(args.loads):
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, seeds.EVALUATION + i)
        line, evals = [f"load {load:.1f}"], {}
        for name, policy in policies.items():
            evals[name] = evaluate(policy, cfg, jobs, device=args.device)
            s = evals[name].summary
            for m in metrics:
                results[m][name][load] = (s[m], s[m + "_ci95"])
            line.append(f"{name} {s['mean_slowdown']:.3f}±{s['mean_slowdown_ci95']:.3f} slo {s['slo_hit_rate']:.3f}")
        best = min(args.heuristics, key=lambda h: evals[h].summary["mean_slowdown"])
        best_slo = max(args.heuristics, key=lambda h: evals[h].summary["slo_hit_rate"])
        for name in versus_best:
            diff, ci = paired_difference(evals[name], evals[best])
            versus_best[name][str(load)] = {"best_heuristic": best, "slowdown_minus_best": diff, "ci95": ci,
                                            "ratio_to_best": evals[name].summary["mean_slowdown"] / evals[best].summary["mean_slowdown"]}
            for h in args.heuristics:  # SLO hit rate minus each heuristic's, paired over jobsets
                slo, slo_ci = paired_difference(evals[name], evals[h], "slo_hit_rate")
                versus_best[name][str(load)][f"slo_minus_{h}"] = (slo, slo_ci)
            versus_best[name][str(load)]["best_slo_heuristic"] = best_slo
            line.append(f"{name}-{best} {diff:+.3f}±{ci:.3f}")
        print("  ".join(line), flush=True)
    out = Path(args.out or FIGURES / "slowdown_vs_load.png")
    data = {"jobsets": args.jobsets, "seed": seeds.EVALUATION,
            "results": {n: {str(l): v for l, v in r.items()} for n, r in results["mean_slowdown"].items()},
            "slo_hit_rate": {n: {str(l): v for l, v in r.items()} for n, r in results["slo_hit_rate"].items()},
            "versus_best_heuristic": versus_best}
    _save(slowdown_vs_load(results["mean_slowdown"], f"Mean slowdown vs load ({args.jobsets} unseen jobsets a point)"),
          out, data)
    slo = slowdown_vs_load(results["slo_hit_rate"], f"SLO hit rate (slowdown <= {cfg.slo_slowdown:g}) vs load, "
                           f"{args.jobsets} jobsets a point", ylabel="share of jobs meeting their deadline")
    slo_out = out.with_name(out.stem.replace("slowdown", "slo") + ".png")
    slo.savefig(slo_out, dpi=120)  # its numbers are in the JSON above
    print(f"wrote {slo_out}")


def ablation(args) -> None:
    """Mean slowdown and SLO hit rate of each recipe's checkpoint (and heuristics) at a few loads."""
    from lightning_sched.plots import ablation as plot

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    metrics = {"mean_slowdown": "mean slowdown", "slo_hit_rate": f"SLO hit rate (slowdown <= {cfg.slo_slowdown:g})"}
    values = {name: {} for name in policies}
    for i, load in enumerate(args.loads):
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, seeds.EVALUATION + 100 + i)
        for name, policy in policies.items():
            s = evaluate(policy, cfg, jobs, device=args.device).summary
            values[name][load] = {m: (s[m], s[m + "_ci95"]) for m in metrics}
            print(f"load {load:.1f} {name:28s} slowdown {s['mean_slowdown']:.3f}±{s['mean_slowdown_ci95']:.3f}  "
                  f"slo {s['slo_hit_rate']:.3f}±{s['slo_hit_rate_ci95']:.3f}", flush=True)
    fig = plot(values, metrics, title=f"{args.title} ({args.jobsets} unseen jobsets a load, 95% CI)")
    _save(fig, Path(args.out or FIGURES / "ablation.png"),
          {"jobsets": args.jobsets, "seeds": [seeds.EVALUATION + 100 + i for i in range(len(args.loads))],
           "results": {n: {str(l): v for l, v in r.items()} for n, r in values.items()}})


def cdf(args) -> None:
    """Per-job slowdown CDF per scheme at a few loads (DeepRM's code's slow_down_cdf)."""
    import torch

    from lightning_sched.plots import cdf_panels

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    panels, data = {}, {}
    for i, load in enumerate(args.loads):
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, seeds.EVALUATION + 200 + i)
        panel, data[str(load)] = {}, {}
        for name, policy in policies.items():
            result = evaluate(policy, cfg, jobs, device=args.device)
            values = result.job_slowdown[~torch.isnan(result.job_slowdown)]
            panel[name] = values
            q = torch.quantile(values, torch.tensor([0.5, 0.9, 0.99], dtype=values.dtype))
            data[str(load)][name] = {"jobs": values.numel(), "share_slowdown_le_2": float((values <= 2).double().mean()),
                                     "median": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
                                     "mean_slowdown": result.summary["mean_slowdown"]}
            print(f"load {load:.1f} {name:24s} " + " ".join(f"{k} {v:.3f}" for k, v in data[str(load)][name].items()), flush=True)
        panels[f"load {load:g} ({args.jobsets} unseen jobsets)"] = panel
    _save(cdf_panels(panels, "Per-job slowdown CDF (dotted: the SLO, slowdown 2)"), Path(args.out or FIGURES / "slowdown_cdf.png"),
          {"jobsets": args.jobsets, "seeds": [seeds.EVALUATION + 200 + i for i in range(len(args.loads))], "results": data})


def recipes(args) -> None:
    """Validation curves of several runs on the same axes, against iterations and wall time."""
    from lightning_sched.plots import recipe_curves

    curves, reference = {}, {}
    for item in args.runs:
        name, _, path = item.partition("=")
        rows = read_metrics(path.split(","))
        seconds = {int(r["step"]): float(r["perf/iteration_s"]) for r in last_per_step(rows, "perf/iteration_s")}
        evals = last_per_step(rows, "eval/mean_slowdown")
        wall = [sum(v for k, v in seconds.items() if k <= int(r["step"])) for r in evals]
        curves[name] = {"iteration": [int(r["step"]) + 1 for r in evals], "wall_s": wall,
                        "slowdown": [float(r["eval/mean_slowdown"]) for r in evals],
                        "slo_hit_rate": [float(r["eval/slo_hit_rate"]) for r in evals],
                        "median_iteration_s": sorted(seconds.values())[len(seconds) // 2], "metrics": path}
        reference.update(heuristic_lines(evals, args.heuristics))
        print(name, "best", min(curves[name]["slowdown"]), "median s/iteration", curves[name]["median_iteration_s"])
    _save(recipe_curves(curves, reference, args.title), Path(args.out or FIGURES / "recipe_learning_curves.png"),
          {"curves": curves, "heuristics": reference})


NASA_TRACE = ROOT.parent / "shared" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"  # never copied into the repo


def trace(args) -> None:
    """Heuristics (and any checkpoints) on a real trace's held-out time range, as recorded and time-compressed."""
    import sys

    from lightning_sched.plots import trace_heuristics
    from lightning_sched.traces import TraceWorkload, parse_capacity

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    metrics = ("mean_slowdown", "mean_completion_time", "makespan", "utilization", "slo_hit_rate")
    settings, values, cdf, mapping = {}, {}, None, None
    for compression in args.compressions:
        workload = TraceWorkload.for_cluster(
            cfg, args.trace, args.seconds_per_step, capacity=parse_capacity(args.capacity), oversize=args.oversize,
            split=args.split, test_fraction=args.test_fraction, simu_len=args.simu_len, time_compression=compression)
        report = workload.report
        jobs = make_jobsets(workload, args.jobsets, seeds.EVALUATION)
        label = f"x{compression:g} (load {max(report['split_load']):.2f})" if compression != 1 else \
            f"as recorded (load {max(report['split_load']):.2f})"
        settings[label] = {"time_compression": compression, "split_load": report["split_load"],
                           "split_steps": report["split_steps"], "split_seconds": report["split_seconds"],
                           "split_jobs": report["split_jobs"], "window_starts": report["window_starts"],
                           "max_jobs": report["max_jobs"], "jobs_in_jobsets": int(jobs.num_jobs.sum()), "results": {}}
        mapping = mapping or {k: report[k] for k in ("path", "format", "job_lines", "kept", "dropped", "clipped", "resources",
                                                     "zero_demand_resources", "capacity", "seconds_per_step", "natural_load")}
        values[label] = {}
        slowdowns = {}
        line = [label]
        for name, policy in policies.items():
            result = evaluate(policy, cfg, jobs, device=args.device)
            s = result.summary
            settings[label]["results"][name] = {m: [s[m], s[m + "_ci95"]] for m in metrics}
            settings[label]["results"][name]["unfinished_jobs"] = s["unfinished_jobs"]
            values[label][name] = (s["mean_slowdown"], s["mean_slowdown_ci95"])
            slowdowns[name] = result.job_slowdown.flatten()
            line.append(f"{name} {s['mean_slowdown']:.3f}±{s['mean_slowdown_ci95']:.3f}")
        cdf = cdf or slowdowns
        print("  ".join(line), flush=True)
    name = Path(args.trace).name.split(".")[0]
    fig = trace_heuristics(values, cdf, title=f"{name}, {args.split} split: {args.jobsets} windows of "
                                              f"{args.simu_len} x {args.seconds_per_step:g} s (95% CI over windows)")
    out = Path(args.out or FIGURES / "trace_nasa.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    out.with_suffix(".json").write_text(json.dumps(
        {"command": "python scripts/figures.py " + " ".join(sys.argv[1:]), "jobsets": args.jobsets, "seed": seeds.EVALUATION,
         "split": args.split, "test_fraction": args.test_fraction, "simu_len": args.simu_len, "oversize": args.oversize,
         "cluster": cfg.to_dict(), "mapping": mapping, "settings": settings}, indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}")


def _save(fig, out: Path, data: dict) -> None:
    import sys

    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    out.with_suffix(".json").write_text(json.dumps({"command": "python scripts/figures.py " + " ".join(sys.argv[1:]),
                                                    **data}, indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}")


def objectives(args) -> None:
    """Heuristics and policies trained for different objectives, each measured on both metrics."""
    from lightning_sched.plots import bars

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    jobs = make_jobsets(DeepRMWorkload(load=args.load), args.jobsets, seeds.EVALUATION)
    metrics = {"mean_slowdown": "mean slowdown", "mean_completion_time": "mean completion time"}
    values = {}
    for name, policy in policies.items():
        s = evaluate(policy, cfg, jobs, device=args.device).summary
        values[name] = {m: (s[m], s[m + "_ci95"]) for m in metrics}
        print(name, "  ".join(f"{m} {s[m]:.3f}±{s[m + '_ci95']:.3f}" for m in metrics), flush=True)
    fig = bars(values, metrics, title=f"load {args.load}: {args.jobsets} unseen jobsets (95% CI)")
    _save(fig, Path(args.out or FIGURES / "objectives.png"), {"load": args.load, "jobsets": args.jobsets,
                                                              "seed": seeds.EVALUATION, "results": values})


def read_metrics(paths) -> list[dict]:
    """The rows of CSVLogger metrics files, in order (a resumed run has several)."""
    import csv

    return [row for path in paths for row in csv.DictReader(open(path))]


def last_per_step(rows: list[dict], key: str) -> list[dict]:
    """Rows holding `key`, one per step, by step; the last wins (a resumed run repeats the steps
    after its checkpoint)."""
    return sorted({int(r["step"]): r for r in rows if r.get(key)}.values(), key=lambda r: int(r["step"]))


def heuristic_lines(evals: list[dict], heuristics: list[str]) -> dict[str, float]:
    """Each heuristic's validation slowdown, from the last evaluation row that logged it."""
    return {h: float(evals[-1][f"eval/{h}/mean_slowdown"]) for h in heuristics
            if evals and evals[-1].get(f"eval/{h}/mean_slowdown")}


def learning_curve(args) -> None:
    """Validation slowdown per iteration (heuristic lines) and the training episodes' total reward."""
    from lightning_sched.plots import learning_curve as plot

    rows = read_metrics(args.metrics)
    evals = last_per_step(rows, "eval/mean_slowdown")
    train = last_per_step(rows, "train/mean_return")
    curve = {"eval_step": [int(r["step"]) for r in evals], "eval_mean_slowdown": [float(r["eval/mean_slowdown"]) for r in evals],
             "train_step": [int(r["step"]) for r in train],
             "train_mean_slowdown": [float(r["train/mean_slowdown"]) for r in train],
             "mean_return": [float(r["train/mean_return"]) for r in train],
             "max_return": [float(r["train/max_return"]) for r in train],
             "iteration_s": [float(r["perf/iteration_s"]) for r in last_per_step(rows, "perf/iteration_s")]}
    reference = heuristic_lines(evals, args.heuristics)
    fig = plot(curve["eval_step"], curve["eval_mean_slowdown"], reference, curve["mean_return"], curve["max_return"],
               title=args.title, train=(curve["train_step"], curve["train_mean_slowdown"]),
               reward_iterations=curve["train_step"])
    _save(fig, Path(args.out or FIGURES / "learning_curve.png"), {"metrics": [str(m) for m in args.metrics], "heuristics": reference,
                                                                  "curve": curve})


def gains(args) -> None:
    """What the policy withholds, and slowdown by job length against Tetris."""
    import torch

    from lightning_sched.evaluation import mean_ci95
    from lightning_sched.plots import gains as plot

    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    name, rl = next((n, p) for n, p in policies.items() if n not in args.heuristics)
    jobs = make_jobsets(DeepRMWorkload(load=args.load), args.jobsets, seeds.EVALUATION)
    withheld: dict[int, int] = {}

    def watching(obs):
        obs = rl(obs)
        void = obs["action"] == cfg.num_slots
        fits = (obs["slot_offset"] == 0) & void.unsqueeze(1)
        for length, count in zip(*torch.unique(obs["slot_duration"][fits], return_counts=True)):
            withheld[int(length)] = withheld.get(int(length), 0) + int(count)
        return obs

    by_length = {}
    for scheme, policy in [(name, watching)] + [(h, policies[h]) for h in args.heuristics]:
        result = evaluate(policy, cfg, jobs, device=args.device)
        by_length[scheme] = {}
        for length in sorted(set(result.job_duration[result.job_duration > 0].tolist())):
            # per jobset, the mean slowdown of its jobs of this length; CI over jobsets
            per_jobset = torch.stack([row[d == length].mean() if bool((d == length).any()) else torch.tensor(float("nan"))
                                      for row, d in zip(result.job_slowdown, result.job_duration)])
            by_length[scheme][length] = mean_ci95(per_jobset)
    offered = {}
    for length in jobs.duration[jobs.duration > 0].tolist():
        offered[length] = offered.get(length, 0) + 1
    fig = plot(withheld, offered, by_length, title=f"{name} at load {args.load}, {args.jobsets} unseen jobsets")
    _save(fig, Path(args.out or FIGURES / "gains.png"), {"load": args.load, "jobsets": args.jobsets, "seed": seeds.EVALUATION,
                                                         "withheld": withheld, "offered": offered,
                                                         "slowdown_by_length": by_length})


# Held-out workloads for the adaptation curves: each outside configs/maml.yaml's meta-training ranges
# (load 0.4..1.0, short_prob 0.7..0.9, short jobs 1..(2-3), long (10-11)..(12-15), dominant 4-5..8-10).
HELD_OUT = {
    "heavy load 1.5": dict(load=1.5),
    "long-job mix (short_prob 0.5)": dict(load=0.9, short_prob=0.5),
    "small demands (dominant 2..4)": dict(load=0.9, dominant_units=(2, 4)),
    "medium jobs (long 5..8)": dict(load=0.9, long_len=(5, 8)),
}
ADAPT_EVAL_STEPS = {0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 40, 50}


def held_out_workloads(cfg: ClusterConfig, args, metric: str):
    """(label, workload, its --eval_jobsets unseen jobsets, {heuristic: (mean, ci) of `metric`})
    for each held-out workload of the adaptation figures."""
    for label, params in HELD_OUT.items():
        workload = DeepRMWorkload(**params)
        eval_jobs = make_jobsets(workload, args.eval_jobsets, seeds.EVALUATION)
        lines = {}
        for h in args.heuristics:
            s = evaluate(named_policies(cfg, [h], [], args.device)[h], cfg, eval_jobs, device=args.device).summary
            lines[h] = (s[metric], s[metric + "_ci95"])
        yield label, workload, eval_jobs, lines


def headroom(args) -> None:
    """How far fine-tuning goes on each held-out workload: one checkpoint fine-tuned --steps steps
    (--optimizer/--lr, --jobsets x --episodes a step), measured every --every steps on the
    adaptation figures' unseen jobsets (same seeds, so its first steps are their curve)."""
    import copy

    from lightning_sched.adaptation import AdaptationSettings, adapt
    from lightning_sched.plots import adaptation_curves
    from lightning_sched.policies import load_network

    net, cfg, saved = load_network(args.ckpt, args.device)
    settings = AdaptationSettings(steps=args.steps, jobsets=args.jobsets, episodes=args.episodes, lr=args.lr,
                                  optimizer=args.optimizer)
    curves, lines = {}, {}
    for label, workload, eval_jobs, lines[label] in held_out_workloads(cfg, args, "mean_slowdown"):
        summaries = adapt(copy.deepcopy(net), cfg, workload, settings, eval_jobs, seed=args.seed, device=args.device,
                          greedy=saved.get("greedy", True), eval_steps=set(range(0, args.steps + 1, args.every)))
        curves[label] = {"fine-tuned": {s["step"]: (s["mean_slowdown"], s["mean_slowdown_ci95"]) for s in summaries}}
        print(f"{label:32s} " + " ".join(f"{st}:{v[0]:.2f}" for st, v in curves[label]["fine-tuned"].items()), flush=True)
    fig = adaptation_curves(curves, lines, ylabel="mean slowdown",
                            title=f"{args.ckpt} fine-tuned on the held-out workloads ({args.jobsets}x{args.episodes} "
                                  f"episodes a step, {args.eval_jobsets} unseen jobsets, 95% CI)")
    _save(fig, Path(args.out or FIGURES / "headroom.png"),
          {"checkpoint": args.ckpt, "settings": settings.describe(), "held_out": HELD_OUT, "curves": curves,
           "heuristics": lines})


def adaptation(args) -> None:
    """Adaptation curves on held-out workloads: the meta-policy, the mixture-trained REINFORCE policy
    and a fresh network, each fine-tuned with the same steps and episodes; heuristics as lines."""
    import copy

    import torch

    from lightning_sched.adaptation import AdaptationSettings, adapt
    from lightning_sched.plots import adaptation_curves
    from lightning_sched.policies import load_network, make_policy

    starts = {}
    for item in args.ckpt:
        name, _, path = item.partition("=")
        starts[name] = load_network(path, args.device)
    net0, cfg, saved0 = next(iter(starts.values()))
    cfg = cfg.replace(objective=args.objective)
    torch.manual_seed(args.seed)
    starts["scratch"] = (make_policy(net0.spec, cfg).to(args.device), cfg, {"greedy": saved0.get("greedy", True)})
    def settings_for(saved: dict) -> AdaptationSettings:
        """Same steps and samples for every method; a meta-policy adapts with the inner loop it was
        meta-trained for (optimizer, lr, learned step sizes), a policy with none with --optimizer/--lr."""
        own = {} if saved.get("adaptation") else {"lr": args.lr, "optimizer": args.optimizer}
        return AdaptationSettings.from_checkpoint(saved, args.steps, jobsets=args.jobsets, episodes=args.episodes, **own)
    settings = {name: settings_for(saved) for name, (_, _, saved) in starts.items()}
    metric = {"slowdown": "mean_slowdown", "completion_time": "mean_completion_time"}[args.objective]
    curves, lines, table = {}, {}, {}
    for label, workload, eval_jobs, lines[label] in held_out_workloads(cfg, args, metric):
        curves[label], table[label] = {}, {}
        for name, (net, _, saved) in starts.items():
            summaries = adapt(copy.deepcopy(net), cfg, workload, settings[name], eval_jobs, seed=args.seed, device=args.device,
                              greedy=saved.get("greedy", True), eval_steps=ADAPT_EVAL_STEPS)
            curves[label][name] = {s["step"]: (s[metric], s[metric + "_ci95"]) for s in summaries}
            tetris = lines[label]["tetris"][0]
            beat = [s["step"] for s in summaries if s[metric] <= tetris]
            table[label][name] = beat[0] if beat else None
            print(f"{label:32s} {name:10s} " + " ".join(f"{st}:{v[0]:.2f}" for st, v in curves[label][name].items())
                  + f"   beats tetris ({tetris:.2f}) at step {table[label][name]}", flush=True)
    fig = adaptation_curves(curves, lines, ylabel=metric.replace("_", " "),
                            title=f"adaptation on held-out workloads ({args.objective}; {args.jobsets}x{args.episodes} "
                                  f"episodes a step, {args.eval_jobsets} unseen jobsets, 95% CI)")
    out = Path(args.out or FIGURES / f"adaptation_{args.objective}.png")
    _save(fig, out, {"objective": args.objective, "settings": {name: st.describe() for name, st in settings.items()},
                     "held_out": HELD_OUT,
                     "curves": curves, "heuristics": lines, "first_step_at_or_below_tetris": table})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="figure", required=True)
    p = sub.add_parser("load_sweep", help="mean slowdown vs load")
    p.add_argument("--loads", type=float, nargs="+", default=LOADS)
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "edf", "random"])
    p.add_argument("--ckpt", nargs="*", default=[], help="NAME=PATH.ckpt (acting as the checkpoint says: greedy or sampled)")
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/slowdown_vs_load.png; the SLO figure beside it)")
    p.set_defaults(run=load_sweep)
    p = sub.add_parser("ablation", help="recipes' checkpoints at a few loads: slowdown and SLO hit rate (issue 5)")
    p.add_argument("--ckpt", nargs="+", required=True, help="NAME=PATH.ckpt, in the order to show")
    p.add_argument("--loads", type=float, nargs="+", default=[0.7, 1.1, 1.5])
    p.add_argument("--heuristics", nargs="+", default=["tetris", "edf"])
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--title", default="Ablation")
    p.add_argument("--out", help="PNG path (default docs/figures/ablation.png)")
    p.set_defaults(run=ablation)
    p = sub.add_parser("cdf", help="per-job slowdown CDF per scheme at a few loads")
    p.add_argument("--ckpt", nargs="*", default=[], help="NAME=PATH.ckpt")
    p.add_argument("--loads", type=float, nargs="+", default=[0.9, 1.3])
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "edf", "random"])
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/slowdown_cdf.png)")
    p.set_defaults(run=cdf)
    p = sub.add_parser("recipes", help="validation curves of several runs vs iterations and wall time")
    p.add_argument("--runs", nargs="+", required=True,
                   help="NAME=runs/.../metrics.csv (CSVLogger; a resumed run: NAME=first.csv,second.csv)")
    p.add_argument("--heuristics", nargs="+", default=["tetris"])
    p.add_argument("--title", default="")
    p.add_argument("--out", help="PNG path (default docs/figures/recipe_learning_curves.png)")
    p.set_defaults(run=recipes)
    p = sub.add_parser("trace", help="heuristics on a real trace's held-out time range (docs/traces.md)")
    p.add_argument("--trace", default=str(NASA_TRACE), help="SWF or CSV trace (default: the NASA iPSC log in ../shared)")
    p.add_argument("--seconds_per_step", type=float, default=600.0)
    p.add_argument("--capacity", nargs="*", default=["processors=128"], help="NAME=VALUE per trace resource")
    p.add_argument("--oversize", choices=("clip", "drop"), default="clip")
    p.add_argument("--split", choices=("train", "test", "all"), default="test")
    p.add_argument("--test_fraction", type=float, default=0.25)
    p.add_argument("--simu_len", type=int, default=50)
    p.add_argument("--compressions", type=float, nargs="+", default=[1.0, 2.0], help="time compressions to compare")
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "edf", "random"])
    p.add_argument("--ckpt", nargs="*", default=[], help="NAME=PATH.ckpt (acting as the checkpoint says: greedy or sampled)")
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/trace_nasa.png)")
    p.set_defaults(run=trace)
    p = sub.add_parser("objectives", help="policies trained for different objectives, on both metrics")
    p.add_argument("--ckpt", nargs="+", required=True, help="NAME=PATH.ckpt (acting as the checkpoint says: greedy or sampled)")
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "random"])
    p.add_argument("--load", type=float, default=1.3)
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/objectives.png)")
    p.set_defaults(run=objectives)
    p = sub.add_parser("learning_curve", help="a run's learning curve from its CSV metrics")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of a run logged with CSVLogger "
                   "(several, in order, for a resumed run)")
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "random"])
    p.add_argument("--title", default="DeepRM's recipe, load 0.7")
    p.add_argument("--out", help="PNG path (default docs/figures/learning_curve.png)")
    p.set_defaults(run=learning_curve)
    p = sub.add_parser("gains", help="what the policy withholds; slowdown by job length")
    p.add_argument("--ckpt", nargs=1, required=True, help="NAME=PATH.ckpt (acting as the checkpoint says: greedy or sampled)")
    p.add_argument("--heuristics", nargs="+", default=["tetris"])
    p.add_argument("--load", type=float, default=0.7)
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/gains.png)")
    p.set_defaults(run=gains)
    p = sub.add_parser("adaptation", help="adaptation curves on held-out workloads (issue 4)")
    p.add_argument("--ckpt", nargs="+", required=True, help="NAME=PATH.ckpt: the meta-policy and the mixture policy")
    p.add_argument("--objective", choices=("slowdown", "completion_time"), default="slowdown")
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "random"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--jobsets", type=int, default=20)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--optimizer", choices=("sgd", "adam", "rmsprop"), default="adam",
                   help="fine-tuning of checkpoints without an inner loop of their own (REINFORCE, scratch)")
    p.add_argument("--lr", type=float, default=0.003,
                   help="their step size (a meta-policy keeps its own inner loop's optimizer and lr)")
    p.add_argument("--eval_jobsets", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="PNG path (default docs/figures/adaptation_<objective>.png)")
    p.set_defaults(run=adaptation)
    p = sub.add_parser("headroom", help="one checkpoint fine-tuned long on the held-out workloads (issue 4)")
    p.add_argument("--ckpt", default="checkpoints/reinforce_mixture_masked.ckpt")
    p.add_argument("--heuristics", nargs="+", default=["tetris"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=25, help="measure after every N-th step")
    p.add_argument("--jobsets", type=int, default=20)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--optimizer", choices=("sgd", "adam", "rmsprop"), default="adam")
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--eval_jobsets", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="PNG path (default docs/figures/headroom.png)")
    p.set_defaults(run=headroom)
    for parser in sub.choices.values():
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_threads(args.threads)
    args.run(args)


if __name__ == "__main__":
    main()
