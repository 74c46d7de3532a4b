"""Experiment: seconds to evaluate a reserving rule (it reads each visible job's fit delay,
`QueueConfig.fit_delay`) on the held-out protocol with the fit delay the native kernel writes, and
with step.fit_delay's torch ops (the kernel asked for no fit delay, as where no kernel is built); both in
turns in one process, medians, and the bounded slowdowns of each, which must be equal (docs/hpc_queue.md,
"Speed").

    python scripts/experiments/fit_delay_ab.py --sequences 10 100 --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz")
    parser.add_argument("--policy", default="f1+reserve", help="a reserving rule or checkpoint")
    parser.add_argument("--sequences", type=at_least(2), nargs="+", default=[10, 100])
    parser.add_argument("--repeats", type=at_least(1), default=5)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    from lightning_sched.queue import native
    from lightning_sched.queue.evaluation import evaluate_queue, protocol_starts, resolve
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(args.trace)
    policy, cfg = resolve(args.policy, log.config(sequence_length=1024, backfill="off"))
    if not cfg.fit_delay:
        raise SystemExit(f"error: {args.policy} reads no fit delay (QueueConfig.fit_delay): nothing to compare")
    kernel_step = native.step

    def torch_ops(state, job, step_cfg):  # the kernel's step without its fit delay: step.fit_delay's torch ops
        return kernel_step(state, job, replace(step_cfg, fit_delay=False))

    for count in args.sequences:
        starts = protocol_starts(log, "heldout", count, 1024)
        seconds, bsld = {"kernel": [], "torch ops": []}, {}
        try:
            for _ in range(args.repeats):
                for name, step in (("kernel", kernel_step), ("torch ops", torch_ops)):
                    native.step = step
                    t0 = time.perf_counter()
                    result = evaluate_queue(policy, cfg, log, starts)
                    seconds[name].append(time.perf_counter() - t0)
                    bsld[name] = result.summary["mean_bounded_slowdown"]
        finally:
            native.step = kernel_step
        kernel, torch_time = statistics.median(seconds["kernel"]), statistics.median(seconds["torch ops"])
        print(json.dumps({"policy": args.policy, "trace": Path(args.trace).name, "sequences": len(starts),
                          "threads": threads, "kernel_s": round(kernel, 3), "torch_ops_s": round(torch_time, 3),
                          "ratio": round(torch_time / kernel, 2), "bsld": bsld, "equal": len(set(bsld.values())) == 1}))


if __name__ == "__main__":
    run_main(main)
