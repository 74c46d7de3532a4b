"""Experiment: the queue's native kernel (lightning_sched/queue/native_queue.c) of this checkout
against the one of an earlier commit, paired: two envs of the same seed step the same random valid
picks, one through each kernel, the kernels called in turns (which goes first alternates), and every
call timed alone; a partial reset of the done rows every 16 steps (as bench_env.py). Prints the
median milliseconds of each and the median of the paired ratios (this / earlier), and checks that
both envs stayed in the same state (docs/hpc_queue.md, "Speed").

    python scripts/experiments/queue_kernel_ab.py --against HEAD --threads 2
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import ROOT, run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402

SOURCE, HEADER = "lightning_sched/queue/native_queue.c", "lightning_sched/native_rows.h"


def earlier_kernel(rev: str, folder: Path):
    """The kernel's library built from commit `rev`'s sources (kept in `folder`, laid out as in the
    checkout so the source's relative include holds)."""
    from lightning_sched.deeprm import native as deeprm_native
    from lightning_sched.queue import native

    for path in (SOURCE, HEADER):
        text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(text)
    library = native.load(deeprm_native.COMPILER, deeprm_native.FLAGS, (folder / SOURCE,), (folder / HEADER,),
                          "native_queue_earlier")
    if library is None:
        raise SystemExit(f"the queue kernel of {rev} could not be built")
    return library


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="HEAD", help="the commit whose kernel is the baseline")
    parser.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz")
    parser.add_argument("--backfill", nargs="+", default=["off", "easy"], choices=["off", "easy"])
    parser.add_argument("--batch", type=at_least(1), default=4096)
    parser.add_argument("--steps", type=at_least(20), default=300)
    parser.add_argument("--threads", type=thread_count, default=2, help=THREADS_HELP)
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)

    import torch

    from lightning_sched.queue import native
    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(args.trace)
    with tempfile.TemporaryDirectory() as folder:
        libraries = {"this": native.kernel(), "earlier": earlier_kernel(args.against, Path(folder))}
        if libraries["this"] is None:
            raise SystemExit("this checkout's queue kernel is not available (no compiler, or LIGHTNING_SCHED_NATIVE=0)")
        result = {"against": args.against, "threads": threads, "batch": args.batch, "steps": args.steps}
        for backfill in args.backfill:
            result[backfill] = compare(libraries, log, log.config(sequence_length=256, backfill=backfill), args, torch,
                                       native, QueueEnv)
            r = result[backfill]
            print(f"backfill {backfill}, B={args.batch}, {threads} threads: this {r['this_ms']:.3f} ms, "
                  f"{args.against} {r['earlier_ms']:.3f} ms a call (medians); paired this / earlier {r['ratio']:.3f}",
                  flush=True)
    print(json.dumps(result))


def compare(libraries, log, cfg, args, torch, native, QueueEnv) -> dict:
    b = args.batch
    envs = {name: QueueEnv(cfg, log, batch_size=[b], seed=1) for name in libraries}
    masks = {name: env.reset()["action_mask"] for name, env in envs.items()}
    generator = torch.Generator().manual_seed(0)
    seconds = {name: [] for name in libraries}
    def use(name):  # the kernel the next native.step calls
        native.kernel = lambda: libraries[name]

    for i in range(args.steps + 10):
        visible = masks["this"].sum(-1)  # the visible jobs fill the first slots
        slot = (torch.rand(b, generator=generator) * visible).long().unsqueeze(1)
        for name in (("this", "earlier") if i % 2 else ("earlier", "this")):
            env = envs[name]
            job = torch.where(env.state.done, -1, env.window_job.gather(1, slot).squeeze(1).long())
            use(name)
            t0 = time.perf_counter()
            out = native.step(env.state, job, cfg)
            if i >= 10:
                seconds[name].append(time.perf_counter() - t0)
            env.window_job, masks[name] = out["window_job"], out["action_mask"]
        if i % 16 == 15:
            for name, env in envs.items():
                use(name)
                td = env.full_done_spec.zero()
                td["_reset"] = env.state.done.unsqueeze(-1).clone()
                masks[name] = env.reset(td)["action_mask"]
    use("this")
    first, second = envs["this"].state, envs["earlier"].state
    if not (torch.equal(first.start, second.start) and torch.equal(first.bsld_sum, second.bsld_sum)):
        raise SystemExit("the two kernels left different states: they are not the same semantics")
    ratio = statistics.median(x / y for x, y in zip(seconds["this"], seconds["earlier"], strict=True))
    return {"this_ms": round(statistics.median(seconds["this"]) * 1e3, 3),
            "earlier_ms": round(statistics.median(seconds["earlier"]) * 1e3, 3), "ratio": round(ratio, 3)}


if __name__ == "__main__":
    run_main(main)
