"""Draw the figures of docs/figures/: each writes its PNG and its numbers as JSON beside it, under
runs/figures/ unless --out names the PNG (`--out docs/figures/NAME.png --overwrite` replaces a figure of docs/).

    python scripts/figures.py load_sweep [--ckpt NAME=PATH ...] [--jobsets 200]

load_sweep: mean slowdown and SLO hit rate vs load 0.1..1.9 (DeepRM Figure 4), 200 unseen jobsets a point, 95% CIs;
each checkpoint's paired differences to the best heuristics at each load printed and in the JSON.

    python scripts/figures.py ablation --ckpt deeprm=A.ckpt "+ mask=B.ckpt" ... [--loads 0.7 1.1 1.5]
    python scripts/figures.py cdf --ckpt RL=A.ckpt [--loads 0.9 1.3]
    python scripts/figures.py recipes --runs deeprm=runs/a/metrics.csv upgraded=runs/b/metrics.csv

ablation: each recipe's mean slowdown and SLO hit rate at a few loads. cdf: per-job slowdown CDF
per scheme. recipes: validation curves of runs against iterations and against wall time.

    python scripts/figures.py trace [--trace PATH] [--compressions 1 2] [--jobsets 200]
    python scripts/figures.py objectives --ckpt slowdown=A.ckpt completion_time=B.ckpt [--load 1.3]

trace: heuristics on a real trace's held-out (test) time range, as recorded and time-compressed (docs/traces.md);
without --trace, the NASA iPSC/860 log of ../shared/traces on 128 processors at 600 s a step. objectives: policies
trained for different objectives and the heuristics, on both metrics (DeepRM Figure 5).

    python scripts/figures.py learning_curve --metrics runs/deeprm_slowdown/metrics.csv

learning_curve: a run's validation slowdown per iteration with the heuristics' lines, and the mean and max total
reward of its training episodes (DeepRM Figure 6; numbers in the JSON). Iterations count those done, as the
checkpoints' names (best-25.ckpt: after 25); the default title names the run and its config (config.yaml).

    python scripts/figures.py redraw docs/figures/adaptation_broad_nasa.json --out X.png
    python scripts/figures.py gains --ckpt RL=checkpoints/reinforce_slowdown.ckpt [--load 0.7]

redraw: a learning_curve or adaptation (or headroom) figure again from the numbers in its JSON. gains: lengths of
the jobs the policy leaves waiting while they fit, and slowdown by job length against Tetris (DeepRM section 5.3,
"where the gains come from").

    python scripts/figures.py adaptation --ckpt maml=checkpoints/maml.ckpt mixture=checkpoints/maml_mixture.ckpt

adaptation: on held-out workloads outside the meta-training ranges, the objective on unseen jobsets vs adaptation
steps for the meta-policy, the mixture-trained policy and a fresh network, each with the same steps and episodes (a
meta-policy with its own inner loop, the others with --optimizer/--lr), heuristic lines, when each beats Tetris.

    python scripts/figures.py headroom [--ckpt checkpoints/reinforce_mixture_masked.ckpt --steps 300]
    python scripts/figures.py cluster_sizes --ckpt best_slowdown=checkpoints/best_slowdown.ckpt

headroom: one checkpoint fine-tuned long on the same held-out workloads and jobsets (how far fine-tuning goes).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from _common import ROOT, RUNS, named_files, named_policies, run_main, set_threads
from lightning_sched import ClusterConfig, ConfigError, DeepRMWorkload, analysis, plots, seeds
from lightning_sched.cli import (
    THREADS_HELP,
    ScriptParser,
    add_cluster_flags,
    add_trace_flags,
    at_least,
    positive_float,
    require_distinct,
    seed_number,
    setup_from_args,
    thread_count,
    torch_device,
)
from lightning_sched.config import SIZE_FIELDS
from lightning_sched.deeprm.objectives import OBJECTIVE_METRIC
from lightning_sched.evaluation import compare, make_jobsets
from lightning_sched.files import refuse_figure, refuse_output, write_figure, write_figure_and_json
from lightning_sched.learning.adaptation import AdaptationSettings

FIGURES = RUNS / "figures"  # without --out: the repository's docs/figures stay as committed
LOADS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9]
HEURISTICS = ["tetris", "sjf", "packer", "edf", "random"]
NASA_TRACE = ROOT.parent / "shared" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"  # never copied into the repo
CKPT_HELP = "NAME=PATH.ckpt (acting as the checkpoint says: greedy or sampled)"


def checkpoints(args) -> dict[str, str]:
    """--ckpt NAME=PATH ... as {name: path}."""
    return named_files(args.ckpt, "--ckpt", taken=(*getattr(args, "heuristics", ()), "scratch"))  # adaptation's


def cluster_and_policies(args) -> tuple[ClusterConfig, dict]:
    """The cluster of the figures on DeepRM's workload, and --heuristics then --ckpt as {name: policy}."""
    cfg = ClusterConfig(observation="none")
    return cfg, named_policies(cfg, args.heuristics, args.ckpt, args.device)


