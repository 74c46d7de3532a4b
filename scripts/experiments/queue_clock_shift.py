"""Experiment: does a policy trained with the time of day (QueuePolicySpec.clock) use it, and does what it
learned carry? Each checkpoint runs a protocol's sequences twice, with the true clock and with the clock
it reads shifted by `--shift` seconds (the env is unchanged: only the time-of-day feature moves), and the
paired difference shifted minus true is printed per log (docs/hpc_queue_rounds.md, "A thirteenth round").

    python scripts/experiments/queue_clock_shift.py --policy RUN/checkpoints/last.ckpt \
        --trace ../shared/traces/lublin_256.swf.gz ../shared/traces/lublin_256_new2.swf.gz --protocol recent
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched.config import ConfigError  # noqa: E402
from lightning_sched.evaluation import mean_ci95  # noqa: E402
from lightning_sched.queue import step  # noqa: E402
from lightning_sched.queue.evaluation import EVAL_LENGTH, PROTOCOLS, evaluate_queue, protocol_starts, resolve  # noqa: E402
from lightning_sched.queue.log import read_queue_log  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", nargs="+", required=True, help="queue checkpoints trained with the clock")
    parser.add_argument("--trace", nargs="+", required=True, help="SWF logs (.swf or .swf.gz)")
    parser.add_argument("--protocol", default="recent", choices=PROTOCOLS)
    parser.add_argument("--backfill", default="off", choices=["off", "easy"])
    parser.add_argument("--shift", type=int, default=43200, help="seconds added to the time the clock shows")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    true_clock = step.clock
    for path in args.trace:
        log = read_queue_log(path)
        cfg = log.config(sequence_length=EVAL_LENGTH, backfill=args.backfill)
        starts = protocol_starts(log, args.protocol, 100)
        for ckpt in args.policy:
            policy, policy_cfg = resolve(ckpt, cfg)
            if not policy_cfg.clock:
                raise ConfigError(f"--policy {ckpt}: not trained with the clock (QueuePolicySpec.clock)")
            true = evaluate_queue(policy, policy_cfg, log, starts).sequences["mean_bounded_slowdown"]
            step.clock = lambda time: true_clock(time + args.shift)  # step_and_observe() reads the module's clock
            try:
                shifted = evaluate_queue(policy, policy_cfg, log, starts).sequences["mean_bounded_slowdown"]
            finally:
                step.clock = true_clock
            diff, ci = mean_ci95(shifted - true)
            print(f"{Path(path).name} {args.protocol} {ckpt}: bsld {float(true.mean()):.2f}; clock shifted "
                  f"{args.shift} s minus true {diff:+.2f} ± {ci:.2f} (paired 95% CI, {len(starts)} sequences)")


if __name__ == "__main__":
    main()
