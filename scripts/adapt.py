"""Fine-tune a trained policy (a MAML meta-policy or any REINFORCE checkpoint) on a new workload
in a few REINFORCE steps, and save the adapted checkpoint.

    python scripts/adapt.py --ckpt checkpoints/maml.ckpt --steps 5 --load 1.2 --short_prob 0.5 --dominant_units 3 7
    python scripts/adapt.py --ckpt checkpoints/image_maml.ckpt --steps 5 \\
        --trace ../shared/traces/NASA-iPSC-1993-3.1-cln.swf.gz --seconds_per_step 600 \\
        --trace_capacity processors=128 --json
    python scripts/adapt.py --ckpt checkpoints/slots_slowdown.ckpt --steps 5 --trace LOG.swf.gz --fit_cluster

Each step draws --jobsets jobsets of the workload (seeds disjoint from evaluation's), rolls out
--episodes episodes of each, and takes one step (the baseline of the checkpoint's inner loop, else
DeepRM's time-indexed one). After step 0 and
every step it prints the metrics on --eval_jobsets unseen jobsets (acting as the checkpoint
says: sampled or greedy) and, in the last column, the objective's metric minus the best
heuristic's on the same jobsets (the reference line above the table), mean ± its paired 95% CI
over those jobsets: a difference whose interval holds 0 is no win; with --json one JSON
line per step, the last one the final metrics in the form of `scripts/evaluate.py --json`.
With --trace it adapts on the trace's train split and evaluates on --trace_split (default test).
The step size, optimizer and batch default to the meta-policy's inner loop when the checkpoint
has one, with its learned per-weight step sizes if it was meta-trained with them (Meta-SGD);
else SGD, lr 0.05, 20 x 20.

With --acting select, the adapted policy then acts in each mode (greedy or sampled, and each rule for
voiding while a job fits: `lightning_sched.policies.acting.IDLE_RULES`) on --select_jobsets jobsets of the
workload it adapted on (the train split for a trace; selection seeds, never the evaluation ones),
and the best mode is evaluated, printed as the last row and saved in the checkpoint. Whether
leaving capacity idle pays depends on the load, so a light log may want a work-conserving mode.

The adapted checkpoint goes to runs/adapted/<checkpoint name>.ckpt (-2, -3, ... appended when that
file exists), or to --out, which must not exist (unless --overwrite) nor be --ckpt.

--env queue adapts queue policies (e.g. checkpoints/queue_maml.ckpt) to a site or a log instead, with
flags of its own (--site, --trace, --policy, ...: `adapt.py --env queue --help`):

    python scripts/adapt.py --env queue --site nasa-exact --policy checkpoints/queue_maml.ckpt --steps 5
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import torch

from _common import (
    RUNS,
    format_row,
    heuristic,
    run_main,
    set_threads,
    split_env,
    table_header,
    table_units,
)
from lightning_sched import ClusterConfig, ConfigError, seeds
from lightning_sched.analysis import select_acting
from lightning_sched.cli import (
    THREADS_HELP,
    ScriptParser,
    add_cluster_flags,
    add_log_reading_flags,
    add_site_flags,
    add_trace_flags,
    add_workload_flags,
    at_least,
    positive_float,
    require_distinct,
    reward_from_args,
    seed_number,
    setup_from_args,
    site_from_args,
    thread_count,
    torch_device,
    workload_from_args,
)
from lightning_sched.deeprm.objectives import OBJECTIVE_METRIC
from lightning_sched.deeprm.rollout import rollout_seconds
from lightning_sched.evaluation import (
    EvalResult,
    ci_text,
    compare,
    evaluate,
    json_line,
    make_jobsets,
    measured_jobsets,
    paired_difference,
)
from lightning_sched.files import numbered_name, refuse_figure, refuse_output, write_figure
from lightning_sched.learning.adaptation import AdaptationSettings, adapt
from lightning_sched.limits import require_time
from lightning_sched.policies.acting import NetworkPolicy
from lightning_sched.policies.checkpoints import PolicyRecord, load_network

# the heuristics the adapted policy is compared with (random left out: it repeats only with its seed)
REFERENCE_HEURISTICS = ("tetris", "sjf", "packer", "edf")


def output_path(args) -> tuple[Path, bool]:
    """(where the adapted checkpoint goes, whether the user named it). Refused: --out equal to the
    checkpoint being adapted (a resumable Lightning checkpoint would become a policy-only file) and
    an existing --out without --overwrite. The default, runs/adapted/<ckpt name>.ckpt, takes -2,
    -3, ... when taken (checked again as it is written: files.write_file)."""
    if args.out is None:  # the name the file will take unless another run takes it first
        base = RUNS / "adapted" / f"{Path(args.ckpt).stem}.ckpt"
        return next(p for p in (numbered_name(base, n) for n in itertools.count(1)) if not p.exists()), False
    refuse_output(args.out, args.overwrite, "--out", args.ckpt)
    return Path(args.out), True


def heuristic_reference(cfg: ClusterConfig, eval_jobs, metric: str, device) -> tuple[str, EvalResult]:
    """(the best deterministic heuristic on the evaluation jobsets by `metric`, its EvalResult)."""
    results = compare({h: heuristic(h, cfg, device) for h in REFERENCE_HEURISTICS}, cfg, eval_jobs, device=device)
    best = results.best(metric=metric)
    return best, results.results[best]


def deeprm_parser() -> ScriptParser:
    """adapt.py's flags for DeepRM's cluster (--env deeprm, the default)."""
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=("deeprm", "queue"), default="deeprm",
                    help="deeprm: DeepRM's cluster (these flags); queue: a queue policy on a site or log (its own "
                         "flags: --env queue --help)")
    ap.add_argument("--ckpt", required=True, help="checkpoint to adapt")
    ap.add_argument("--steps", type=at_least(0), default=5, help="adaptation steps K")
    add_workload_flags(ap)
    add_trace_flags(ap)
    add_cluster_flags(ap, reward_default=False)
    ap.add_argument("--jobsets", type=at_least(1), help="jobsets per step (default: its inner loop, else 20)")
    ap.add_argument("--episodes", type=at_least(1), help="episodes per jobset and step (default: inner loop, else 20)")
    ap.add_argument("--lr", type=positive_float, help="step size (default: the meta-policy's inner lr, else 0.05; with "
                    "learned per-weight step sizes each weight moves by lr * its own)")
    ap.add_argument("--optimizer", choices=("sgd", "adam", "rmsprop"),
                    help="default: the meta-policy's inner optimizer, else sgd")
    ap.add_argument("--no_normalize", action="store_true",
                    help="raw advantages (default: normalized, as the inner loop)")
    ap.add_argument("--eval_jobsets", type=at_least(1), default=200, help="unseen jobsets the metrics are measured on")
    ap.add_argument("--eval_every", type=at_least(1), default=1, help="measure after every N-th step (and the last)")
    ap.add_argument("--seed", type=seed_number, default=0, help="seed of the adaptation jobsets and actions")
    ap.add_argument("--acting", choices=("saved", "select"), default="saved",
                    help="saved: act as the checkpoint says; select: pick the best acting mode on the adaptation "
                         "workload after the last step, and save it")
    ap.add_argument("--select_jobsets", type=at_least(1), default=200,
                    help="jobsets of the adaptation workload (selection seeds) that --acting select scores on")
    ap.add_argument("--out", help="adapted checkpoint (default: runs/adapted/<ckpt name>.ckpt, with -2, -3, ... "
                    "when taken)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out (never --ckpt itself)")
    ap.add_argument("--device", type=torch_device, default="cpu")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--json", action="store_true")
    return ap


def adaptation_workloads(args, cfg, trace) -> tuple:
    """(the workload evaluated on, the one adapted on, their descriptions, the trace's counts or {}):
    a trace's test split adapts on its train split (the history before it); a synthetic workload
    adapts and is evaluated on the same workload (other jobsets)."""
    if trace:
        workload = trace.workload(cfg)
        if args.trace_split == "test":  # adapt on the history before the held-out range
            train = trace.workload(cfg, split="train")
        else:
            train = workload
        train_desc, eval_desc = train.describe(), workload.describe()
        trace_counts = workload.report.counts()
    else:
        workload = train = workload_from_args(args, cfg)
        workload.validate(cfg)
        train_desc = f"DeepRMWorkload({', '.join(f'{k}={v}' for k, v in workload.to_dict().items())})"
        eval_desc = "the same workload"
        trace_counts = {}
    return workload, train, train_desc, eval_desc, trace_counts


def main(argv=None) -> int:
    env, argv = split_env(sys.argv[1:] if argv is None else argv)
    if env == "queue":
        return queue_main(argv)
    ap = deeprm_parser()
    args = ap.parse_args(argv)
    if args.select_jobsets != ap.get_default("select_jobsets") and args.acting != "select":
        raise ConfigError(f"--select_jobsets {args.select_jobsets} changes nothing: give --acting select")
    set_threads(args.threads)
    out, named = output_path(args)  # before adapting: a refused --out costs nothing
    cluster, sized, trace = setup_from_args(args, [args.ckpt])
    net, cfg, record = load_network(args.ckpt, args.device, cluster if sized else None)
    cfg = cfg.replace(**reward_from_args(args))
    settings = AdaptationSettings.from_checkpoint(
        record.adaptation, args.steps, jobsets=args.jobsets, episodes=args.episodes, lr=args.lr,
        optimizer=args.optimizer,
        normalize_advantage=False if args.no_normalize else None)
    workload, train, train_desc, eval_desc, trace_counts = adaptation_workloads(args, cfg, trace)
    require_time("adapt.py", {  # the whole run's rollouts, before the first draw
        "the heuristics' reference": len(REFERENCE_HEURISTICS) * rollout_seconds(workload.max_jobs, args.eval_jobsets),
        "evaluations": (settings.steps // args.eval_every + 2) * rollout_seconds(workload.max_jobs, args.eval_jobsets,
                                                                                 network=True),
        "adaptation steps": settings.steps * rollout_seconds(train.max_jobs, settings.jobsets * settings.episodes,
                                                             network=True)},
        {"--steps": settings.steps, "--jobsets": settings.jobsets, "--episodes": settings.episodes,
         "--eval_jobsets": args.eval_jobsets, "job columns": workload.max_jobs})
    eval_jobs = make_jobsets(workload, args.eval_jobsets, seeds.EVALUATION)
    if trace:  # what the mapping kept, dropped and clipped, on each split it reads
        print(train.report.line())
        if train is not workload:
            print(workload.report.line())
    learned = (record.adaptation or {}).get("step_sizes") is not None
    print(f"adapting {args.ckpt} on {train_desc}: {settings}"
          + (" with learned per-weight step sizes" if settings.step_sizes is not None else "")
          + (" (the checkpoint's learned step sizes scale SGD only: not used)"
             if learned and settings.step_sizes is None else ""))
    print(f"evaluating on {args.eval_jobsets} unseen jobsets of {eval_desc}; saving to {out}")
    metric = OBJECTIVE_METRIC[cfg.objective]
    best, best_result = heuristic_reference(cfg, eval_jobs, metric, args.device)
    reference = best_result.summary[metric]
    print(f"reference: best heuristic {best}, {metric} {reference:.3f} on the same jobsets "
          f"(of {', '.join(REFERENCE_HEURISTICS)}); the last column: {metric} minus {best}'s, mean ± paired 95% CI "
          f"over the {measured_jobsets(best_result.summary)}")
    print(f"{table_header('step')} {metric + ' - ' + best:>24s}")
    measured = f"paired, {best_result.summary['jobsets_with_jobs']} jobsets"
    print(f"{table_units():{len(table_header('step'))}s} {measured:>24s}")

    def report(step, summary, result):
        diff, ci = paired_difference(result, best_result, metric)
        paired = f"{diff:+.3f} ± {ci_text(ci, '.3f')}"
        print(f"{format_row(f'step {step}', summary)} {paired:>24s}", flush=True)
        if args.json:
            print(json_line({"policy": args.ckpt, **summary, **trace_counts,
                             "reference": {"heuristic": best, metric: reference},
                             "minus_reference": {"mean": diff, "ci95": ci,
                                                 "jobsets": result.summary["jobsets_with_jobs"]}}), flush=True)

    acting = record.acting
    adapt(net, cfg, train, settings, eval_jobs, seed=args.seed, device=args.device, acting=acting, report=report,
          eval_steps=set(range(0, args.steps + 1, args.eval_every)))
    selected = None
    if args.acting == "select":
        select_jobs = make_jobsets(train, args.select_jobsets, seeds.SELECTION)
        acting, scores = select_acting(net, cfg, select_jobs, metric, seed=args.seed, device=args.device,
                                       wait_rate=acting.wait_rate)
        print(f"acting modes on {args.select_jobsets} selection jobsets of the adaptation workload, {metric}: "
              + ", ".join(f"{name} {value:.3f}" for name, value in scores.items()))
        selected = {"metric": metric, "jobsets": args.select_jobsets, "seed": seeds.SELECTION, "scores": scores}
        policy = NetworkPolicy(net, acting, torch.Generator(device=args.device).manual_seed(args.seed))
        result = evaluate(policy, cfg, eval_jobs, device=args.device)
        report(str(acting), {"step": args.steps, "acting": str(acting), **result.summary}, result)
    # the name is checked again as the file appears: another run may have taken it meanwhile
    out = PolicyRecord.of(net, acting, adaptation=dict(vars(settings)), adapted_from=str(args.ckpt),
                          adapted_on=train_desc, acting_selected=selected).save(
        out if named else RUNS / "adapted" / f"{Path(args.ckpt).stem}.ckpt", overwrite=args.overwrite,
        numbered=not named)
    print(f"saved {out}", file=sys.stderr)  # stdout's last line stays the final metrics (--json)
    return 0


def queue_main(argv) -> int:
    """adapt.py --env queue: queue policies adapted to a site in a few REINFORCE steps on its own
    history (its first 80%), each measured greedily after every step on sequences of 1024 jobs (or
    --eval_sequence_length) from the rest (docs/hpc_queue.md, "Sites"), with the rules and paired
    differences on the same sequences."""
    from lightning_sched.queue.adaptation import QueueInnerLoop
    from lightning_sched.queue.evaluation import EVAL_LENGTH, TRAIN_FRACTION, overlap, overlap_note, protocol_starts
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.policy import QueuePolicyRecord, read_queue_record

    args = queue_parser(EVAL_LENGTH).parse_args(argv)
    beyond = [step for step in args.measure or () if step > args.steps]
    if beyond:
        raise ConfigError(f"--measure {beyond[0]} is beyond --steps {args.steps}")
    for flag, path in (("--out", args.out), ("--figure", args.figure)):
        if path:  # before the adaptation's minutes; checked again as the file is written
            (refuse_figure if flag == "--figure" else refuse_output)(path, args.overwrite, flag,
                                                                      [p for p in args.policy if p != "scratch"])
    require_distinct("--policy", args.policy)  # one curve each
    if args.out and args.figure and Path(args.out).resolve() == Path(args.figure).resolve():
        raise ConfigError(f"--out {args.out} is also --figure: one would replace the other")
    if args.reference is not None and args.reference not in args.policy:
        raise ConfigError(f"--reference {args.reference!r} must be one of --policy")
    records = {spec: read_queue_record(spec) for spec in args.policy if spec != "scratch"}  # before the rules run
    # each one's inner loop (a damaged one refused here too, naming its file); 'scratch' adapts with the defaults
    inner_loops = {spec: QueueInnerLoop.of(records[spec].adaptation, spec) if spec in records else QueueInnerLoop()
                   for spec in args.policy}
    site_log, site = site_from_args(args)
    trace = args.trace or site_log
    if trace is None:
        raise ConfigError("--trace: give an SWF log (or a declared --site)")
    set_threads(args.threads)
    log = read_queue_log(trace, args.nodes, args.processors_per_node, args.oversize)
    log = site.apply(log) if site is not None else log
    cfg = log.config(sequence_length=args.eval_sequence_length, backfill=args.backfill)
    held_out = log.num_jobs - log.jobs_before(TRAIN_FRACTION)
    if args.eval_sequence_length > held_out:  # said in this script's flag
        raise ConfigError(f"--eval_sequence_length {args.eval_sequence_length} is longer than the {held_out} jobs "
                          f"after the first {TRAIN_FRACTION:.0%} of {Path(trace).name}: give a shorter one")
    starts = protocol_starts(log, "heldout", args.eval_sequences, args.eval_sequence_length)
    train_jobs = log.jobs_before(TRAIN_FRACTION)
    if args.sequence_length > train_jobs:  # the steps' sequences come from the history: said before the rules run
        raise ConfigError(f"--sequence_length {args.sequence_length} is longer than the site's history, its first "
                          f"{train_jobs} jobs ({TRAIN_FRACTION:.0%} of {Path(trace).name})")
    print(log.describe())
    fewer = f" (of {args.eval_sequences} asked: the range has no more distinct starts)" \
        if len(starts) < args.eval_sequences else ""
    spread = overlap(starts, args.eval_sequence_length)
    print(f"adapting on its first {train_jobs} jobs (sequences of {args.sequence_length}); measured on "
          f"{len(starts)} sequences{fewer} of {args.eval_sequence_length} jobs after them, backfill {args.backfill}, "
          f"{overlap_note(spread, args.eval_sequence_length, len(starts))}; mean bounded slowdown ± 95% CI over "
          "sequences, differences paired")
    rules, best = rules_on_site(log, cfg, starts, train_jobs, args.json)
    curves, (net, policy_cfg) = adapt_policies(args, records, inner_loops, log, cfg, starts, train_jobs)
    print_curves(curves, rules[best], best, args.reference, {"site": log.summary(), **spread}, starts, args.json)
    if args.figure:
        from lightning_sched.evaluation import mean_ci95
        from lightning_sched.plots import adaptation_curves

        site_name = site.name if site is not None else Path(trace).name
        fig = adaptation_curves({site_name: {Path(s).stem: {k: mean_ci95(v) for k, v in c.items()}
                                             for s, c in curves.items()}},
                                {site_name: {f"{best} (best rule)": mean_ci95(rules[best])}},
                                ylabel="mean bounded slowdown", title="adapted to the site's first 80%")
        write_figure(fig, args.figure, args.overwrite)
        print(f"figure: {args.figure}", file=sys.stderr)
    if args.out:  # the first --policy, adapted
        # what it read: what its start trained on, and the site's first 80% (an evaluation warns of both)
        source = records.get(args.policy[0])
        read = source.log_shares() if source else {}
        site_log = log.summary()["log"]
        read[site_log] = max(read.get(site_log, 0.0), TRAIN_FRACTION)
        record = QueuePolicyRecord.of(net, replace(policy_cfg, sequence_length=args.sequence_length),
                                      list(read), tuple(read.values()))
        record.save(args.out, args.overwrite)
        print(f"saved {args.out}", file=sys.stderr)
    return 0


def queue_parser(eval_length: int) -> ScriptParser:
    """adapt.py --env queue's flags."""
    from lightning_sched.queue.adaptation import QueueInnerLoop  # a policy without a record's inner loop

    ap = ScriptParser(prog="adapt.py --env queue", description=queue_main.__doc__)
    ap.add_argument("--policy", nargs="+", required=True,
                    help="queue checkpoints, and/or 'scratch' (a fresh network seeded by --seed)")
    ap.add_argument("--reference", help="one of --policy that every other is compared with after the same steps "
                                        "(e.g. the mixture baseline)")
    ap.add_argument("--trace", help="an SWF log (default: --site's)")
    add_log_reading_flags(ap)
    add_site_flags(ap)
    ap.add_argument("--steps", type=at_least(0), default=5,
                    help="adaptation steps, the same for every --policy so that their curves compare (a meta-policy's "
                    "recorded inner-loop steps are those of its training, not a default here)")
    ap.add_argument("--measure", type=at_least(0), nargs="+", help="steps after which to measure (default 0..steps)")
    ap.add_argument("--lr", type=positive_float,
                    help=f"step size (default: the checkpoint's inner lr, else {QueueInnerLoop.lr}; with its "
                    "recorded per-weight step sizes, learned by Meta-SGD or fixed by inner_params, each weight "
                    "moves by lr * its own)")
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--sequences", type=at_least(1),
                    help=f"sequences a step (default: its inner loop's, else {QueueInnerLoop.sequences})")
    ap.add_argument("--sequence_length", type=at_least(2), default=256,
                    help="jobs in each adaptation sequence")
    ap.add_argument("--episodes", type=at_least(2),
                    help=f"episodes of each (default: inner loop's, else {QueueInnerLoop.episodes})")
    ap.add_argument("--eval_sequences", type=at_least(2), default=50, help="test sequences from the last 20%%")
    ap.add_argument("--eval_sequence_length", type=at_least(2), default=eval_length,
                    help=f"jobs in each test sequence (default {eval_length}, RLScheduler's; shorter for a small log)")
    ap.add_argument("--backfill", choices=("off", "easy"), default="off")
    ap.add_argument("--seed", type=seed_number, default=0, help="seed of the adaptation sequences and actions")
    ap.add_argument("--out", help="save the first --policy, adapted, to this new file")
    ap.add_argument("--figure", help="draw the curves to this new file")
    ap.add_argument("--overwrite", action="store_true", help="let --out and --figure replace existing files")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per policy and step")
    return ap


