"""Experiment: a priority rule searched directly on the objective (docs/hpc_queue_rounds.md, "A seventh round").

This searches a linear rule (lightning_sched.queue.linear_rule: score = sum_k w_k * scale_k *
feature_k over the job features the rules read, lowest first) with the cross-entropy method: each
generation draws a population of weights around the current mean, runs every one on the same
training sequences (common random numbers), and moves the mean to the best fifth. The objective
is the mean bounded slowdown itself (no gradient, no surrogate), each sequence relative to the
current mean's, averaged over the logs so that each weighs the same. It starts at F1 (area 1,
log submit 1, the rest 0); the area weight stays 1 (an argmin does not change when every weight
is scaled). Training sequences come from the first 60% of each log; the result is then run on the
`recent` (60-80%), `heldout` (last 20%) and `rlscheduler` protocols beside the five rules.
The same search runs through fit.py (tasks/queue_rule_search.py, configs/base/queue_rule.yaml);
this script adds the searches of the docs' tables: --reserve (the rule's own reservation, with the
five rules' reserving versions in the evaluation), --site (a declared site of lightning_sched.queue.sites), --start.

    python scripts/experiments/queue_rule_search.py --trace ../shared/traces/lublin_256.swf.gz \
        ../shared/traces/lublin_256_new2.swf.gz --backfill easy --train_sequences 64 --seed 1 --threads 1 --json
    # 25 min on one core with a run beside it; --save PATH writes the rule as a checkpoint
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.files import refuse_output  # noqa: E402
from lightning_sched.queue.evaluation import (  # noqa: E402
    EVAL_LENGTH,
    compare_queue,
    heuristic_config,
    heuristic_policies,
    paired,
    protocol_starts,
)
from lightning_sched.queue.heuristics import RULES  # noqa: E402
from lightning_sched.queue.linear_rule import BASIC, RULE_FEATURES, LinearRule, save_linear_rule  # noqa: E402
from lightning_sched.queue.log import read_queue_log  # noqa: E402
from lightning_sched.queue.reservation import SUFFIX, ReservingRule  # noqa: E402
from lightning_sched.queue.rule_search import (  # noqa: E402
    SEARCH_TRAIN_FRACTION,
    CrossEntropyMethod,
    SearchSettings,
    f1_start,
    relative_scores,
    training_starts,
)
from lightning_sched.queue.sites import TRACES_DIR, declared_sites, site_log  # noqa: E402


def search(logs, cfgs, train_starts, args, echo) -> torch.Tensor:
    """The cross-entropy method from F1 (queue.rule_search); returns the final mean weights, DoubleTensor[K]."""
    settings = SearchSettings(args.population, args.elite, args.sigma, args.context)
    weights = torch.tensor(args.start, dtype=torch.double) if args.start else f1_start(settings)
    cem = CrossEntropyMethod([weights], settings, args.seed)
    start = time.time()
    for generation in range(args.generations):
        best = cem.step(score=lambda w: relative_scores(w, logs, cfgs, train_starts, args.reserve))
        echo(f"generation {generation}: best {best:.4f} of the mean's bounded slowdown, "
             f"mean {[round(w, 3) for w in weights.tolist()]} ({time.time() - start:.0f} s)")
    return weights


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", help="SWF logs of one cluster size, searched jointly")
    parser.add_argument("--site", nargs="+", help="declared sites instead (lightning_sched.queue.sites), each its "
                        "log rewritten with the site's hidden parameters; logs from --traces_dir")
    parser.add_argument("--traces_dir", default=TRACES_DIR)
    parser.add_argument("--start", type=float, nargs="+", help="the search's first mean (default F1's weights)")
    parser.add_argument("--protocols", nargs="+", default=["recent", "heldout", "rlscheduler"],
                        choices=["recent", "heldout", "rlscheduler"])
    parser.add_argument("--backfill", default="off", choices=["off", "easy"])
    parser.add_argument("--train_sequences", type=int, default=32, help="per log, drawn from its first 60%%")
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--elite", type=int, default=6)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.5, help="the first generation's spread of each weight")
    parser.add_argument("--sequences", type=int, default=100, help="per protocol, for the evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", action="store_true", help="also search the features that read the queue length")
    parser.add_argument("--weights", type=float, nargs="+", help="evaluate these weights (7, or 9 with the queue "
                        "length's), no search")
    parser.add_argument("--reserve", action="store_true", help="the rule plays with its own reservation "
                        "(queue.reservation); the evaluation adds the five rules with theirs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", help="write the rule as a checkpoint (evaluate.py --policy reads it)")
    parser.add_argument("--overwrite", action="store_true", help="let --save replace an existing file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.weights and len(args.weights) not in (BASIC, len(RULE_FEATURES)):
        parser.error(f"--weights takes {BASIC} or {len(RULE_FEATURES)} numbers (RULE_FEATURES), "
                     f"got {len(args.weights)}")
    if args.save:  # before the search's minutes; save_linear_rule checks again as it writes
        refuse_output(args.save, args.overwrite, "--save")
    set_threads(args.threads)
    echo = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else print
    if bool(args.trace) == bool(args.site):
        parser.error("give --trace or --site")
    if args.site:
        declared = declared_sites()
        unknown = [name for name in args.site if name not in declared]
        if unknown:
            parser.error(f"--site must be among {', '.join(declared)}, got {unknown[0]!r}")
        logs = [site_log(*declared[name], args.traces_dir) for name in args.site]
        args.trace = list(args.site)  # the names the outputs carry
    else:
        logs = [read_queue_log(path) for path in args.trace]
    cfgs = [heuristic_config(log.config(sequence_length=EVAL_LENGTH, backfill=args.backfill), args.reserve)
            for log in logs]
    train_starts = training_starts(logs, args.train_sequences, args.seed)
    weights = torch.tensor(args.weights, dtype=torch.double) if args.weights else \
        search(logs, cfgs, train_starts, args, echo)
    if args.save:
        save_linear_rule(args.save, weights.tolist(), overwrite=args.overwrite, reserve=args.reserve, provenance={
            "logs": [Path(p).name for p in args.trace], "backfill": args.backfill,
            "train_fraction": SEARCH_TRAIN_FRACTION,
            "search": "cross-entropy method" if not args.weights else "given weights",
            **{k: getattr(args, k) for k in ("train_sequences", "population", "elite", "generations", "sigma",
                                             "seed")}, "start": args.start or "f1"})
        echo(f"wrote {args.save}")
    for path, log, cfg in zip(args.trace, logs, cfgs):
        for protocol in args.protocols:
            starts = protocol_starts(log, protocol, args.sequences)
            reserving = {f"{rule}{SUFFIX}": (ReservingRule(rule), cfg) for rule in RULES} if args.reserve else {}
            results = compare_queue({**heuristic_policies(RULES, cfg), **reserving,
                                     "searched": (LinearRule(weights, args.reserve), cfg)}, log, starts)
            score = {name: result.summary["mean_bounded_slowdown"] for name, result in results.items()}
            best = min(RULES, key=score.get)
            diff, ci = paired(results["searched"], results[best])
            extra = {}
            if args.reserve:  # the same reservation around the five rules: what the searched ranking adds
                best_reserving = min(reserving, key=score.get)
                extra = dict(zip(("best_reserving_rule", "minus_best_reserving_rule", "minus_best_reserving_rule_ci95"),
                                 (best_reserving, *paired(results["searched"], results[best_reserving]))))
            line = {"trace": Path(path).name, "backfill": args.backfill, "protocol": protocol, **score,
                    "best_rule": best, "minus_best_rule": diff, "minus_best_rule_ci95": ci, **extra,
                    "reserve": args.reserve,
                    "weights": dict(zip([n for n, _ in RULE_FEATURES], weights.tolist())),
                    "context": len(weights) > BASIC,
                    "train_sequences": args.train_sequences, "generations": args.generations,
                    "population": args.population, "seed": args.seed}
            print(json.dumps(line) if args.json else
                  f"{line['trace']} {protocol} backfill {args.backfill}: searched rule {line['searched']:.2f}, "
                  f"best rule {best} {score[best]:.2f}, minus it {diff:+.2f} ± {ci:.2f}", flush=True)


if __name__ == "__main__":
    run_main(main)
