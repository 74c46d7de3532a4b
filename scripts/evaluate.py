r"""Evaluate policies (heuristics or trained checkpoints) on unseen jobsets of a workload.

    python scripts/evaluate.py --policy tetris sjf packer random --load 0.9 --jobsets 200 --seed 12345
    python scripts/evaluate.py --policy checkpoints/reinforce_slowdown.ckpt --load 1.3 --json
    python scripts/evaluate.py --trace LOG.swf.gz --fit_cluster --policy tetris sjf checkpoints/slots_slowdown.ckpt
    python scripts/evaluate.py --policy SLOTS.ckpt tetris --num_slots 20 --resource_units 20 --max_job_units 20 \
        --dominant_units 10 20 --other_units 1 4
    python scripts/evaluate.py --env queue --trace ../shared/traces/lublin_256.swf.gz --protocol rlscheduler \
        --backfill easy --policy fcfs sjf f1 checkpoints/queue_bsld.ckpt --json

--env queue replays an SWF log job by job in the queue environment (docs/hpc_queue.md): `--help`
with --env queue lists its flags.

The ClusterConfig flags (--num_slots, --resource_units, ...) set the cluster: heuristics use it
directly, a slot policy (PolicySpec kind "slots") runs on it whatever size it was trained on, and
DeepRM's image network is refused on any size but its own. Without them a checkpoint's own cluster
is used (DeepRM's for heuristics alone).

Prints a table of SPEC's episode metrics with 95% confidence half-widths over jobsets; with
--json, one JSON line per policy after the table (the last line is the last policy's), holding
mean_slowdown, mean_completion_time, makespan, utilization, slo_hit_rate, each with `_ci95`,
and num_jobs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import NAME_WIDTH, format_row, heuristic, run_main, set_threads, split_env, table_header, table_units
from lightning_sched import ClusterConfig, ConfigError, JobSet, seeds
from lightning_sched.cli import (
    THREADS_HELP,
    WORKLOAD_FLAGS,
    ScriptParser,
    add_cluster_flags,
    add_log_reading_flags,
    add_site_flags,
    add_trace_flags,
    add_workload_flags,
    at_least,
    idle_rule,
    positive_float,
    reward_from_args,
    seed_number,
    setup_from_args,
    site_from_args,
    thread_count,
    torch_device,
    workload_from_args,
)
from lightning_sched.config import REWARD_FIELDS
from lightning_sched.deeprm.objectives import OBJECTIVE_METRIC
from lightning_sched.evaluation import (
    ci_text,
    evaluate,
    json_line,
    make_jobsets,
    measured_jobsets,
    paired_difference,
    require_run_fits,
)
from lightning_sched.files import refuse_figure, refuse_output, write_figure
from lightning_sched.heuristics import HEURISTICS
from lightning_sched.policies.acting import IDLE_RULES, RENAMED_RULES, NetworkPolicy


def resolve_policy(spec: str, cfg: ClusterConfig, device, seed: int, resize: bool = False,
                   acting_flags: dict | None = None):
    """A heuristic name or a checkpoint path -> (display name, policy callable, its ClusterConfig);
    with `resize` a checkpoint runs on `cfg`'s size; it acts as it says with `acting_flags` on top
    (Acting.override: greedy, idle_rule, wait_rate)."""
    if spec in HEURISTICS:
        return spec, heuristic(spec, cfg, device, seed), cfg
    if spec.endswith(".ckpt"):
        from lightning_sched.policies.checkpoints import load_policy

        policy, ckpt_cfg = load_policy(spec, device=device, override=acting_flags, cluster=cfg if resize else None)
        return spec, policy, ckpt_cfg
    raise ConfigError(f"--policy {spec!r} is neither a heuristic ({', '.join(sorted(HEURISTICS))}) nor a .ckpt file")


def main(argv=None) -> int:
    env, argv = split_env(sys.argv[1:] if argv is None else list(argv))
    if env == "queue":
        return queue_main(argv)
    ap = deeprm_parser()
    args = ap.parse_args(argv)
    changed = [f"--{name}" for name in ("jobsets", *WORKLOAD_FLAGS) if getattr(args, name) != ap.get_default(name)]
    if args.jobset_file and changed:  # the file's jobsets are what runs (--seed still seeds random decisions)
        raise ConfigError(f"--jobset_file {args.jobset_file} fixes the jobsets: {', '.join(changed)} would change "
                          "nothing")
    set_threads(args.threads)
    if args.save_jobsets:
        refuse_output(args.save_jobsets, args.overwrite, "--save_jobsets",
                      [p for p in [*args.policy, args.jobset_file] if p and Path(p).suffix])
    checkpoints = [p for p in args.policy if p.endswith(".ckpt")]
    cfg, sized, trace = setup_from_args(args, checkpoints)
    if checkpoints and not sized:  # no size flags: the heuristics run on the cluster the first checkpoint knows
        from lightning_sched.policies.checkpoints import read_record

        cfg = read_record(checkpoints[0]).cluster.replace(observation="none", **reward_from_args(args))
    flags = {"greedy": args.greedy, "idle_rule": args.idle_rule, "wait_rate": args.wait_rate}
    policies = [resolve_policy(p, cfg, args.device, args.seed, sized, flags) for p in args.policy]
    networks = [(name, policy, pcfg) for name, policy, pcfg in policies if isinstance(policy, NetworkPolicy)]
    reads_rate = any(policy.acting.idle_rule == "while_frequent" for _, policy, _ in networks)
    if args.wait_rate is not None and not reads_rate:
        raise ConfigError(f"--wait_rate {args.wait_rate} changes nothing: no policy here acts with idle rule "
                          f"while_frequent (give --idle_rule while_frequent, or a checkpoint that acts so)")
    acting = [flag for flag, value in (("--greedy/--sample", args.greedy), ("--idle_rule", args.idle_rule))
              if value is not None]
    if acting and not networks:
        raise ConfigError(f"{acting[0]} changes nothing: it sets how a checkpoint's network acts, and no --policy "
                          "here is a checkpoint")
    for name, _, pcfg in networks:  # a network reads its jobs' deadlines: they are its cluster's
        if args.slo_slowdown not in (None, pcfg.slo_slowdown):
            raise ConfigError(f"--slo_slowdown {args.slo_slowdown}: {name} sees deadlines at slo_slowdown "
                              f"{pcfg.slo_slowdown} (its cluster's); evaluate it there, or heuristics alone at another")
    # a checkpoint fixes the cluster; all policies in one table must share it (the reward they
    # were trained for may differ: the table measures every metric, and --objective picks the paired one)
    cluster = policies[0][2].replace(**reward_from_args(args))
    for name, _, other in policies[1:]:
        cluster.require_same_cluster(other, policies[0][0], name, may_differ=REWARD_FIELDS)
    counts = len(policies), len(networks)  # the work budget's
    jobs, workload_desc, trace_counts = evaluation_jobsets(args, cluster, trace, counts)
    lines = compare_policies(policies, cluster, jobs, workload_desc, trace_counts, args)
    if args.json:
        print("\n".join(lines))
    return 0


def deeprm_parser() -> ScriptParser:
    """evaluate.py's flags for DeepRM's cluster."""
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=("deeprm", "queue"), default="deeprm",
                    help="deeprm: DeepRM's cluster (these flags); queue: an SWF log job by job (--env queue --help)")
    ap.add_argument("--policy", nargs="+", default=["tetris", "sjf", "packer", "random"],
                    help="heuristic names and/or checkpoint paths")
    add_workload_flags(ap)
    add_trace_flags(ap)
    add_cluster_flags(ap)
    ap.add_argument("--jobsets", type=at_least(1), default=200, help="number of unseen jobsets N")
    ap.add_argument("--episodes", type=at_least(1), default=1, help="episodes per jobset (for stochastic policies)")
    ap.add_argument("--seed", type=seed_number, default=seeds.EVALUATION,
                    help="seed of the jobsets drawn and of random decisions")
    ap.add_argument("--jobset_file", help="evaluate on jobsets saved with JobSet.save instead of drawing them")
    ap.add_argument("--save_jobsets", help="save the drawn jobsets to this file (an existing one: --overwrite)")
    ap.add_argument("--overwrite", action="store_true", help="let --save_jobsets replace an existing file")
    act = ap.add_mutually_exclusive_group()
    act.add_argument("--sample", dest="greedy", action="store_const", const=False,
                     help="sample network policies' actions (default: as the checkpoint says)")
    act.add_argument("--greedy", dest="greedy", action="store_const", const=True, help="act by the policy's argmax")
    ap.add_argument("--idle_rule", "--idle_void", type=idle_rule, metavar="{" + ",".join(IDLE_RULES) + "}",
                    help="when a network may leave capacity idle while a job fits now (acting.IDLE_RULES): "
                         "always (whenever it chooses); while_arriving (on an idle cluster only while jobs are "
                         "still to arrive); not_when_idle (never on an idle cluster); work_conserving (never at all); "
                         "while_frequent (as while_arriving while jobs arrive at least --wait_rate a step, else as "
                         "work_conserving). Default: as the checkpoint says, or the mode's default with "
                         "--greedy/--sample: not_when_idle / always. Old names: "
                         + ", ".join(f"{old} = {new}" for old, new in RENAMED_RULES.items()))
    ap.add_argument("--wait_rate", type=positive_float,
                    help="while_frequent's arrival rate, jobs a step (default: as the checkpoint says)")
    ap.add_argument("--device", type=torch_device, default="cpu")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per policy")
    return ap


def evaluation_jobsets(args, cluster, trace, counts: tuple[int, int]) -> tuple[JobSet, str, dict]:
    """(the jobsets every policy runs on: a file's, a trace's or the workload's, each checked against
    the work and memory budget; their description; with --trace what its mapping dropped and clipped)."""
    trace_counts = {}
    if args.jobset_file and trace:
        raise ConfigError("give --jobset_file or --trace, not both")
    if args.jobset_file:
        jobs, meta = JobSet.load_with_meta(args.jobset_file)
        require_run_fits(cluster, jobs.max_jobs, jobs.batch_size, args.episodes, "evaluate.py", *counts,
                         **{"--jobset_file": args.jobset_file})
        drawn = f" (saved from {meta['workload']}, seed {meta['seed']})" if {"workload", "seed"} <= set(meta) else ""
        workload_desc = args.jobset_file + drawn
    elif trace:
        workload = trace.workload(cluster)
        require_run_fits(cluster, workload.max_jobs, args.jobsets, args.episodes, "evaluate.py", *counts,
                         **{"--trace": trace.path})
        jobs = make_jobsets(workload, args.jobsets, args.seed)
        workload_desc = workload.describe()
        trace_counts = workload.report.counts()
        print(workload.report.line())
    else:
        workload = workload_from_args(args, cluster)
        workload.validate(cluster)
        require_run_fits(cluster, workload.max_jobs, args.jobsets, args.episodes, "evaluate.py", *counts,
                         **{"--resource_units": cluster.resource_units, "--load": workload.load,
                            "--simu_len": workload.simu_len})
        jobs = make_jobsets(workload, args.jobsets, args.seed)
        workload_desc = (f"DeepRMWorkload(load={workload.load}, arrivals={workload.process}, "
                         f"simu_len={workload.simu_len}, short_prob={workload.short_prob})")
    if args.save_jobsets:
        jobs.save(args.save_jobsets, overwrite=args.overwrite, workload=workload_desc, seed=args.seed)
    jobs.validate(cluster)
    if args.jobset_file:
        jobs.require_arrivals_in_episode(cluster)
    return jobs, workload_desc, trace_counts


def compare_policies(policies, cluster, jobs: JobSet, workload_desc: str, trace_counts: dict, args) -> list[str]:
    """Every policy on `jobs`, printed as a table with each one's paired difference to the first (the
    objective's metric, each listed policy's own objective's, and mean slowdown); the JSON lines of the rows."""
    seed = f"--seed {args.seed} for random decisions only" if args.jobset_file else f"seed {args.seed}"
    print(f"{jobs.batch_size} jobsets x {args.episodes} episodes of {workload_desc}, {seed}, "
          f"objective {cluster.objective}; mean ± 95% CI over jobsets")
    width = max(NAME_WIDTH, *(len(name) + 1 for name, _, _ in policies))  # long paths keep the columns aligned
    print(table_header(width=width))
    print(table_units(width))
    lines, results = [], []
    for name, policy, pcfg in policies:
        t0 = time.perf_counter()
        result = evaluate(policy, pcfg.replace(objective=cluster.objective, slo_slowdown=cluster.slo_slowdown),
                          jobs, episodes=args.episodes, device=args.device)
        summary = {"policy": name, **result.summary, **trace_counts, "seconds": round(time.perf_counter() - t0, 3)}
        print(format_row(name, summary, width), flush=True)
        # paired against the first policy on the same jobsets: the objective's metric, the metric of
        # every listed policy's own objective (a deadline policy's SLO hit rate), and mean slowdown
        paired = (OBJECTIVE_METRIC[cluster.objective], *(OBJECTIVE_METRIC[c.objective] for _, _, c in policies),
                  "mean_slowdown")
        for metric in dict.fromkeys(paired) if results else ():
            diff, ci = paired_difference(result, results[0], metric)
            summary[f"{metric}_minus_first"], summary[f"{metric}_minus_first_ci95"] = diff, ci
            print(f"{'':{width}s} {metric.replace('_', ' ')} - {policies[0][0]}'s: {diff:+.3f} ± {ci_text(ci, '.3f')} "
                  f"(paired 95% CI over {measured_jobsets(result.summary)})")
        results.append(result)
        if summary["unfinished_jobs"]:
            print(f"  note: {summary['unfinished_jobs']} jobs unfinished at max_time={pcfg.max_time} "
                  "(counted with f capped at the final time)")
        lines.append(json_line(summary))
    return lines