def rules_on_site(log, cfg, starts, train_jobs: int, as_json: bool) -> tuple[dict, str]:
    """The five rules on the test sequences `starts`, printed with the best one and the one the site's
    own history picks (the non-meta way to adapt: run every rule on the first `train_jobs` jobs and keep
    the best there); ({rule: per-sequence mean bounded slowdown}, the best rule's name)."""
    from lightning_sched.evaluation import mean_ci95
    from lightning_sched.queue.evaluation import RULES, evaluate_queue, heuristic_policies, spread_starts

    rule_policies = heuristic_policies(RULES, cfg)
    rules = {name: evaluate_queue(policy, rule_cfg, log, starts).sequences["mean_bounded_slowdown"]
             for name, (policy, rule_cfg) in rule_policies.items()}
    best = min(rules, key=lambda n: float(rules[n].mean()))
    history = spread_starts(log, 0, train_jobs, len(starts), cfg.sequence_length)
    on_history = {name: float(evaluate_queue(policy, rule_cfg, log, history).sequences["mean_bounded_slowdown"].mean())
                  for name, (policy, rule_cfg) in rule_policies.items()}
    chosen = min(on_history, key=on_history.get)
    for name, values in rules.items():
        mean, ci = mean_ci95(values)
        print(f"  {name:8s} {mean:9.2f} ± {ci_text(ci, '7.2f')}"
              + ("  (best rule on these sequences)" if name == best else "")
              + ("  (best rule on the site's history)" if name == chosen else ""))
    if as_json:
        diff, diff_ci = mean_ci95(rules[chosen] - rules[best])
        print(json_line({"policy": f"{chosen} (best rule on the site's history)", "site": log.summary(),
                         "mean_bounded_slowdown": mean_ci95(rules[chosen])[0], "sequences": len(starts),
                          "best_rule": best, "minus_best_rule": diff, "minus_best_rule_ci95": diff_ci}))
    return rules, best