def pm(mean_ci: tuple[float, float]) -> str:
    return f"{mean_ci[0]:.3f}±{mean_ci[1]:.3f}"


def versus_text(name: str, row: dict, jobsets: int) -> str:
    """analysis.versus_best's row as printed: "NAME-BEST diff±ci (paired 95% CI, N jobsets)", with the
    SLO hit rate swept also "slo NAME-SLO_BEST diff±ci" against its best heuristic."""
    slo = row.get(f"slo_minus_{row.get('best_slo_heuristic')}")
    slo_text = f"slo {name}-{row['best_slo_heuristic']} {slo[0]:+.3f}±{slo[1]:.3f} " if slo else ""
    return (f"{name}-{row['best_heuristic']} {row['slowdown_minus_best']:+.3f}±{row['ci95']:.3f} {slo_text}"
            f"(paired 95% CI, {jobsets} jobsets)")


def str_keys(table: dict[str, dict]) -> dict[str, dict]:
    """{policy: {load: value}} with the loads as JSON keys."""
    return {name: {str(load): v for load, v in row.items()} for name, row in table.items()}


def save(fig, args, default: str, data: dict) -> Path:
    """Write the figure to --out (default: runs/figures/`default`) and `data` as JSON beside it,
    under the command that made them."""
    text = json.dumps({"command": shlex.join(["python", "scripts/figures.py", *sys.argv[1:]]), **data}, indent=1)
    out = write_figure_and_json(fig, args.out or FIGURES / default, text, args.overwrite, numbered=not args.out)
    print(f"wrote {out} and {out.with_suffix('.json')}")
    return out


def load_sweep(args) -> None:
    """Mean slowdown and SLO hit rate vs load; each checkpoint's paired differences to the best heuristics."""
    cfg, policies = cluster_and_policies(args)

    def report(load, case, versus) -> None:
        print("  ".join([f"load {load:.1f}"] + [f"{name} {pm(case.mean_ci(name))} slo "
                                                f"{case.mean_ci(name, 'slo_hit_rate')[0]:.3f}" for name in policies]
                        + [versus_text(name, row, args.jobsets) for name, row in versus.items()]), flush=True)

    sweep = analysis.sweep(policies, cfg, args.loads, args.jobsets, 0, ("mean_slowdown", "slo_hit_rate"),
                           list(checkpoints(args)), args.heuristics, slo=True, device=args.device, report=report)
    fig = plots.slowdown_vs_load(sweep.metric("mean_slowdown"),
                                 f"Mean slowdown vs load ({args.jobsets} unseen jobsets a point)")
    out = save(fig, args, "slowdown_vs_load.png",
               {"jobsets": args.jobsets, "seed": seeds.evaluation(), "results": str_keys(sweep.metric("mean_slowdown")),
                "slo_hit_rate": str_keys(sweep.metric("slo_hit_rate")), "versus_best_heuristic": sweep.versus_best})
    slo = plots.slowdown_vs_load(sweep.metric("slo_hit_rate"), f"SLO hit rate (slowdown <= {cfg.slo_slowdown:g}) vs "
                                 f"load, {args.jobsets} jobsets a point", ylabel="share of jobs meeting their deadline")
    slo_out = write_figure(slo, slo_path(out), args.overwrite, numbered=not args.out)  # its numbers: the JSON above
    print(f"wrote {slo_out}")


