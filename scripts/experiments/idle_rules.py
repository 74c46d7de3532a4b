"""Experiment: where the shipped slowdown policy's light-load cost comes from, and what gating its
waits on the observed arrival rate buys (docs/slot_policy.md, "The light-load cost").

`checkpoints/best_slowdown.ckpt` acts greedily and may leave capacity idle on purpose. This compares,
on DeepRM's workload at several loads, paired against the best of Tetris and SJF:
  while_arriving, work_conserving   the shipped rule and the rule that never voids while a job fits;
  rate(tau, rho)                    the shipped rule while the arrival rate observed so far,
                                    arrived / (time + tau), is at least rho jobs a step, and
                                    work-conserving below it (tau damps the first steps' estimate).
Jobsets: seeds 2,000,000 + round(100 x load), outside every range of lightning_sched.seeds (nothing was
trained, selected or evaluated on them).

    python scripts/experiments/idle_rules.py --jobsets 2000 --loads 0.1 0.3 0.5 0.9 1.5 1.9 --taus 10 25 --rhos 0.1 0.15
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched import DeepRMWorkload  # noqa: E402
from lightning_sched.checkpoints import load_policy  # noqa: E402
from lightning_sched.evaluation import compare, make_jobsets  # noqa: E402
from lightning_sched.heuristics import make_heuristic  # noqa: E402
from lightning_sched.policies import NetworkPolicy, sample_actions  # noqa: E402

SEED = 2_000_000


class GatedWaits(NetworkPolicy):
    """Greedy; void is forbidden where a slot job fits now and `no_waits` says so, or where the
    cluster is idle and no job is left to arrive (the shipped rule's guard). Reads the hot path's
    state (obs.state) for the arrivals so far: their rate, arrived / (time + tau)."""

    tau: float = 10.0

    def no_waits(self, obs, rate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def __call__(self, obs):
        logits = self.net(self.net.encode(obs))
        state = obs.state
        fits = (obs["slot_offset"] == 0).any(-1)
        idle = obs["used"].sum((1, 2)) == 0
        rate = state.num_arrived.double() / (state.time.double() + self.tau)
        stuck = fits & ((idle & (obs["to_arrive"].view(-1) == 0)) | self.no_waits(obs, rate))
        logits = torch.cat([logits[:, :-1], logits[:, -1:].masked_fill(stuck.unsqueeze(1), float("-inf"))], -1)
        obs["action"] = sample_actions(logits, True, None)
        return obs


class ArrivalsPerJob(GatedWaits):
    """No waits where fewer than kappa arrivals are expected while the shortest waiting job would
    run (the rate times its duration). Unit-free: the step length cancels."""

    kappa: float = 1.0

    def no_waits(self, obs, rate: torch.Tensor) -> torch.Tensor:
        duration = obs["slot_duration"].double()
        shortest = torch.where(duration > 0, duration, float("inf")).amin(-1)
        return rate * shortest < self.kappa


class RateGated(GatedWaits):
    """No waits while the observed arrival rate is below rho jobs a step."""

    rho: float = 0.0

    def no_waits(self, obs, rate: torch.Tensor) -> torch.Tensor:
        return rate < self.rho


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", default="checkpoints/best_slowdown.ckpt")
    parser.add_argument("--jobsets", type=int, default=1000)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.9, 1.5])
    parser.add_argument("--taus", type=float, nargs="+", default=[1.0, 10.0, 25.0])
    parser.add_argument("--rhos", type=float, nargs="+", default=[0.1, 0.15, 0.2])
    parser.add_argument("--kappas", type=float, nargs="*", default=[],
                        help="also the rule on expected arrivals during the shortest waiting job (tau 10)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    network, cfg = load_policy(args.ckpt)
    for load in args.loads:
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, SEED + round(100 * load))
        policies = {"tetris": make_heuristic("tetris", cfg), "sjf": make_heuristic("sjf", cfg)}
        for rule in ("while_arriving", "work_conserving"):
            policies[rule] = NetworkPolicy(network.net, greedy=True, idle_void=rule)
        for tau in args.taus:
            for rho in args.rhos:
                gated = RateGated(network.net, greedy=True, idle_void="while_arriving")
                gated.tau, gated.rho = tau, rho
                policies[f"rate(tau={tau:g}, rho={rho:g})"] = gated
        for kappa in args.kappas:
            per_job = ArrivalsPerJob(network.net, greedy=True, idle_void="while_arriving")
            per_job.kappa = kappa
            policies[f"per_job(kappa={kappa:g})"] = per_job
        result = compare(policies, cfg, jobs)
        best = result.best(("tetris", "sjf"))
        row = {"load": load, "jobsets": args.jobsets, "best_heuristic": best,
               "best_mean": round(result.mean_ci(best)[0], 4)}
        row["minus_best"] = {name: [round(v, 4) for v in result.minus(name, best)]
                             for name in policies if name not in ("tetris", "sjf")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
