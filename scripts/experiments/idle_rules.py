"""Experiment: where the slowdown policy's light-load cost comes from, and which gate on its waits
removes it for the least gain given back (docs/slot_policy.md; docs/outputs/select_wait_rate.txt).

The network of `checkpoints/best_slowdown.ckpt` acts greedily and may leave capacity idle on purpose.
This compares, on DeepRM's workload at several loads, paired against the best of Tetris and SJF:
  while_arriving, work_conserving, not_when_idle   the plain rules (acting.IDLE_RULES)
  rate(tau, rho)          while_arriving while the arrival rate seen so far, arrived / (time + tau),
                          is at least rho jobs a step, work-conserving below (tau damps the first
                          steps' estimate): the rule `while_frequent` at tau =
                          observations.RATE_DAMPING_STEPS
  per_job(kappa)          waits while rate (tau 10) x the shortest waiting job's duration >= kappa
  load(tau, threshold)    waits while the offered load seen so far, the arrived jobs' work over
                          (time + 1 + tau) steps of capacity, is at least threshold; variants count
                          only started jobs, leave out the largest waiting job, gate only an idle
                          cluster, or also require a rate (--started_only --leave_out --idle_only
                          --min_rates)
Jobsets: --seed + round(100 x load). The default, 2,000,000, is outside every range of
lightning_sched.seeds; the rate was chosen on selection seeds (--seed 555).

    python scripts/experiments/idle_rules.py --seed 555 --jobsets 5000 --loads 0.1 0.3 --taus 10 --rhos 0.11
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
from lightning_sched.deeprm.observations import arrival_rate  # noqa: E402
from lightning_sched.evaluation import compare, make_jobsets  # noqa: E402
from lightning_sched.heuristics import make_heuristic  # noqa: E402
from lightning_sched.policies.acting import Acting, NetworkPolicy, sample_actions  # noqa: E402
from lightning_sched.policies.checkpoints import load_policy  # noqa: E402

SEED = 2_000_000


class GatedWaits(NetworkPolicy):
    """Greedy, with while_arriving's guard; void is also forbidden where a slot job fits now and
    `no_waits` says so, given the arrival rate seen so far, arrived / (time + tau)."""

    tau: float = 10.0

    def no_waits(self, obs, rate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def __call__(self, obs):
        logits = self.acting.mask(self.net(self.net.encode(obs)), obs)
        fits = (obs["slot_offset"] == 0).any(-1)
        stuck = fits & self.no_waits(obs, arrival_rate(obs, self.tau))
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


class LoadGated(GatedWaits):
    """No waits while the offered load seen so far is below `threshold`: the arrived jobs' work,
    d x mean_r(q_r / U), over (time + 1 + tau) steps of capacity. A share of capacity, so the
    same threshold means the same load on any job mix or cluster (tau damps the first steps)."""

    threshold: float = 0.2
    started_only: bool = False
    leave_out: bool = False
    idle_only: bool = False
    min_rate: float = 0.0

    def no_waits(self, obs, rate: torch.Tensor) -> torch.Tensor:
        s, cfg = obs.state, obs.cfg
        jobs = s.duration.shape[1]
        arrived = torch.arange(jobs).unsqueeze(0) < s.num_arrived.unsqueeze(1)
        if self.started_only:  # the jobs that wait now are not evidence of the load they are held for
            arrived = arrived & (s.start >= 0)
        job_work = s.duration.double() * s.demand.double().mean(1) / cfg.resource_units
        work = (job_work * arrived).sum(1)
        if self.leave_out:  # the largest waiting job's own work is not evidence of the load it is held for
            work = work - job_work.gather(1, s.slot_job).amax(1)
        low = work / (s.time.double() + 1 + self.tau) < self.threshold
        if self.min_rate > 0:  # also closed while fewer jobs a step have arrived (a long job alone is no load)
            low = low | (rate < self.min_rate)
        if self.idle_only:  # gate only the waits on an idle cluster; a busy one may always hold jobs back
            low = low & (obs["used"].sum((1, 2)) == 0)
        return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", default="checkpoints/best_slowdown.ckpt")
    parser.add_argument("--jobsets", type=int, default=1000)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.9, 1.5])
    parser.add_argument("--taus", type=float, nargs="+", default=[1.0, 10.0, 25.0])
    parser.add_argument("--rhos", type=float, nargs="+", default=[0.1, 0.15, 0.2])
    parser.add_argument("--kappas", type=float, nargs="*", default=[],
                        help="also the rule on expected arrivals during the shortest waiting job (tau 10)")
    parser.add_argument("--thresholds", type=float, nargs="*", default=[],
                        help="also the rule on the offered load seen so far (each tau of --taus)")
    parser.add_argument("--started_only", action="store_true",
                        help="also the load rule counting only the arrived jobs that have started")
    parser.add_argument("--leave_out", action="store_true",
                        help="also the load rule without the largest waiting job's work")
    parser.add_argument("--idle_only", action="store_true",
                        help="also the load rule applied only on an idle cluster")
    parser.add_argument("--min_rates", type=float, nargs="*", default=[],
                        help="also the load rule closed while the arrival rate is below each of these")
    parser.add_argument("--seed", type=int, default=SEED, help="jobsets: seed + round(100 x load)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    network, cfg = load_policy(args.ckpt)

    def gated(kind, **settings):  # the network acting greedily with a gate's settings
        policy = kind(network.net, Acting(greedy=True, idle_rule="while_arriving"))
        for name, value in settings.items():
            setattr(policy, name, value)
        return policy

    for load in args.loads:
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, args.seed + round(100 * load))
        policies = {"tetris": make_heuristic("tetris", cfg), "sjf": make_heuristic("sjf", cfg)}
        for rule in ("while_arriving", "work_conserving", "not_when_idle"):
            policies[rule] = NetworkPolicy(network.net, Acting(greedy=True, idle_rule=rule))
        for tau in args.taus:
            for rho in args.rhos:
                policies[f"rate(tau={tau:g}, rho={rho:g})"] = gated(RateGated, tau=tau, rho=rho)
            for threshold in args.thresholds:
                name = f"tau={tau:g}, threshold={threshold:g}"
                policies[f"load({name})"] = gated(LoadGated, tau=tau, threshold=threshold)
                if args.started_only:
                    policies[f"started({name})"] = gated(LoadGated, tau=tau, threshold=threshold, started_only=True)
                for min_rate in args.min_rates:
                    policies[f"load_and_rate({name}, rho={min_rate:g})"] = gated(
                        LoadGated, tau=tau, threshold=threshold, min_rate=min_rate)
                if args.idle_only:
                    policies[f"idle_only({name})"] = gated(LoadGated, tau=tau, threshold=threshold, idle_only=True)
                if args.leave_out:
                    policies[f"leave_out({name})"] = gated(LoadGated, tau=tau, threshold=threshold, leave_out=True)
        for kappa in args.kappas:
            policies[f"per_job(kappa={kappa:g})"] = gated(ArrivalsPerJob, kappa=kappa)
        result = compare(policies, cfg, jobs)
        best = result.best(("tetris", "sjf"))
        row = {"load": load, "jobsets": args.jobsets, "best_heuristic": best,
               "best_mean": round(result.mean_ci(best)[0], 4)}
        row["minus_best"] = {name: [round(v, 4) for v in result.minus(name, best)]
                             for name in policies if name not in ("tetris", "sjf")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
