"""Experiment: which rule wins where along a log (docs/hpc_queue_rounds.md, "A third round").

Each log is cut into consecutive, non-overlapping stretches of 1024 jobs (every stretch starts on an
empty cluster, as the protocols' sequences do); every rule runs on every stretch, and the table gives
each stretch's mean bounded slowdown per rule and the best rule. Non-overlapping stretches are the
independent samples a log holds: the held-out protocol's 100 sequences start within one stretch's
length of each other, and the last 20% of a 10,000-job log holds one whole stretch.

    python scripts/experiments/queue_rule_blocks.py --trace ../shared/traces/lublin_256.swf.gz \
        ../shared/traces/lublin_256_new2.swf.gz --backfill off easy --threads 1
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched.queue.evaluation import EVAL_LENGTH, TRAIN_FRACTION, evaluate_queue, resolve  # noqa: E402
from lightning_sched.queue.heuristics import RULES  # noqa: E402
from lightning_sched.queue.log import read_queue_log  # noqa: E402
from lightning_sched.queue.reservation import SUFFIX  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", required=True, help="SWF logs (.swf or .swf.gz)")
    parser.add_argument("--backfill", nargs="+", default=["off"], choices=["off", "easy"])
    parser.add_argument("--rules", nargs="+", default=[r for r in RULES if r != "fcfs"],
                        choices=[*RULES, *(r + SUFFIX for r in RULES)], help="rules, or RULE+reserve (backfill off)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    for path in args.trace:
        log = read_queue_log(path)
        starts = torch.arange(0, log.num_jobs - EVAL_LENGTH + 1, EVAL_LENGTH)
        boundary = log.jobs_before(TRAIN_FRACTION)
        for backfill in args.backfill:
            cfg = log.config(sequence_length=EVAL_LENGTH, backfill=backfill)
            scores = {rule: evaluate_queue(*resolve(rule, cfg), log, starts).sequences["mean_bounded_slowdown"]
                      for rule in args.rules}
            print(f"{Path(path).name}, backfill {backfill}: mean bounded slowdown of each {EVAL_LENGTH}-job stretch")
            print(f"{'jobs':>12} " + " ".join(f"{r:>10}" for r in args.rules) + "  best")
            for i, start in enumerate(starts.tolist()):
                row = {r: float(scores[r][i]) for r in args.rules}
                part = "  (last 20%)" if start >= boundary else ""
                print(f"{start:>5}-{start + EVAL_LENGTH - 1:<6} " + " ".join(f"{row[r]:10.1f}" for r in args.rules)
                      + f"  {min(row, key=row.get)}{part}")


if __name__ == "__main__":
    main()