def queue_parser() -> ScriptParser:
    """evaluate.py --env queue's flags."""
    from lightning_sched.queue.config import BACKFILL, RULES, QueueConfig
    from lightning_sched.queue.evaluation import EVAL_LENGTH, PROTOCOLS, SEQUENCES
    from lightning_sched.queue.heuristics import HEURISTICS as QUEUE_HEURISTICS
    from lightning_sched.queue.reservation import SUFFIX

    ap = ScriptParser(prog="evaluate.py --env queue", description=queue_main.__doc__)
    ap.add_argument("--trace", nargs="+", help="SWF logs (.swf or .swf.gz): one case each (default: --site's log)")
    ap.add_argument("--protocol", choices=PROTOCOLS, default="rlscheduler",
                    help="rlscheduler (the default): its 10 sequences of 1024 jobs; heldout: --sequences sequences "
                         "of --sequence_length jobs from the log's last 20%%; recent: the same from 60-80%% (the "
                         "training range's end, to choose between trained policies); disjoint: the whole log cut "
                         "in sequences of --sequence_length that share no job (how a difference varies between "
                         "stretches; a trained policy's notes say how many hold jobs it read)")
    ap.add_argument("--policy", nargs="+", default=list(RULES),
                    help=f"rules ({', '.join(QUEUE_HEURISTICS)}; RULE{SUFFIX}, e.g. f1{SUFFIX}: the rule with its own "
                         f"reservation) and/or queue checkpoints (default: {' '.join(RULES)})")
    ap.add_argument("--backfill", choices=BACKFILL, nargs="+", default=["off"], help="one case each (default off)")
    ap.add_argument("--versus", metavar="POLICY",
                    help="one of --policy: also print every other policy's paired difference to it (e.g. a "
                         "trained policy against the rule it started from)")
    ap.add_argument("--sequences", type=at_least(2), help=f"heldout, recent: number of sequences (default "
                    f"{SEQUENCES}; rlscheduler has its own 10)")
    ap.add_argument("--sequence_length", type=at_least(2), default=EVAL_LENGTH,
                    help=f"heldout, recent: jobs in each sequence (default {EVAL_LENGTH}, RLScheduler's; shorter for a "
                         "small log)")
    add_log_reading_flags(ap)
    ap.add_argument("--bsld_threshold", type=positive_float, default=QueueConfig.bsld_threshold,
                    help=f"seconds (bounded slowdown; default {QueueConfig.bsld_threshold:g})")
    add_site_flags(ap)
    ap.add_argument("--figure", help="also draw every case's per-sequence values to this file (an existing one only "
                    "with --overwrite)")
    ap.add_argument("--overwrite", action="store_true", help="let --figure replace an existing file")
    ap.add_argument("--device", type=torch_device, default="cpu")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per case and policy")
    return ap


