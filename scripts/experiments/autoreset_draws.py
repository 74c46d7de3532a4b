"""Experiment: what drawing fresh jobsets costs a DeepRM env under TorchRL's autoreset (a collector's
`step_and_maybe_reset`: the rows that ended start again at every step). Decisions per second of one
env drawing from DeepRM's generator against one replaying fixed jobsets of the same workload, Tetris
picking, observation `none`, in turns; medians of --repeats (docs/performance.md).

    python scripts/experiments/autoreset_draws.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=at_least(1), default=2048)
    parser.add_argument("--simu_len", type=at_least(1), default=10, help="short episodes: many rows end a step")
    parser.add_argument("--steps", type=at_least(1), default=100)
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    set_threads(args.threads)

    from lightning_sched import ClusterConfig, ClusterEnv, DeepRMWorkload
    from lightning_sched.evaluation import make_jobsets
    from lightning_sched.heuristics import make_heuristic

    cfg = ClusterConfig(observation="none")
    workload = DeepRMWorkload(load=0.7, simu_len=args.simu_len)
    tetris = make_heuristic("tetris", cfg)

    def rate(source) -> tuple[float, float]:
        """(decisions a second, rows started again a step) over --steps after 50 of warm-up."""
        env = ClusterEnv(cfg, source, batch_size=[args.batch], seed=0)
        td = env.reset()
        for _ in range(50):  # until the rows end at different steps
            _, td = env.step_and_maybe_reset(tetris(td))
        restarted, t0 = 0, time.perf_counter()
        for _ in range(args.steps):
            out, td = env.step_and_maybe_reset(tetris(td))
            restarted += int(out["next", "done"].sum())
        return args.batch * args.steps / (time.perf_counter() - t0), restarted / args.steps

    fixed = make_jobsets(workload, args.batch, seed=1)
    runs = {"generator": [], "fixed jobsets": []}
    for _ in range(args.repeats):
        runs["generator"].append(rate(workload))
        runs["fixed jobsets"].append(rate(fixed))
    rates = {name: statistics.median(r for r, _ in values) for name, values in runs.items()}
    restarted = statistics.median(n for _, n in runs["generator"])
    for name, value in rates.items():
        print(f"{name:14s} {value:12,.0f} decisions/s", flush=True)
    print(f"rows started again a step: {restarted:.1f} of {args.batch}; generator / fixed: "
          f"{rates['generator'] / rates['fixed jobsets']:.2f}")
    print(json.dumps({"threads": args.threads, "batch": args.batch, "simu_len": args.simu_len,
                      "decisions_per_s": {k: round(v) for k, v in rates.items()}, "restarted_per_step": restarted}))


if __name__ == "__main__":
    run_main(main)