def slo_path(out: Path) -> Path:
    """load_sweep's second figure (the SLO hit rate) beside its first, `out`, never over it."""
    slo_name = out.stem.replace("slowdown", "slo")
    return out.with_name((slo_name if slo_name != out.stem else out.stem + "_slo") + ".png")


def ablation(args) -> None:
    """Mean slowdown and SLO hit rate of each recipe's checkpoint (and heuristics) at a few loads."""
    cfg, policies = cluster_and_policies(args)
    metrics = {"mean_slowdown": "mean slowdown", "slo_hit_rate": f"SLO hit rate (slowdown <= {cfg.slo_slowdown:g})"}

    def report(load, case, versus) -> None:
        for name in policies:
            print(f"load {load:.1f} {name:28s} slowdown {pm(case.mean_ci(name))}  "
                  f"slo {pm(case.mean_ci(name, 'slo_hit_rate'))}", flush=True)

    sweep = analysis.sweep(policies, cfg, args.loads, args.jobsets, 100, metrics, device=args.device, report=report)
    fig = plots.ablation(sweep.values, metrics, title=f"{args.title} ({args.jobsets} unseen jobsets a load, 95% CI)")
    save(fig, args, "ablation.png", {"jobsets": args.jobsets, "seeds": analysis.sweep_seeds(100, len(args.loads)),
                                     "results": str_keys(sweep.values)})


def cdf(args) -> None:
    """Per-job slowdown CDF per scheme at a few loads (DeepRM's code's slow_down_cdf)."""
    cfg, policies = cluster_and_policies(args)
    panels, data = {}, {}
    for load, case in analysis.by_load(policies, cfg, args.loads, args.jobsets, 200, args.device):
        panel, data[str(load)] = {}, {}
        for name, result in case.results.items():
            panel[name], data[str(load)][name] = analysis.slowdown_quantiles(result)
            print(f"load {load:.1f} {name:24s} " + " ".join(f"{k} {v:.3f}" for k, v in data[str(load)][name].items()),
                  flush=True)
        panels[f"load {load:g} ({args.jobsets} unseen jobsets)"] = panel
    save(plots.cdf_panels(panels, "Per-job slowdown CDF (dotted: the SLO, slowdown 2)"), args, "slowdown_cdf.png",
         {"jobsets": args.jobsets, "seeds": analysis.sweep_seeds(200, len(args.loads)), "results": data})


def recipes(args) -> None:
    """Validation curves of several runs on the same axes, against iterations and wall time."""
    curves, rows = {}, {}
    for name, path in named_files(args.runs, "--runs").items():
        rows[name] = analysis.read_metrics(path.split(","))
        curves[name] = {**analysis.validation_curve(rows[name]), "metrics": path}
        print(f"{name}: best {min(curves[name]['slowdown']):.3f}, {curves[name]['median_iteration_s']:.3f} s/iteration")
    reference = analysis.shared_heuristic_lines(rows, args.heuristics)
    save(plots.recipe_curves(curves, reference, args.title), args, "recipe_learning_curves.png",
         {"curves": curves, "heuristics": reference})


