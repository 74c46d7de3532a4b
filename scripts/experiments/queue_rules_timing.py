"""Experiment: seconds to evaluate each priority rule (and a reserving one) on a queue protocol, with
the bounded slowdown it scores, one JSON line per log, backfilling setting and rule; run at two
commits (one in a worktree) to compare their speed and check their numbers are the same
(docs/hpc_queue.md, "Speed").

    python scripts/experiments/queue_rules_timing.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=["../shared/traces/lublin_256.swf.gz:off",
                                                      "../shared/traces/lublin_256_new2.swf.gz:easy"],
                        help="LOG:BACKFILL pairs")
    parser.add_argument("--policy", nargs="+", default=["fcfs", "sjf", "f1", "wfp3", "unicep", "f1+reserve"])
    parser.add_argument("--protocol", default="heldout")
    parser.add_argument("--sequences", type=at_least(2), default=100)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    from lightning_sched.queue.evaluation import evaluate_queue, protocol_starts, resolve
    from lightning_sched.queue.log import read_queue_log

    for run in args.runs:
        trace, _, backfill = run.rpartition(":")
        log = read_queue_log(trace)
        starts = protocol_starts(log, args.protocol, args.sequences, 1024)
        for name in args.policy:
            policy, cfg = resolve(name, log.config(sequence_length=1024, backfill=backfill))
            t0 = time.perf_counter()
            result = evaluate_queue(policy, cfg, log, starts)
            print(json.dumps({"trace": Path(trace).name, "backfill": backfill, "policy": name, "sequences": len(starts),
                              "threads": threads, "seconds": round(time.perf_counter() - t0, 2),
                              "mean_bounded_slowdown": result.summary["mean_bounded_slowdown"]}), flush=True)


if __name__ == "__main__":
    run_main(main)
