"""Experiment: seconds per queue PPO training iteration on each device, at several batch sizes (episodes
an iteration), in one process so the devices are compared on the same machine (docs/performance.md,
"On a GPU"). The recipe is configs/base/queue.yaml's (Lublin-1, window 128, sequences of 256 jobs,
4 PPO epochs over minibatches of 1024) with training on the first 80%, backfilling off and EASY; the
median of the iterations after the first.

    python scripts/experiments/queue_iteration_devices.py --devices cuda cpu --episodes 64 --threads 1

--env_device: where the env steps while the network runs on the device (QueuePPO.env_device).
"""
from __future__ import annotations

import argparse
import itertools
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
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz")
    parser.add_argument("--devices", nargs="+", default=["cpu"], choices=["cpu", "cuda"])
    parser.add_argument("--episodes", nargs="+", type=at_least(1), default=[64])
    parser.add_argument("--backfill", nargs="+", default=["off", "easy"], choices=["off", "easy"])
    parser.add_argument("--env_device", nargs="+", default=["auto"], choices=["auto", "cpu", "module"],
                        help="QueuePPO.env_device: where the env steps (auto: the CPU's native kernel when it loads)")
    parser.add_argument("--iterations", type=at_least(2), default=4)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)

    import torch
    from lightning.pytorch import Callback, Trainer

    from tasks.queue_ppo import QueuePPO, QueueValidation

    class Clock(Callback):
        def __init__(self):
            self.ends: list[float] = []

        def on_train_batch_end(self, trainer, module, *_):
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()
            self.ends.append(time.perf_counter())
            self.env_device = str(module.env("train").device)

    for device in args.devices:
        for backfill, env_device, episodes in itertools.product(args.backfill, args.env_device, args.episodes):
            if device == "cpu" and env_device != "auto" and "auto" in args.env_device:
                continue  # on the CPU every choice steps the env there: one run measures them all
            torch.manual_seed(0)
            model = QueuePPO(args.trace, train_fraction=0.8, backfill=backfill, batch_size=episodes,
                             env_device=env_device, validation=QueueValidation(sequences=2, sequence_length=64))
            clock = Clock()
            Trainer(accelerator="gpu" if device == "cuda" else "cpu", devices=1, max_steps=args.iterations,
                    logger=False, enable_checkpointing=False, num_sanity_val_steps=0, limit_val_batches=0,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=[clock]).fit(model)
            gaps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
            print(json.dumps({"device": device, "threads": threads, "backfill": backfill,
                              "env_device": env_device, "env_stepped_on": clock.env_device, "episodes": episodes,
                              "median_iteration_s": round(statistics.median(gaps), 3),
                              "iterations_timed": len(gaps)}), flush=True)


if __name__ == "__main__":
    run_main(main)
