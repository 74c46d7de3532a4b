"""Evaluate policies (heuristics or trained checkpoints) on unseen jobsets of a workload.

    python scripts/evaluate.py --policy tetris sjf packer random --load 0.9 --jobsets 200 --seed 12345
    python scripts/evaluate.py --policy checkpoints/reinforce_slowdown.ckpt --load 1.3 --json

Prints a table of SPEC's episode metrics with 95% confidence half-widths over jobsets; with
--json, one JSON line per policy after the table (the last line is the last policy's), holding
mean_slowdown, mean_completion_time, makespan, utilization, slo_hit_rate, each with `_ci95`,
and num_jobs.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from _common import add_workload_flags, set_threads, workload_from_args

import torch

from lightning_sched import ClusterConfig, ConfigError, JobSet, seeds
from lightning_sched.config import REWARD_FIELDS
from lightning_sched.evaluation import evaluate, make_jobsets, paired_difference
from lightning_sched.heuristics import HEURISTICS, make_heuristic
from lightning_sched.traces import TraceWorkload, parse_capacity



def resolve_policy(spec: str, cfg: ClusterConfig, device, greedy: bool | None, seed: int):
    """A heuristic name or a checkpoint path -> (display name, policy callable, its ClusterConfig)."""
    if spec in HEURISTICS:
        kwargs = {"generator": torch.Generator(device=device).manual_seed(seed)} if spec == "random" else {}
        return spec, make_heuristic(spec, cfg, **kwargs), cfg
    if spec.endswith(".ckpt"):
        from lightning_sched.policies import load_policy

        policy, ckpt_cfg = load_policy(spec, device=device, greedy=greedy)
        return spec, policy, ckpt_cfg
    raise ConfigError(f"--policy {spec!r} is neither a heuristic ({', '.join(sorted(HEURISTICS))}) nor a .ckpt file")


def format_row(name: str, s: dict) -> str:
    def cell(metric, digits=3):
        return f"{s[metric]:.{digits}f} ± {s[metric + '_ci95']:.{digits}f}"

    return (f"{name:28s} {cell('mean_slowdown'):>16s} {cell('mean_completion_time', 2):>16s} {cell('makespan', 1):>14s} "
            f"{cell('utilization'):>16s} {cell('slo_hit_rate'):>16s} {s['num_jobs']:>8d}")


def add_trace_flags(ap: argparse.ArgumentParser) -> None:
    """A real trace as the workload (lightning_sched.traces.TraceWorkload); --simu_len sets its windows."""
    g = ap.add_argument_group("trace workload (TraceWorkload; replaces the DeepRM flags except --simu_len)")
    g.add_argument("--trace", help="SWF (.swf, .swf.gz) or CSV trace file to cut jobsets from")
    g.add_argument("--seconds_per_step", type=float, help="trace seconds in one time step (required with --trace)")
    g.add_argument("--trace_format", choices=("auto", "swf", "csv"), default="auto")
    g.add_argument("--trace_resources", nargs="+", metavar="NAME",
                   help="trace resources in cluster order: SWF processors/memory (default both), CSV demand columns")
    g.add_argument("--trace_capacity", nargs="+", metavar="NAME=VALUE",
                   help="virtual cluster capacity per trace resource (SWF processors default: the header's MaxProcs)")
    g.add_argument("--oversize", choices=("clip", "drop"), default="clip",
                   help="jobs longer than max_job_len or larger than max_job_units")
    g.add_argument("--trace_statuses", type=int, nargs="*", default=[1],
                   help="job statuses kept (default 1, completed; none given: all)")
    g.add_argument("--drop_unknown_status", action="store_true", help="drop jobs whose status is -1 (default: keep)")
    g.add_argument("--trace_split", choices=("train", "test", "all"), default="test",
                   help="time-ordered split to cut windows from (default test: held out from training)")
    g.add_argument("--test_fraction", type=float, default=0.25, help="share of the trace's time range in the test split")
    g.add_argument("--trace_windows", choices=("random", "consecutive"), default="random")
    g.add_argument("--target_load", type=float, help="compress the trace's time to reach this offered load")
    g.add_argument("--csv_submit", default="submit_time", help="CSV column of the submit time (seconds)")
    g.add_argument("--csv_run_time", default="run_time", help="CSV column of the run time (seconds)")
    g.add_argument("--csv_status", help="CSV column of the job status (default: none)")


def trace_workload_from_args(args, cluster: ClusterConfig) -> TraceWorkload:
    if args.seconds_per_step is None:
        raise ConfigError("--trace needs --seconds_per_step")
    return TraceWorkload.for_cluster(
        cluster, args.trace, args.seconds_per_step, format=args.trace_format,
        resources=None if args.trace_resources is None else tuple(args.trace_resources),
        capacity=parse_capacity(args.trace_capacity), oversize=args.oversize,
        statuses=tuple(args.trace_statuses) if args.trace_statuses else None,
        keep_unknown_status=not args.drop_unknown_status, split=args.trace_split, test_fraction=args.test_fraction,
        windows=args.trace_windows, simu_len=args.simu_len, target_load=args.target_load,
        csv_submit=args.csv_submit, csv_run_time=args.csv_run_time, csv_status=args.csv_status)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", nargs="+", default=["tetris", "sjf", "packer", "random"],
                    help="heuristic names and/or checkpoint paths")
    add_workload_flags(ap)
    add_trace_flags(ap)
    ap.add_argument("--objective", default="slowdown", help="ClusterConfig.objective (heuristics ignore it)")
    ap.add_argument("--slo_slowdown", type=float, default=2.0, help="default deadline a + floor(slo * d)")
    ap.add_argument("--jobsets", type=int, default=200, help="number of unseen jobsets N")
    ap.add_argument("--episodes", type=int, default=1, help="episodes per jobset (for stochastic policies)")
    ap.add_argument("--seed", type=int, default=seeds.EVALUATION, help="seed of the jobsets")
    ap.add_argument("--jobset_file", help="evaluate on jobsets saved with JobSet.save instead of drawing them")
    ap.add_argument("--save_jobsets", help="save the drawn jobsets to this file")
    act = ap.add_mutually_exclusive_group()
    act.add_argument("--sample", dest="greedy", action="store_const", const=False,
                     help="sample network policies' actions (default: as the checkpoint says)")
    act.add_argument("--greedy", dest="greedy", action="store_const", const=True, help="act by the policy's argmax")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per policy")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    if args.jobsets < 1:
        ap.error(f"--jobsets must be >= 1, got {args.jobsets}")
    try:
        cfg = ClusterConfig(objective=args.objective, slo_slowdown=args.slo_slowdown, observation="none")
        policies = [resolve_policy(p, cfg, args.device, args.greedy, args.seed) for p in args.policy]
        # a checkpoint fixes the cluster; all policies in one table must share it (the reward they
        # were trained for may differ: the table measures every metric)
        cluster = policies[0][2]
        for name, _, other in policies[1:]:
            cluster.require_same_cluster(other, policies[0][0], name, may_differ=REWARD_FIELDS)
        trace_counts = {}  # with --trace, every JSON line also says what the mapping dropped and clipped
        if args.jobset_file and args.trace:
            raise ConfigError("give --jobset_file or --trace, not both")
        if args.jobset_file:
            jobs = JobSet.load(args.jobset_file)
            workload_desc = args.jobset_file
        elif args.trace:
            workload = trace_workload_from_args(args, cluster)
            jobs = make_jobsets(workload, args.jobsets, args.seed)
            workload_desc = workload.describe()
            report = workload.report
            trace_counts = {"trace_kept": report.kept, "trace_dropped": report.dropped,
                            "trace_clipped": report.clipped, "trace_split_jobs": report.split_jobs,
                            "trace_load": max(report.split_load)}
            print(f"trace {args.trace}: {report.job_lines} job lines, kept {report.kept}, dropped "
                  f"{sum(report.dropped.values())} {report.dropped}, clipped {report.clipped}; "
                  f"{report.split} split: {report.split_jobs} jobs, steps {report.split_steps}")
        else:
            workload = workload_from_args(args, cluster)
            jobs = make_jobsets(workload, args.jobsets, args.seed)
            workload_desc = (f"DeepRMWorkload(load={workload.load}, arrivals={workload.process}, "
                             f"simu_len={workload.simu_len}, short_prob={workload.short_prob})")
        if args.save_jobsets:
            jobs.save(args.save_jobsets, workload=workload_desc, seed=args.seed)
        jobs.validate(cluster)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print(f"{jobs.batch_size} jobsets x {args.episodes} episodes of {workload_desc}, seed {args.seed}, "
          f"objective {cluster.objective}; mean ± 95% CI over jobsets")
    print(f"{'policy':28s} {'mean slowdown':>16s} {'completion time':>16s} {'makespan':>14s} "
          f"{'utilization':>16s} {'SLO hit rate':>16s} {'jobs':>8s}")
    lines, results = [], []
    for name, policy, pcfg in policies:
        t0 = time.perf_counter()
        result = evaluate(policy, pcfg.replace(objective=cluster.objective, slo_slowdown=cluster.slo_slowdown),
                          jobs, episodes=args.episodes, device=args.device)
        summary = {"policy": name, **result.summary, **trace_counts, "seconds": round(time.perf_counter() - t0, 3)}
        print(format_row(name, summary), flush=True)
        if results:  # paired against the first policy on the same jobsets
            diff, ci = paired_difference(result, results[0], "mean_slowdown")
            summary["mean_slowdown_minus_first"], summary["mean_slowdown_minus_first_ci95"] = diff, ci
            print(f"  {'':26s} slowdown - {policies[0][0]}'s: {diff:+.3f} ± {ci:.3f} (paired)")
        results.append(result)
        if summary["unfinished_jobs"]:
            print(f"  note: {summary['unfinished_jobs']} jobs unfinished at max_time={pcfg.max_time} "
                  "(counted with f capped at the final time)")
        lines.append(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in summary.items()}))
    if args.json:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