def trace(args) -> None:
    """Heuristics (and any checkpoints) on a real trace's held-out time range, as recorded and time-compressed,
    on the cluster the size flags (or --fit_cluster) describe (checkpoints of slot policies run on it)."""
    nasa = args.trace is None  # the default figure: NASA's log, its 128 processors, 600 s a step
    if nasa:
        args.trace, args.trace_capacity = str(NASA_TRACE), args.trace_capacity or ["processors=128"]
    if args.target_load is not None or args.time_compression != 1.0:  # --compressions gives them
        raise ConfigError("figures.py trace compares --compressions; --target_load, --time_compression do not apply")
    cfg, sized, log = setup_from_args(args, list(checkpoints(args).values()))
    log = replace(log, seconds_per_step=600.0) if nasa and log.seconds_per_step is None else log
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device, resize=sized)
    settings, values, cdf, mapping = {}, {}, None, None
    for compression in args.compressions:
        workload = log.workload(cfg, time_compression=compression)
        jobs = make_jobsets(workload, args.jobsets, seeds.evaluation())
        case = compare(policies, cfg, jobs, args.device)
        load = max(workload.report.split_load)
        label = f"x{compression:g} (load {load:.2f})" if compression != 1 else f"as recorded (load {load:.2f})"
        settings[label] = {"time_compression": compression, **analysis.trace_case(workload.report, jobs, case)}
        mapping = mapping or analysis.trace_mapping(workload.report)
        values[label] = {name: case.mean_ci(name) for name in policies}
        cdf = cdf or {name: result.job_slowdown.flatten() for name, result in case.results.items()}
        print("  ".join([label] + [f"{name} {pm(case.mean_ci(name))}" for name in policies]), flush=True)
    name = Path(log.path).name.split(".")[0]
    fig = plots.trace_heuristics(values, cdf, title=f"{name}, {args.trace_split} split: {args.jobsets} windows of "
                                 f"{args.simu_len} x {log.seconds_per_step:g} s (95% CI over windows)")
    save(fig, args, "trace_nasa.png",
         {"jobsets": args.jobsets, "seed": seeds.evaluation(), "split": args.trace_split,
          "test_fraction": args.test_fraction, "simu_len": args.simu_len, "oversize": args.oversize,
          "cluster": cfg.to_dict(), "mapping": mapping, "settings": settings})


def objectives(args) -> None:
    """Heuristics and policies trained for different objectives, each measured on both metrics."""
    cfg, policies = cluster_and_policies(args)
    case = compare(policies, cfg, make_jobsets(DeepRMWorkload(load=args.load), args.jobsets, seeds.evaluation()),
                   args.device)
    metrics = {"mean_slowdown": "mean slowdown", "mean_completion_time": "mean completion time"}
    values = analysis.table(case, metrics)
    for name, row in values.items():
        print(name, "  ".join(f"{m} {pm(row[m])}" for m in metrics), flush=True)
    fig = plots.bars(values, metrics, title=f"load {args.load}: {args.jobsets} unseen jobsets (95% CI)")
    save(fig, args, "objectives.png", {"load": args.load, "jobsets": args.jobsets, "seed": seeds.evaluation(),
                                       "results": values})


def draw_learning_curve(curve: dict, reference: dict[str, float], title: str):
    return plots.learning_curve(curve["eval_step"], curve["eval_mean_slowdown"], reference, curve["mean_return"],
                                curve["max_return"], title=title,
                                train=(curve["train_step"], curve["train_mean_slowdown"]),
                                reward_iterations=curve["train_step"])


def learning_curve(args) -> None:
    """Validation slowdown per iteration (heuristic lines) and the training episodes' total reward."""
    rows = analysis.read_metrics(args.metrics)
    curve = analysis.learning_curve(rows, args.metrics)
    reference = analysis.heuristic_lines(rows, args.heuristics)
    title = args.title if args.title is not None else analysis.run_title(args.metrics[0])
    save(draw_learning_curve(curve, reference, title), args, "learning_curve.png",
         {"metrics": [str(m) for m in args.metrics], "title": title, "steps": analysis.ITERATIONS_DONE,
          "heuristics": reference, "curve": curve})


