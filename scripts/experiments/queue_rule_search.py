"""Experiment: a priority rule searched directly on the objective (docs/hpc_queue.md, "A seventh round").

This searches a linear rule (lightning_sched.queue.linear_rule: score = sum_k w_k * scale_k *
feature_k over the job features the rules read, lowest first) with the cross-entropy method: each
generation draws a population of weights around the current mean, runs every one on the same
training sequences (common random numbers), and moves the mean to the best fifth. The objective
is the mean bounded slowdown itself (no gradient, no surrogate), each sequence relative to the
current mean's, averaged over the logs so that each weighs the same. It starts at F1 (area 1,
log submit 1, the rest 0); the area weight stays 1 (an argmin does not change when every weight
is scaled). Training sequences come from the first 60% of each log; the result is then run on the
`recent` (60-80%), `heldout` (last 20%) and `rlscheduler` protocols beside the five rules.

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
from _common import set_threads  # noqa: E402
from lightning_sched.queue.evaluation import (  # noqa: E402
    EVAL_LENGTH,
    RECENT_FRACTION,
    compare_queue,
    evaluate_queue,
    heuristic_config,
    heuristic_policies,
    paired,
    protocol_starts,
)
from lightning_sched.queue.heuristics import RULES  # noqa: E402
from lightning_sched.queue.linear_rule import BASIC, F1_WEIGHTS, FEATURES, LinearRule, save_linear_rule  # noqa: E402
from lightning_sched.queue.log import read_queue_log  # noqa: E402


def run(weights: torch.Tensor, log, cfg, starts: torch.Tensor) -> torch.Tensor:
    """Every weight row [P, K] on every start [S]: mean bounded slowdowns, DoubleTensor[P, S]."""
    p, s = weights.shape[0], starts.numel()
    result = evaluate_queue(LinearRule(weights.repeat_interleave(s, 0)), cfg, log, starts.repeat(p))
    return result.sequences["mean_bounded_slowdown"].reshape(p, s)


def search(logs, cfgs, train_starts, args, echo) -> torch.Tensor:
    """The cross-entropy method from F1; returns the final mean weights, DoubleTensor[K]."""
    g = torch.Generator().manual_seed(args.seed)
    mean = torch.tensor(F1_WEIGHTS[:len(FEATURES) if args.context else BASIC], dtype=torch.double)
    std = torch.full_like(mean, args.sigma)
    std[0] = 0.0  # the area weight stays 1
    start = time.time()
    for generation in range(args.generations):
        weights = mean + std * torch.randn(args.population, len(mean), generator=g, dtype=torch.double)
        weights[0] = mean  # the current mean runs too: the reference of every sequence
        relative = torch.stack([(b / b[:1]).mean(1) for b in (run(weights, log, cfg, st) for log, cfg, st in
                                                              zip(logs, cfgs, train_starts))]).mean(0)
        elite = weights[relative.argsort()[:args.elite]]
        mean = elite.mean(0)
        std = (0.8 * elite.std(0) + 0.2 * std).clamp(min=0.02)
        std[0] = 0.0
        echo(f"generation {generation}: best {float(relative.min()):.4f} of the mean's bounded slowdown, "
             f"mean {[round(w, 3) for w in mean.tolist()]} ({time.time() - start:.0f} s)")
    return mean


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", required=True, help="SWF logs of one cluster size, searched jointly")
    parser.add_argument("--backfill", default="off", choices=["off", "easy"])
    parser.add_argument("--train_sequences", type=int, default=32, help="per log, drawn from its first 60%%")
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--elite", type=int, default=6)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--sigma", type=float, default=0.5, help="the first generation's spread of each weight")
    parser.add_argument("--sequences", type=int, default=100, help="per protocol, for the evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", action="store_true", help="also search the FEATURES that read the queue length")
    parser.add_argument("--weights", type=float, nargs="+", help="evaluate these weights (7, or 9 with the queue "
                        "length's), no search")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", help="write the rule as a checkpoint (evaluate.py --policy reads it)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.weights and len(args.weights) not in (BASIC, len(FEATURES)):
        parser.error(f"--weights takes {BASIC} or {len(FEATURES)} numbers (FEATURES), got {len(args.weights)}")
    set_threads(args.threads)
    echo = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else print
    logs = [read_queue_log(path) for path in args.trace]
    cfgs = [heuristic_config(log.config(sequence_length=EVAL_LENGTH, backfill=args.backfill)) for log in logs]
    g = torch.Generator().manual_seed(args.seed)
    train_starts = []
    for log in logs:
        lo, hi = log.positions(0, log.jobs_before(RECENT_FRACTION), EVAL_LENGTH)
        train_starts.append(torch.randint(lo, hi + 1, (args.train_sequences,), generator=g))
    weights = torch.tensor(args.weights, dtype=torch.double) if args.weights else \
        search(logs, cfgs, train_starts, args, echo)
    if args.save:
        save_linear_rule(args.save, weights.tolist(), {
            "logs": [Path(p).name for p in args.trace], "backfill": args.backfill, "train_fraction": RECENT_FRACTION,
            "search": "cross-entropy method" if not args.weights else "given weights",
            **{k: getattr(args, k) for k in ("train_sequences", "population", "elite", "generations", "sigma",
                                             "seed")}})
        echo(f"wrote {args.save}")
    for path, log, cfg in zip(args.trace, logs, cfgs):
        for protocol in ("recent", "heldout", "rlscheduler"):
            starts = protocol_starts(log, protocol, args.sequences)
            results = compare_queue({**heuristic_policies(RULES, cfg), "searched": (LinearRule(weights), cfg)},
                                    log, starts)
            score = {name: result.summary["mean_bounded_slowdown"] for name, result in results.items()}
            best = min(RULES, key=score.get)
            diff, ci = paired(results["searched"], results[best])
            line = {"trace": Path(path).name, "backfill": args.backfill, "protocol": protocol, **score,
                    "best_rule": best, "minus_best_rule": diff, "minus_best_rule_ci95": ci,
                    "weights": dict(zip([n for n, _ in FEATURES], weights.tolist())), "context": len(weights) > BASIC,
                    "train_sequences": args.train_sequences, "generations": args.generations,
                    "population": args.population, "seed": args.seed}
            print(json.dumps(line) if args.json else
                  f"{line['trace']} {protocol} backfill {args.backfill}: searched rule {line['searched']:.2f}, "
                  f"best rule {best} {score[best]:.2f}, minus it {diff:+.2f} ± {ci:.2f}", flush=True)


if __name__ == "__main__":
    main()