def queue_main(argv) -> int:
    """evaluate.py --env queue: policies on a log's sequences under a protocol (docs/hpc_queue.md)."""
    from lightning_sched.queue.evaluation import EVAL_LENGTH, RLSCHEDULER_PUBLISHED, SEQUENCES, run_protocol

    args = queue_parser().parse_args(argv)
    if args.protocol == "rlscheduler" and args.sequences is not None:
        raise ConfigError(f"--sequences {args.sequences}: the rlscheduler protocol (--protocol's default) has its "
                          "own 10 sequences; give --protocol heldout or recent")
    if args.protocol == "disjoint" and args.sequences is not None:
        raise ConfigError(f"--sequences {args.sequences}: the disjoint protocol takes every sequence of "
                          "--sequence_length jobs the log holds")
    if args.protocol == "rlscheduler" and args.sequence_length != EVAL_LENGTH:
        raise ConfigError(f"--sequence_length {args.sequence_length}: the rlscheduler protocol's sequences are "
                          f"{EVAL_LENGTH} jobs (--protocol's default); give --protocol heldout or recent")
    site_log, site = site_from_args(args)
    traces = args.trace or ([site_log] if site_log else None)
    if not traces:
        raise ConfigError("--trace: give one or more SWF logs (or a declared --site)")
    if args.figure:
        refuse_figure(args.figure, args.overwrite, "--figure", traces)
    set_threads(args.threads)
    lines, panels, reference = [], {}, {}
    said = set()  # notes on a checkpoint's training jobs: once a log, not again for each backfilling

    for trace in traces:
        for backfill in args.backfill:
            case, per_sequence = run_protocol(trace, args.protocol, args.policy, backfill=backfill,
                                              sequences=args.sequences or SEQUENCES, site=site,
                                              bsld_threshold=args.bsld_threshold, device=args.device,
                                              versus=args.versus, said=said, sequence_length=args.sequence_length,
                                              nodes=args.nodes, processors_per_node=args.processors_per_node,
                                              oversize=args.oversize)
            lines += case
            label = f"{Path(trace).name}, backfill {backfill}"
            panels[label] = per_sequence
            published = RLSCHEDULER_PUBLISHED.get((Path(trace).name, backfill)) if args.protocol == "rlscheduler" \
                else None
            if published:
                reference[label] = {"RLScheduler (published)": published}
    if args.figure:
        from lightning_sched.plots import queue_sequences

        write_figure(queue_sequences(panels, reference, title=f"protocol {args.protocol}"), args.figure, args.overwrite)
        print(f"figure: {args.figure}")
    if args.json:
        print("\n".join(json_line(line) for line in lines))
    return 0


if __name__ == "__main__":
    run_main(main)