def redraw(args) -> None:
    """A learning_curve or adaptation/headroom figure from its JSON's numbers (no evaluation)."""
    try:
        data = json.loads(Path(args.json).read_text())
        fig, data = figure_of_json(data if isinstance(data, dict) else {}, args)
    except ConfigError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError) as error:  # hand-edited
        raise ConfigError(f"{args.json}: not a figure's JSON as figures.py writes it ({type(error).__name__} {error})")
    data["redrawn_with"] = shlex.join(["python", "scripts/figures.py", *sys.argv[1:]])
    save(fig, args, Path(args.json).with_suffix(".png").name, data)


def figure_of_json(data: dict, args):
    if "curve" in data:
        curve = data["curve"]
        if data.get("steps") != analysis.ITERATIONS_DONE:  # written before steps counted iterations done
            curve = {**curve, "eval_step": [s + 1 for s in curve["eval_step"]],
                     "train_step": [s + 1 for s in curve["train_step"]]}
        title = args.title or data.get("title") or analysis.run_title(data["metrics"][0])
        return draw_learning_curve(curve, data["heuristics"], title), \
            {**data, "curve": curve, "title": title, "steps": analysis.ITERATIONS_DONE}
    if "curves" in data and "held_out" in data:
        steps = {panel: {m: {int(k): v for k, v in c.items()} for m, c in methods.items()}
                 for panel, methods in data["curves"].items()}
        ylabel = {"completion_time": "mean completion time"}.get(data.get("objective"), "mean slowdown")
        return plots.adaptation_curves(steps, data["heuristics"], ylabel, title=args.title or data.get("title")), data
    raise ConfigError(f"{args.json}: redraw reads the JSON of learning_curve, adaptation or headroom "
                      "(a 'curve' or 'curves' entry), not this one")


def gains(args) -> None:
    """What the policy withholds, and slowdown by job length against Tetris."""
    cfg, policies = cluster_and_policies(args)
    name = next(iter(checkpoints(args)))
    jobs = make_jobsets(DeepRMWorkload(load=args.load), args.jobsets, seeds.evaluation())
    watching = analysis.Withholding(policies[name], cfg)
    case = compare({name: watching, **{h: policies[h] for h in args.heuristics}}, cfg, jobs, args.device)
    by_length = {scheme: analysis.slowdown_by_length(result) for scheme, result in case.results.items()}
    offered = analysis.offered_lengths(jobs)
    fig = plots.gains(watching.counts, offered, by_length,
                      title=f"{name} at load {args.load}, {args.jobsets} unseen jobsets")
    save(fig, args, "gains.png", {"load": args.load, "jobsets": args.jobsets, "seed": seeds.evaluation(),
                                  "withheld": watching.counts, "offered": offered, "slowdown_by_length": by_length})


def held_out_workloads(cfg: ClusterConfig, args, metric: str):
    """analysis.held_out_workloads of the adaptation figures (--eval_jobsets, --heuristics); with
    --trace the log is one more, on its own cluster (--fit_cluster or the size flags), adapted on its
    train split and measured on its test split."""
    extra = []
    if getattr(args, "trace", None):
        trace_cfg, _, log = setup_from_args(args, list(checkpoints(args).values()))
        trace_cfg = trace_cfg.replace(objective=cfg.objective)
        extra.append((f"{Path(log.path).name.split('.')[0]}, test split", trace_cfg,
                      log.workload(trace_cfg, split="train"), log.workload(trace_cfg, split="test")))
    return analysis.held_out_workloads(cfg, lambda c: named_policies(c, args.heuristics, [], args.device),
                                       args.eval_jobsets, metric, args.device, extra)


