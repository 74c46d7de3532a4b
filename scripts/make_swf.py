"""Write a synthetic SWF log with a memory column and a greedy backfilling schedule
(lightning_sched.traces.synthesis): a stand-in for a cluster's own log. Write it under runs/ or /tmp,
never into the repository.

    python scripts/make_swf.py runs/synthetic_4096.swf.gz --jobs 300000 --processors 4096
    python scripts/make_swf.py runs/synthetic_256.swf --jobs 20000 --processors 256 --load 0.8
"""
from __future__ import annotations

import argparse
import time

from _common import run_main
from lightning_sched.cli import ScriptParser, at_least, positive_float, seed_number
from lightning_sched.files import refuse_output
from lightning_sched.traces.synthesis import write_swf


def main(argv=None) -> int:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the log to write (.swf, or .swf.gz to gzip it)")
    ap.add_argument("--jobs", type=at_least(1), default=300_000)
    ap.add_argument("--processors", type=at_least(4), default=4096, help="the machine's processors (MaxProcs)")
    ap.add_argument("--memory_per_processor_kb", type=at_least(64), default=2 ** 21,
                    help="memory per processor in KB (the machine has processors times this)")
    ap.add_argument("--load", type=positive_float, default=0.7, help="offered processor load")
    ap.add_argument("--seed", type=seed_number, default=0)
    ap.add_argument("--overwrite", action="store_true", help="replace an existing file")
    args = ap.parse_args(argv)
    refuse_output(args.out, args.overwrite, "out")
    t0 = time.perf_counter()
    path = write_swf(args.out, args.jobs, args.processors, args.memory_per_processor_kb, args.load, args.seed,
                     args.overwrite)
    print(f"wrote {path}: {args.jobs} jobs on {args.processors} processors, "
          f"{args.processors * args.memory_per_processor_kb} KB of memory, load {args.load} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    run_main(main)
