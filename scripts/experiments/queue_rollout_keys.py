"""Experiment: decisions per second of the queue env through TorchRL's `rollout` and `Collector`, with
every observation key and with the three [B, L] sequence keys (job_submit, job_requested,
job_processors) left out by an `ExcludeTransform`, beside the plain step loop; the network's own
policy (`make_actor` of a fresh QueueNetwork, which reads the window's features only) picks, with
backfilling off. TorchRL copies each key into every step it keeps, and the sequences are most of a
step's bytes (docs/hpc_queue.md, "The library"). Medians of --repeats.

    python scripts/experiments/queue_rollout_keys.py --threads 1
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
from lightning_sched.queue.config import SEQUENCE_KEYS  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz")
    parser.add_argument("--batch", type=at_least(1), default=256)
    parser.add_argument("--sequence_length", type=at_least(2), default=1024)
    parser.add_argument("--steps", type=at_least(10), default=200)
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    set_threads(args.threads)

    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import ExcludeTransform, TransformedEnv

    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.policy import QueueNetwork, make_actor

    log = read_queue_log(args.trace)
    cfg = log.config(sequence_length=args.sequence_length, backfill="off")
    torch.manual_seed(0)
    actor = make_actor(QueueNetwork())
    frames = args.batch * args.steps

    def env(exclude: bool):
        plain = QueueEnv(cfg, log, batch_size=[args.batch], seed=0)
        return TransformedEnv(plain, ExcludeTransform(*SEQUENCE_KEYS)) if exclude else plain

    def loop() -> float:
        e, t0 = env(False), time.perf_counter()
        td = e.reset()
        with torch.no_grad():
            for _ in range(args.steps):
                _, td = e.step_and_maybe_reset(actor(td))
        return frames / (time.perf_counter() - t0)

    def rollout(exclude: bool) -> float:
        e, t0 = env(exclude), time.perf_counter()
        with torch.no_grad():
            e.rollout(args.steps, actor, break_when_any_done=False)
        return frames / (time.perf_counter() - t0)

    def collector(exclude: bool) -> float:
        c = Collector(env(exclude), actor, frames_per_batch=frames, total_frames=frames,
                      auto_register_policy_transforms=False)
        t0 = time.perf_counter()
        for _ in c:
            pass
        rate = frames / (time.perf_counter() - t0)
        c.shutdown()
        return rate

    cases = {"step loop": loop, "rollout": lambda: rollout(False), "rollout, sequences excluded": lambda: rollout(True),
             "Collector": lambda: collector(False), "Collector, sequences excluded": lambda: collector(True)}
    rates = {name: statistics.median(case() for _ in range(args.repeats)) for name, case in cases.items()}
    for name, rate in rates.items():
        print(f"{name:32s} {rate:12,.0f} decisions/s", flush=True)
    print(json.dumps({"threads": args.threads, "batch": args.batch, "sequence_length": args.sequence_length,
                      "steps": args.steps, "decisions_per_s": {k: round(v) for k, v in rates.items()}}))


if __name__ == "__main__":
    run_main(main)