def headroom(args) -> None:
    """How far fine-tuning goes on each held-out workload: one checkpoint fine-tuned --steps steps
    (--optimizer/--lr, --jobsets x --episodes a step), measured every --every steps on the
    adaptation figures' unseen jobsets (same seeds, so its first steps are their curve)."""
    starts = analysis.AdaptationStarts({"fine-tuned": args.ckpt}, args.device)
    settings = AdaptationSettings(steps=args.steps, jobsets=args.jobsets, episodes=args.episodes, lr=args.lr,
                                  optimizer=args.optimizer)

    def report(panel, name, curve, first) -> None:
        print(f"{panel.label:32s} " + " ".join(f"{st}:{v[0]:.2f}" for st, v in curve.items()), flush=True)

    runs = analysis.adapt_on_held_out(held_out_workloads(starts.cfg, args, "mean_slowdown"), starts.on,
                                      {"fine-tuned": settings}, "mean_slowdown",
                                      set(range(0, args.steps + 1, args.every)), args.seed, args.device, report=report)
    title = (f"{args.ckpt} fine-tuned on the held-out workloads ({args.jobsets}x{args.episodes} episodes a step, "
             f"{args.eval_jobsets} unseen jobsets, 95% CI)")
    fig = plots.adaptation_curves(runs.curves, runs.heuristics, ylabel="mean slowdown", title=title)
    save(fig, args, "headroom.png", {"checkpoint": args.ckpt, "title": title, "settings": settings.describe(),
                                     "held_out": analysis.HELD_OUT, "curves": runs.curves,
                                     "heuristics": runs.heuristics})


def adaptation(args) -> None:
    """Adaptation curves on held-out workloads: the meta-policy, the mixture-trained REINFORCE policy
    and a fresh network ("scratch", acting and adapting as the first checkpoint), each fine-tuned with
    the same steps and episodes (a meta-policy with its own inner loop, the others with --optimizer/--lr);
    heuristics as lines."""
    if args.objective not in ("slowdown", "completion_time"):
        raise ConfigError(f"--objective must be slowdown or completion_time here, got {args.objective!r}")
    sized = [f"--{name}" for name in SIZE_FIELDS if getattr(args, name) is not None]
    if sized and not args.trace:
        raise ConfigError(f"{', '.join(sized)} size the --trace panel's cluster; without --trace they would do nothing")
    starts = analysis.AdaptationStarts(checkpoints(args), args.device, args.objective, fresh="scratch", seed=args.seed)
    settings = starts.settings(args.steps, args.jobsets, args.episodes, args.lr, args.optimizer)
    metric = OBJECTIVE_METRIC[args.objective]

    def report(panel, name, curve, first) -> None:
        print(f"{panel.label:32s} {name:10s} " + " ".join(f"{st}:{v[0]:.2f}" for st, v in curve.items())
              + f"   beats tetris ({panel.heuristics['tetris'][0]:.2f}) at step {first}", flush=True)

    runs = analysis.adapt_on_held_out(held_out_workloads(starts.cfg, args, metric), starts.on, settings, metric,
                                      analysis.ADAPT_EVAL_STEPS, args.seed, args.device, "tetris", report)
    title = (f"adaptation on held-out workloads ({args.objective}; {args.jobsets}x{args.episodes} episodes a step, "
             f"{args.eval_jobsets} unseen jobsets, 95% CI)")
    fig = plots.adaptation_curves(runs.curves, runs.heuristics, ylabel=metric.replace("_", " "), title=title)
    save(fig, args, f"adaptation_{args.objective}.png",
         {"objective": args.objective, "title": title,
          "settings": {name: st.describe() for name, st in settings.items()},
          "held_out": analysis.HELD_OUT, "trace": getattr(args, "trace", None), "clusters": runs.clusters,
          "curves": runs.curves, "heuristics": runs.heuristics, "first_step_at_or_below_tetris": runs.first_step})


SIZES = [(5, 10), (20, 20), (50, 40)]  # (num_slots, resource_units = max_job_units)


