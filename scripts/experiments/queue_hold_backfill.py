"""Experiment: where EASY backfilling's gain comes from (docs/hpc_queue_rounds.md, after the thirteenth
round). Without backfilling a policy acts only at decisions: when its pick does not fit, the env holds it
and starts nothing until it fits. EASY also runs a backfilling pass at every event of that hold (each
arrival and completion). This runs a rule three ways on the same sequences:

- off: the env without backfilling;
- EASY at decisions only: one EASY pass when the held job is picked, none at the events of its hold;
- EASY: the env's EASY, a pass at every event of the hold.

The middle one is built from the torch step's own pieces (lightning_sched.queue.step_torch) and runs on
the torch path; the other two on the env as it is.

    python scripts/experiments/queue_hold_backfill.py --trace ../shared/traces/lublin_256.swf.gz \\
        ../shared/traces/lublin_256_new2.swf.gz --protocol heldout --threads 1
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", default=["../shared/traces/lublin_256.swf.gz"])
    parser.add_argument("--protocol", default="heldout", choices=["heldout", "recent", "rlscheduler"])
    parser.add_argument("--rule", default="f1", choices=["fcfs", "sjf", "f1", "wfp3", "unicep"])
    parser.add_argument("--sequences", type=at_least(2), default=100)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    set_threads(args.threads)

    import torch

    from lightning_sched.deeprm.native import stepping_with_torch
    from lightning_sched.evaluation import mean_ci95
    from lightning_sched.queue import step_torch as torch_step
    from lightning_sched.queue.evaluation import evaluate_queue, heuristic_config, heuristic_policies, protocol_starts
    from lightning_sched.queue.log import read_queue_log

    env_step = torch_step.step_torch

    def easy_at_decisions(state, job, cfg):
        """One EASY pass on the rows whose pick does not fit, then the step without backfilling."""
        job = job.reshape(-1).to(torch.int64)
        active = ~state.done & (job >= 0)
        need = torch_step._pick(torch.where(active, job, 0), state.nodes)
        held = active & (need > state.free_nodes)
        added = torch.zeros(state.batch, dtype=torch.float64, device=state.time.device)
        if bool(held.any()):
            torch_step._backfill_pass(state, held, torch_step._shadow(state, need), added, cfg)
            state.bsld_sum += added
        return added + env_step(state, job, replace(cfg, backfill="off"))

    for trace in args.trace:
        log = read_queue_log(trace)
        starts = protocol_starts(log, args.protocol, args.sequences)
        results = {}
        for name, backfill in (("off", "off"), ("easy", "easy"), ("easy_at_decisions", "easy")):
            cfg = heuristic_config(log.config(sequence_length=1024, backfill=backfill))
            policy = heuristic_policies([args.rule], cfg)[args.rule][0]
            swapped = name == "easy_at_decisions"  # on the torch step, whose step function it swaps
            if swapped:
                torch_step.step_torch = easy_at_decisions
            try:
                with stepping_with_torch(swapped):
                    results[name] = evaluate_queue(policy, cfg, log, starts).sequences["mean_bounded_slowdown"]
            finally:
                torch_step.step_torch = env_step
        line = {"log": Path(trace).name, "protocol": args.protocol, "rule": args.rule}
        for name, values in results.items():
            line[name] = "{:.2f} ± {:.2f}".format(*mean_ci95(values))
        for name in ("easy_at_decisions", "easy"):
            line[f"{name} - off"] = "{:+.2f} ± {:.2f}".format(*mean_ci95(results[name] - results["off"]))
        print(json.dumps(line, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    run_main(main)
