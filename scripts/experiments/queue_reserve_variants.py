"""Experiment: variants of a rule's own reservation without backfilling (docs/hpc_queue_rounds.md, after
the thirteenth round). `RULE+reserve` (lightning_sched.queue.reservation) starts, while the rule's first
job does not fit, only fillers that end before that job's reservation (shadow), as RLScheduler's EASY
does. Two changes a scheduler could make, each alone and both:

- spare nodes: also fill with jobs that use no more than the nodes left over at the shadow once the
  first job has its own (EASY's second criterion; RLScheduler's EASY lacks it), counted from the
  running jobs' requested ends, which the scheduler knows (read here from the env's state: the
  observation does not carry the running jobs);
- earliest fit: when no filler fits now, hold the filler that fits soonest instead of the ranking's
  first filler, so that the env's hold (nothing else starts until the held job fits) is the shortest.

And, for comparison, no reservation at all (first fit): the ranking's first job that fits now, else its
first job (held), so a long job that fits can delay the first job without bound.

With `--slack S ...`, relaxed reservations (relaxed backfilling, Ward et al. 2002) for each S: fillers
may end up to S x the first job's wait past its shadow, so it starts up to that much later.
"relaxed S" measures the wait from each decision (the reservation recomputed, so delays may add up);
"fixed S" keeps each row's target, now + (1 + S) x shadow from the decision where that job first
became the ranking's first without fitting, while it stays first. Either way a relaxed filler must
start before the shadow (`--late_start` drops this: holding a filler that fits only after the shadow
blocks the first job beyond it, since the env holds the pick). `--variants` keeps only the named ones
of the rest.

Mean bounded slowdown on the protocol's sequences, each variant and the rule minus F1 and minus
`RULE+reserve`, paired 95% CIs:

    python scripts/experiments/queue_reserve_variants.py --trace ../shared/traces/lublin_256.swf.gz \\
        ../shared/traces/lublin_256_new2.swf.gz --protocols recent heldout --threads 1
    python scripts/experiments/queue_reserve_variants.py --trace ../shared/traces/lublin_256.swf.gz \\
        ../shared/traces/lublin_256_new2.swf.gz --variants reserve --slack 0.05 0.1 0.2 0.5 1 --protocols recent
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402

# name: (spare nodes, earliest fit, first fit: no reservation)
MAX_SLACK = 100.0  # a relaxed wait of 101 x the shadow; more would overflow the target's int64 seconds
VARIANTS = {"reserve": (False, False, False), "spare": (True, False, False), "earliest": (False, True, False),
            "spare+earliest": (True, True, False), "first-fit": (False, False, True)}


def reserving_policy(rule: str, spare_nodes: bool, earliest: bool, first_fit: bool = False, slack: float = 0.0,
                     fixed: bool = False, late_start: bool = False):
    """(td, env) -> td with "action": `rule` played with its reservation and the chosen changes (or,
    with `first_fit`, without one; with `slack` > 0 relaxed: module docstring)."""
    import torch

    from lightning_sched.queue.heuristics import priority, window_columns
    from lightning_sched.queue.reservation import fit_delay_seconds
    from lightning_sched.queue.state import RUNNING

    remembered = {}  # fixed: each row's first job and its target time

    def policy(td, env):
        score = priority(rule, td).double()  # [B, W], lower first
        filled, _, requested, _ = window_columns(td)
        delay = fit_delay_seconds(td)  # [B, W] seconds until each job fits
        first = score.argmin(-1, keepdim=True)
        shadow = delay.gather(1, first)  # 0 when the first job fits now
        fillers = filled & (delay + requested.long() < shadow)
        if slack:
            now = td["time"].reshape(-1, 1).long()
            target = now + (shadow.double() * (1 + slack)).long()  # slack <= MAX_SLACK: no overflow
            if fixed:
                job = td["window_job"].gather(1, first).long()
                kept = remembered.get("job", torch.full_like(job, -1)) == job
                target = torch.where(kept, remembered.get("target", target), target)
                remembered.update(job=torch.where(shadow > 0, job, -1), target=target)
            relaxed = filled & (now + delay + requested.long() < target) & (shadow > 0)
            fillers |= relaxed if late_start else relaxed & (delay < shadow)
        if first_fit:  # every job that fits now fills, however long
            fillers = filled & (delay == 0)
        if spare_nodes:
            s = env.state
            running = s.status == RUNNING
            ended_by_shadow = running & (s.start + s.requested <= s.time[:, None] + shadow)
            nodes = s.nodes.gather(1, td["window_job"].clamp(min=0).long())
            spare = s.free_nodes[:, None] + (s.nodes * ended_by_shadow).sum(1, keepdim=True) - nodes.gather(1, first)
            fillers |= filled & (nodes <= spare) & (shadow > 0)
        fits = delay == 0
        now_fill = torch.where(fillers & fits, score, torch.inf).argmin(-1)
        if earliest:  # fit delay first, the ranking's order among equal delays
            rank = score.argsort(-1).argsort(-1).double()
            later_fill = torch.where(fillers, delay.double() * score.shape[-1] + rank, torch.inf).argmin(-1)
        else:
            later_fill = torch.where(fillers, score, torch.inf).argmin(-1)
        td["action"] = torch.where((fillers & fits).any(-1), now_fill,
                                   torch.where(fillers.any(-1), later_fill, first.squeeze(1)))
        return td

    policy.remembered = remembered  # what a fixed reservation keeps between decisions (for tests)
    return policy


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", default=["../shared/traces/lublin_256.swf.gz"])
    parser.add_argument("--protocols", nargs="+", default=["recent", "heldout"], choices=["recent", "heldout"])
    parser.add_argument("--rule", default="f1", choices=["fcfs", "sjf", "f1", "wfp3", "unicep"])
    parser.add_argument("--sequences", type=at_least(2), default=100)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--slack", nargs="*", type=float, default=[], help="relaxed reservations to add (> 0)")
    parser.add_argument("--late_start", action="store_true", help="relaxed fillers may start after the shadow")
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    args = parser.parse_args(argv)
    if "reserve" not in args.variants:
        parser.error(f"--variants must keep reserve (the others are set against it), got {args.variants}")
    if any(not 0 < s <= MAX_SLACK for s in args.slack):
        parser.error(f"--slack must be in (0, {MAX_SLACK:g}], got {args.slack}")
    variants = {name: VARIANTS[name] for name in args.variants}
    for s in args.slack:
        variants[f"relaxed {s:g}"] = (False, False, False, s, False, args.late_start)
        variants[f"fixed {s:g}"] = (False, False, False, s, True, args.late_start)
    set_threads(args.threads)

    import torch

    from lightning_sched.evaluation import mean_ci95
    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.evaluation import heuristic_config, protocol_starts
    from lightning_sched.queue.heuristics import priority
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.rollout import collect

    def bsld(policy, cfg, log, starts) -> torch.Tensor:
        """Each sequence's mean bounded slowdown, DoubleTensor[N]."""
        env = QueueEnv(cfg, log, batch_size=[len(starts)], starts=starts)
        with torch.no_grad():
            collect(env, lambda td: policy(td, env))
        return env.episode_metrics()["mean_bounded_slowdown"].double()

    def plain(td, env):
        td["action"] = priority(args.rule, td).double().argmin(-1)
        return td

    for trace in args.trace:
        log = read_queue_log(trace)
        cfg = log.config(sequence_length=1024, backfill="off")
        for protocol in args.protocols:
            starts = protocol_starts(log, protocol, args.sequences)
            rule = bsld(plain, heuristic_config(cfg), log, starts)
            results = {name: bsld(reserving_policy(args.rule, *flags), heuristic_config(cfg, reserve=True), log, starts)
                       for name, flags in variants.items()}
            line = {"log": Path(trace).name, "protocol": protocol, args.rule: round(float(rule.mean()), 2)}
            for name, values in results.items():
                line[name] = round(float(values.mean()), 2)
                line[f"{name} - {args.rule}"] = "{:+.2f} ± {:.2f}".format(*mean_ci95(values - rule))
                if name != "reserve":
                    line[f"{name} - reserve"] = "{:+.2f} ± {:.2f}".format(*mean_ci95(values - results["reserve"]))
            print(json.dumps(line, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    run_main(main)