def adapt_policies(args, records: dict, inner_loops: dict, log, cfg, starts, train_jobs: int) -> tuple[dict, tuple]:
    """Each --policy (a checkpoint, or 'scratch': a fresh network) adapted with its inner loop's settings
    (`inner_loops`: a QueueInnerLoop by policy) unless the flags say otherwise, measured after the steps
    --measure names: ({policy: {step: per-sequence values}}, (the first policy adapted, its queue config))."""
    from lightning_sched.queue.adaptation import adaptation_curve
    from lightning_sched.queue.evaluation import network_config
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicySpec, queue_network

    curves, adapted_first = {}, None
    for spec in args.policy:
        if spec == "scratch":
            torch.manual_seed(args.seed)
            net, trained = QueueNetwork(QueuePolicySpec()), cfg
        else:
            net, trained = queue_network(records[spec], spec), records[spec].queue
        inner = inner_loops[spec]
        policy_cfg = network_config(cfg, trained)
        lr = args.lr or inner.lr
        step_sizes = inner.step_sizes if args.optimizer == "sgd" else None  # Meta-SGD's: they scale SGD
        if step_sizes is not None:
            print(f"{spec}: adapting with its recorded per-weight step sizes (times lr {lr}; Meta-SGD's learned "
                  "ones, or 0 on the weights its inner loop leaves alone)")
        curves[spec], net = adaptation_curve(net, log, policy_cfg, starts, args.steps, lr,
                                             args.sequences or inner.sequences, args.episodes or inner.episodes,
                                             train_jobs, args.seed,
                                             args.optimizer, train_length=args.sequence_length,
                                             measure_at=args.measure, step_sizes=step_sizes)
        adapted_first = adapted_first or (net, policy_cfg)
    return curves, adapted_first