def cluster_sizes(args) -> None:
    """The same checkpoints, not retrained, on clusters of other sizes against the heuristics: DeepRM's
    job mix with demands scaled to the units (dominant in [U/2, U], others in [1, U/5])."""
    panels, versus_best = {}, {}
    for k, (slots, units) in enumerate(SIZES):
        cfg = ClusterConfig(observation="none", num_slots=slots, resource_units=units, max_job_units=units)
        policies = named_policies(cfg, args.heuristics, args.ckpt, args.device, resize=True)
        label = f"{slots} slots, {units} units"

        def report(load, case, versus) -> None:
            print("  ".join([f"{label}, load {load:.1f}"] + [f"{name} {pm(case.mean_ci(name))}" for name in policies]
                            + [versus_text(name, row, args.jobsets) for name, row in versus.items()]), flush=True)

        sweep = analysis.sweep(policies, cfg, args.loads, args.jobsets, 300 + 10 * k, learned=list(checkpoints(args)),
                               heuristics=args.heuristics, scaled=True, device=args.device, report=report)
        panels[label] = sweep.metric("mean_slowdown")
        for name, rows in sweep.versus_best.items():
            versus_best.setdefault(name, {})[label] = rows
    fig = plots.by_cluster_size(panels, f"One network on clusters of other sizes ({args.jobsets} unseen jobsets a "
                                        "point, 95% CI)")
    save(fig, args, "cluster_sizes.png", {"jobsets": args.jobsets, "sizes": SIZES, "loads": args.loads,
                                          "results": {label: str_keys(r) for label, r in panels.items()},
                                          "versus_best_heuristic": versus_best})


def shared_flags(heuristics: list[str], jobsets: int | None = 200, loads: list[float] | None = None,
                 ckpt: str | int | None = "*", ckpt_help: str = CKPT_HELP) -> argparse.ArgumentParser:
    """A parent parser of the flags the figures share, with one figure's defaults (a parser per
    figure: argparse shares a parent's actions among its children, so one child's set_defaults
    would change them for all). ckpt: --ckpt's nargs (required unless "*"); None, like jobsets
    or loads None: the figure takes no such flag."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--heuristics", nargs="+", default=heuristics)
    if ckpt is not None:
        p.add_argument("--ckpt", nargs=ckpt, required=ckpt != "*", default=[], help=ckpt_help)
    if jobsets is not None:
        p.add_argument("--jobsets", type=at_least(1), default=jobsets, help="unseen jobsets a point")
    if loads is not None:
        p.add_argument("--loads", type=float, nargs="+", default=loads)
    p.add_argument("--out", help="PNG path (default: the figure's file name under runs/figures, -2, -3, ... when "
                   "taken; its JSON beside it)")
    p.add_argument("--overwrite", action="store_true", help="let --out replace an existing PNG and JSON")
    p.add_argument("--device", type=torch_device, default="cpu")
    p.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    return p


def fine_tuning_flags(steps: int) -> argparse.ArgumentParser:
    """A parent parser of adaptation's and headroom's fine-tuning flags, with `steps` as default."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--jobsets", type=at_least(1), default=20, help="jobsets a fine-tuning step")
    p.add_argument("--episodes", type=at_least(1), default=20, help="episodes of each jobset a step")
    p.add_argument("--optimizer", choices=("sgd", "adam", "rmsprop"), default="adam",
                   help="fine-tuning of checkpoints without an inner loop of their own (REINFORCE, scratch)")
    p.add_argument("--lr", type=positive_float, default=0.003,
                   help="their step size (a meta-policy keeps its own inner loop's optimizer and lr)")
    p.add_argument("--eval_jobsets", type=at_least(1), default=200)
    p.add_argument("--seed", type=seed_number, default=0)
    return p


