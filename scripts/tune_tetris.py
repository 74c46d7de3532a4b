"""Tune Tetris's knob (the weight of the short-job term, heuristics.Tetris) on the default workload.

For each candidate weight, mean slowdown over `--jobsets` jobsets at each load (tuning seeds,
disjoint from evaluation's), and its mean over loads; the best weight is printed last with SJF
and Packer for reference. The chosen default lives in heuristics.TETRIS_SHORT_WEIGHT.
    python scripts/tune_tetris.py [--loads 0.3 0.5 ...] [--jobsets 200]
"""
from __future__ import annotations

import argparse
import json

from _common import run_main, set_threads
from lightning_sched import ClusterConfig, DeepRMWorkload, seeds
from lightning_sched.cli import THREADS_HELP, ScriptParser, at_least, non_negative_float, positive_float, thread_count
from lightning_sched.evaluation import compare, make_jobsets
from lightning_sched.heuristics import Tetris, make_heuristic


def main(argv=None) -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", type=positive_float, nargs="+", default=[0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5])
    ap.add_argument("--weights", type=non_negative_float, nargs="+",
                    default=[0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 100])
    ap.add_argument("--jobsets", type=at_least(1), default=200)
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    cfg = ClusterConfig(observation="none")
    policies = {f"tetris w={w:g}": Tetris(cfg, short_weight=w) for w in args.weights}
    policies.update(sjf=make_heuristic("sjf", cfg), packer=make_heuristic("packer", cfg))
    jobsets = {load: make_jobsets(DeepRMWorkload(load=load), args.jobsets, seeds.tuning(i))
               for i, load in enumerate(args.loads)}
    by_load = {load: compare(policies, cfg, jobs) for load, jobs in jobsets.items()}
    print(f"{'policy':16s} " + " ".join(f"{'load ' + str(load):>9s}" for load in args.loads) + f" {'mean':>8s}")
    table = {}
    for name in policies:
        row = [by_load[load].mean_ci(name)[0] for load in args.loads]
        table[name] = row + [sum(row) / len(row)]
        print(f"{name:16s} " + " ".join(f"{v:9.3f}" for v in table[name]), flush=True)
    tetris = {k: v for k, v in table.items() if k.startswith("tetris")}
    best = min(tetris, key=lambda k: tetris[k][-1])
    print(json.dumps({"best": best, "mean_slowdown_by_load": dict(zip(map(str, args.loads), tetris[best][:-1])),
                      "sjf_mean": table["sjf"][-1], "best_mean": tetris[best][-1]}))


if __name__ == "__main__":
    run_main(main)
