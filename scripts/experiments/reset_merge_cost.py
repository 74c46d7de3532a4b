"""Experiment: milliseconds per partial reset (a share of the rows starting again, as a TorchRL
collector's autoreset asks) with TorchRL's merge (a `where` over every key by the "_reset" mask) and
with the envs' own (`lightning_sched.batched.EveryRowReset`): two envs of the same seed, each with its
own generator of the same seed for its actions and reset rows (so both play the same episodes),
stepped in turns in one process, each step with random valid actions and followed by a partial
reset; a step's milliseconds beside them (docs/performance.md, docs/hpc_queue.md "Speed"). Medians.

    python scripts/experiments/reset_merge_cost.py --env queue --threads 2
    python scripts/experiments/reset_merge_cost.py --env deeprm --observation image --threads 2 --default_malloc
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


def share(text: str) -> float:
    """--share: a float in (0, 1]."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=["queue", "deeprm"], default="queue")
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz", help="--env queue: the log")
    parser.add_argument("--backfill", nargs="+", default=["off", "easy"], choices=["off", "easy"])
    parser.add_argument("--observation", default="image", help="--env deeprm: the observation")
    parser.add_argument("--batch", type=at_least(1), default=4096)
    parser.add_argument("--share", type=share, default=0.05, help="share of the rows reset each time, in (0, 1]")
    parser.add_argument("--resets", type=at_least(2), default=40)
    parser.add_argument("--threads", type=thread_count, default=2, help=THREADS_HELP)
    parser.add_argument("--default_malloc", action="store_true",
                        help="glibc's malloc settings, as a library user's program (bench_env.py --library)")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads, reuse_memory=not args.default_malloc)

    import torch
    from torchrl.envs import EnvBase

    from lightning_sched import ClusterConfig, ClusterEnv, DeepRMWorkload
    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log

    def pair(base):
        class Upstream(base):  # TorchRL's own merge
            _reset_proc_data = EnvBase._reset_proc_data
        return {"torchrl": Upstream, "own": base}

    if args.env == "queue":
        log = read_queue_log(args.trace)
        cases = {backfill: (pair(QueueEnv), (log.config(sequence_length=256, backfill=backfill), log))
                 for backfill in args.backfill}
    else:
        cases = {args.observation: (pair(ClusterEnv), (ClusterConfig(observation=args.observation),
                                                       DeepRMWorkload(load=0.7)))}
    for case, (classes, env_args) in cases.items():
        envs = {name: cls(*env_args, batch_size=[args.batch], seed=1) for name, cls in classes.items()}
        tds = {name: env.reset() for name, env in envs.items()}
        generators = {name: torch.Generator().manual_seed(0) for name in envs}
        resets = {name: [] for name in envs}
        steps = {name: [] for name in envs}
        for _ in range(args.resets):
            for name, env in envs.items():
                td, generator = tds[name], generators[name]
                mask = td["action_mask"]
                td["action"] = (torch.rand(args.batch, generator=generator) * mask.sum(-1)).long() \
                    if args.env == "queue" else torch.multinomial(mask.float(), 1, generator=generator).squeeze(1)
                start = time.perf_counter()
                td = env.step(td)["next"]
                steps[name].append(time.perf_counter() - start)
                td["_reset"] = torch.rand(args.batch, 1, generator=generator) < args.share
                start = time.perf_counter()
                tds[name] = env.reset(td)
                resets[name].append(time.perf_counter() - start)
        line = {"env": args.env, "case": case, "batch": args.batch, "threads": threads, "share": args.share,
                "default_malloc": args.default_malloc}
        for name in envs:
            line[f"{name}_reset_ms"] = round(1e3 * statistics.median(resets[name]), 2)
            line[f"{name}_step_ms"] = round(1e3 * statistics.median(steps[name]), 2)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    run_main(main)