def main() -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="figure", required=True)

    def figure(run, help: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = sub.add_parser(run.__name__, help=help, parents=list(parents))
        p.set_defaults(run=run)
        return p

    figure(load_sweep, "mean slowdown vs load", shared_flags(HEURISTICS, loads=LOADS))
    p = figure(ablation, "recipes' checkpoints at a few loads: slowdown and SLO hit rate",
               shared_flags(["tetris", "edf"], loads=[0.7, 1.1, 1.5], ckpt="+",
                            ckpt_help="NAME=PATH.ckpt, in the order to show"))
    p.add_argument("--title", default="Ablation")
    figure(cdf, "per-job slowdown CDF per scheme at a few loads", shared_flags(HEURISTICS, loads=[0.9, 1.3]))
    figure(cluster_sizes, "the same checkpoints on clusters of other sizes",
           shared_flags(["tetris", "sjf", "packer"], loads=[0.5, 0.9, 1.3], ckpt="+"))
    p = figure(recipes, "validation curves of several runs vs iterations and wall time",
               shared_flags(["tetris"], jobsets=None, ckpt=None))
    p.add_argument("--runs", nargs="+", required=True,
                   help="NAME=runs/.../metrics.csv (CSVLogger; a resumed run: NAME=first.csv,second.csv)")
    p.add_argument("--title", default="")
    p = figure(trace, "heuristics on a real trace's held-out time range (docs/traces.md; default trace: the NASA "
               "iPSC log in ../shared)", shared_flags(HEURISTICS))
    add_trace_flags(p)
    add_cluster_flags(p)
    p.add_argument("--simu_len", type=at_least(1), default=50, help="steps of a window")
    p.add_argument("--compressions", type=float, nargs="+", default=[1.0, 2.0], help="time compressions to compare")
    p = figure(objectives, "policies trained for different objectives, on both metrics",
               shared_flags(["tetris", "sjf", "packer", "random"], ckpt="+"))
    p.add_argument("--load", type=float, default=1.3)
    p = figure(learning_curve, "a run's learning curve from its CSV metrics",
               shared_flags(["tetris", "sjf", "packer", "random"], jobsets=None, ckpt=None))
    p.add_argument("--metrics", nargs="+", default=["runs/fit/metrics.csv"], help="a run's metrics.csv (default: "
                   "that of `make run`; several CSVLogger files, in order, for a run resumed into another folder)")
    p.add_argument("--title", help="default: the run folder and what its config.yaml says (module, load, "
                   "validation jobsets)")
    p = figure(gains, "what the policy withholds; slowdown by job length", shared_flags(["tetris"], ckpt=1))
    p.add_argument("--load", type=float, default=0.7)
    p = figure(adaptation, "adaptation curves on held-out workloads",
               shared_flags(["tetris", "sjf", "random"], jobsets=None, ckpt="+",
                            ckpt_help="NAME=PATH.ckpt: the meta-policy and the mixture policy"), fine_tuning_flags(50))
    # --trace adds a panel: the log at the cluster --fit_cluster (or the size flags) gives, adapted on its
    # train split and measured on its test split; --objective: slowdown or completion_time
    add_trace_flags(p)
    add_cluster_flags(p)
    p.add_argument("--simu_len", type=at_least(1), default=50, help="steps of a window of --trace")
    p = figure(headroom, "one checkpoint fine-tuned long on the held-out workloads",
               shared_flags(["tetris"], jobsets=None, ckpt=None), fine_tuning_flags(300))
    p.add_argument("--ckpt", default="checkpoints/reinforce_mixture_masked.ckpt")
    p.add_argument("--every", type=at_least(1), default=25, help="measure after every N-th step")
    p = figure(redraw, "a learning_curve or adaptation figure from its JSON", shared_flags([], jobsets=None, ckpt=None))
    p.add_argument("json", help="the figure's JSON (written beside its PNG)")
    p.add_argument("--title", help="default: the JSON's")
    args = ap.parse_args()
    require_distinct("--loads", getattr(args, "loads", None) or [])  # results are kept by load
    if args.out:  # before the minutes of evaluation; checked again as the files are written
        refuse_figure(args.out, args.overwrite, "--out")
        refuse_output(Path(args.out).with_suffix(".json"), args.overwrite, "--out", getattr(args, "json", None) or ())
        if args.figure == "load_sweep":
            refuse_output(slo_path(Path(args.out)), args.overwrite, "--out")
    set_threads(args.threads)
    args.run(args)


if __name__ == "__main__":
    run_main(main)
