"""Experiment: a priority rule searched directly on the objective (docs/hpc_queue.md, "A seventh round").

The rules of the literature are fixed formulas (F1 itself was fitted by regression on simulations,
Carastan-Santos & de Camargo, SC'17). This searches a linear rule over the job features the rules
read, score = sum_k w_k * scale_k * feature_k (lowest first), with the cross-entropy method: each
generation draws a population of weights around the current mean, runs every one on the same
training sequences (common random numbers), and moves the mean to the best fifth. The objective
is the mean bounded slowdown itself (no gradient, no surrogate), each sequence relative to the
current mean's, averaged over the logs so that each weighs the same. It starts at F1 (area 1,
log submit 1, the rest 0); the area weight stays 1 (an argmin does not change when every weight
is scaled). Training sequences come from the first 60% of each log; the result is then run on the
`recent` (60-80%), `heldout` (last 20%) and `rlscheduler` protocols beside the five rules.

    python scripts/experiments/queue_rule_search.py --trace ../shared/traces/lublin_256.swf.gz \
        --backfill off --threads 1 --json            # 25 min on one core (20 generations)
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
from lightning_sched.evaluation import mean_ci95  # noqa: E402
from lightning_sched.queue.evaluation import (  # noqa: E402
    EVAL_LENGTH,
    RECENT_FRACTION,
    evaluate_queue,
    heuristic_config,
    heuristic_policies,
    protocol_starts,
)
from lightning_sched.queue.heuristics import RULES  # noqa: E402
from lightning_sched.queue.log import read_queue_log  # noqa: E402

# (name, scale): a unit of weight moves a job about as far in the order for every feature
FEATURES = (("area", 1.0),              # log10(requested) * processors, F1's first term
            ("log_submit", 870.0),      # log10(submit), F1's second term
            ("log_requested", 50.0),
            ("processors", 5.0),
            ("log_wait", 200.0),        # log10(wait + 10 s)
            ("fits_now", 500.0),        # 1 when the job's processors are free now
            ("log_wait_per_requested", 200.0),  # log10((wait + 10 s) / requested), UNICEP-like
            # with --context, what else waits: q = log10(1 + queue length)
            ("fits_now_x_queue", 300.0),
            ("area_x_queue", 0.5))
BASIC = 7  # the features without --context
F1_WEIGHTS = (1.0, 1.0) + (0.0,) * (len(FEATURES) - 2)


def job_features(td) -> tuple[torch.Tensor, torch.Tensor]:
    """All FEATURES of every window slot, DoubleTensor[B, W, len(FEATURES)], and which slots hold a job [B, W]."""
    job = td["window_job"]
    k = job.clamp(min=0).long()
    submit = td["job_submit"].gather(1, k).double()
    requested = td["job_requested"].gather(1, k).double().clamp(min=1)
    processors = td["job_processors"].gather(1, k).double()
    wait = (td["time"].double() - submit).clamp(min=0)
    log_requested, log_wait = torch.log10(requested), torch.log10(wait + 10)
    free = td["free_nodes"].double()  # the Lublin logs: one processor a node
    fits, area = (processors <= free).double(), log_requested * processors
    queue = torch.log10(1 + td["queue_length"].double())
    feats = torch.stack([area, torch.log10(submit.clamp(min=0.1)), log_requested, processors, log_wait, fits,
                         log_wait - log_requested, fits * queue, area * queue], -1)
    return feats, job >= 0


class LinearRule:
    """A queue-env policy: the lowest weights . (scale * features) goes first; row b uses weights[b] ([B, K]),
    over the first K FEATURES."""

    def __init__(self, weights: torch.Tensor):
        k = weights.shape[-1]
        self.weights = weights.double() * torch.tensor([s for _, s in FEATURES[:k]], dtype=torch.double)

    def __call__(self, td):
        feats, filled = job_features(td)
        score = (feats[..., :self.weights.shape[-1]] * self.weights[:, None, :]).sum(-1)
        td["action"] = torch.where(filled, score, torch.inf).argmin(-1)
        return td


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
    for path, log, cfg in zip(args.trace, logs, cfgs):
        for protocol in ("recent", "heldout", "rlscheduler"):
            starts = protocol_starts(log, protocol, args.sequences)
            rules = {name: evaluate_queue(policy, cfg, log, starts).sequences["mean_bounded_slowdown"]
                     for name, (policy, _) in heuristic_policies(RULES, cfg).items()}
            best = min(rules, key=lambda n: float(rules[n].mean()))
            searched = run(weights[None], log, cfg, starts)[0]
            diff, ci = mean_ci95(searched - rules[best])
            line = {"trace": Path(path).name, "backfill": args.backfill, "protocol": protocol,
                    "searched": float(searched.mean()), **{n: float(v.mean()) for n, v in rules.items()},
                    "best_rule": best, "minus_best_rule": diff, "minus_best_rule_ci95": ci,
                    "weights": dict(zip([n for n, _ in FEATURES], weights.tolist())), "context": len(weights) > BASIC,
                    "train_sequences": args.train_sequences, "generations": args.generations,
                    "population": args.population, "seed": args.seed}
            print(json.dumps(line) if args.json else
                  f"{line['trace']} {protocol} backfill {args.backfill}: searched rule {line['searched']:.2f}, "
                  f"best rule {best} {float(rules[best].mean()):.2f}, minus it {diff:+.2f} ± {ci:.2f}", flush=True)


if __name__ == "__main__":
    main()