def print_curves(curves: dict, best_values, best: str, reference: str | None, context: dict, starts,
                 as_json: bool) -> None:
    """Every policy's mean after each measured step, minus the best rule's and minus --reference's after
    the same step (paired over the test sequences, at `starts`, with the halves of each difference);
    `context`: the site's summary and the sequences' overlap, in every JSON line."""
    from lightning_sched.evaluation import mean_ci95
    from lightning_sched.queue.evaluation import halves, halves_text

    def add_paired(line: dict, diff, name: str) -> str:
        """`line` gets minus_NAME, its CI and halves; returns them as printed."""
        line[f"minus_{name}"], line[f"minus_{name}_ci95"] = mean_ci95(diff)
        split = line[f"minus_{name}_halves"] = halves(diff, starts)
        return (f"{line[f'minus_{name}']:+8.2f} ± {ci_text(line[f'minus_{name}_ci95'], '6.2f')}"
                + (f" ({halves_text(split)})" if split is not None else ""))

    for spec, curve in curves.items():
        for step, values in curve.items():
            mean, ci = mean_ci95(values)
            text = f"{spec:40s} step {step:3d}  {mean:9.2f} ± {ci_text(ci, '7.2f')}"
            line = {"policy": spec, "step": step, **context, "mean_bounded_slowdown": mean,
                    "mean_bounded_slowdown_ci95": ci, "sequences": len(values), "best_rule": best}
            text += f"  minus {best}: {add_paired(line, values - best_values, 'best_rule')}"
            if reference and spec != reference and step in curves[reference]:
                line["reference"] = reference
                text += f"  minus reference: {add_paired(line, values - curves[reference][step], 'reference')}"
            print(text + f"  ({len(values)} sequences)")
            if as_json:
                print(json_line(line))


if __name__ == "__main__":
    run_main(main)
