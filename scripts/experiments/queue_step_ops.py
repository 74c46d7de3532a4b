"""Experiment: how many torch operations one decision of the queue env takes with its torch step
(step_torch.py, the path a GPU runs), and its decisions/s on --device (docs/performance.md, "On a
GPU"). On a GPU most operations are a kernel launch of a few microseconds, so at moderate batch sizes
the count, not the arithmetic, sets the step's time there. Counted with torch's profiler over the
whole TorchRL QueueEnv.step (the step, the window, the observation; every aten operation, nested and
view ones included, so the count approximates the launches), Lublin-1 sequences of 256 jobs, window
128, random valid picks or FCFS picks, after a few warm-up steps.

    python scripts/experiments/queue_step_ops.py --batch 4096 --steps 10 --threads 1     # --device cuda
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
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backfill", nargs="+", default=["off", "easy"], choices=["off", "easy"])
    parser.add_argument("--batch", type=at_least(1), default=4096)
    parser.add_argument("--steps", type=at_least(1), default=10)
    parser.add_argument("--warmup", type=at_least(0), default=5)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)

    import torch
    from torch.profiler import profile

    from lightning_sched.deeprm.native import stepping_with_torch
    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(args.trace)
    device = torch.device(args.device)
    result = {"device": args.device, "threads": threads, "batch": args.batch, "steps": args.steps,
              "ops_per_step": {}, "decisions_per_s": {}}
    print(f"queue env's torch step on {args.device}, {args.trace}, B = {args.batch}, {threads} thread(s)")
    print(f"{'backfill':8s} {'picks':7s} {'ops a step':>11s} {'decisions/s':>12s}")
    with stepping_with_torch():  # the torch step, as off the CPU
        for backfill in args.backfill:
            for picks in ("random", "fcfs"):
                cfg = log.config(sequence_length=256, backfill=backfill)
                env = QueueEnv(cfg, log, batch_size=[args.batch], device=device, seed=1)
                generator = torch.Generator(device=device).manual_seed(0)

                def step(td):
                    if picks == "random":  # the visible jobs fill the first slots
                        td["action"] = (torch.rand(args.batch, generator=generator, device=device)
                                        * td["action_mask"].sum(-1)).long()
                    else:
                        td["action"] = torch.zeros(args.batch, dtype=torch.long, device=device)
                    return env.step(td)["next"]

                td = env.reset()
                for _ in range(args.warmup):
                    td = step(td)
                with profile() as prof:
                    for _ in range(args.steps):
                        td = step(td)
                ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / args.steps
                decisions, began = 0, time.perf_counter()
                for _ in range(args.steps):
                    decisions += int((~td["done"].squeeze(-1)).sum())
                    td = step(td)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                rate = decisions / (time.perf_counter() - began)
                key = f"{backfill}/{picks}"
                result["ops_per_step"][key], result["decisions_per_s"][key] = round(ops), round(rate)
                print(f"{backfill:8s} {picks:7s} {ops:11,.0f} {rate:12,.0f}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    run_main(main)
