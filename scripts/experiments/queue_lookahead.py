"""Experiment: how far below the best rule can a scheduler get, and with what knowledge?
(docs/hpc_queue_rounds.md, "What beating the best rule takes")

On a protocol's sequences (default: held out), for each log and backfilling setting:
- the best of the five rules, and the per-sequence best rule (an oracle that picks a rule for each
  sequence after the fact): what switching between rules can gain at most;
- rollout lookahead (Bertsekas' rollout algorithm) over the best rule: at every decision each of the
  rule's first k picks is tried in a copy of the state, the rule then decides H more times, and the
  pick whose jobs have the lowest bounded slowdown at the horizon (started jobs: their own; waiting
  ones: as if they started then) is taken. What the copy knows of the future:
      known        no more arrivals: only the jobs already submitted (what a scheduler knows)
      repeat       the last m arrivals repeat from now on, their gaps kept (a naive forecast)
      daily        the last 24 hours' arrivals repeat 24 hours later (the daily cycle)
      clairvoyant  the log's actual next arrivals (no real scheduler has them: a bound)
  Copies run jobs for their requested time, what a scheduler knows (on the Lublin logs, the actual).
  `--base` sets what the lookahead improves on: the protocol's best rule (chosen on the test: an
  analysis), a named rule, a queue policy checkpoint, or `rules`: every rule's first pick is a
  candidate and its copy follows that rule (the rule whose next H decisions look best, each decision),
  or a rule with its own reservation (`f1+reserve`): its reservation's pick and the rule's first k - 1
  picks are the candidates, and in the copies it decides with its reservation. "base alone" then
  prints the base played without the lookahead.
- `--student EPOCHS`: the rank-reading scorer (QueuePolicySpec.rule_ranks, with context; with
  --student_fit_delay also fit delays) fitted by cross-entropy to the lookahead's picks (its future:
  --student_future, clairvoyant by default) on sequences of each log's first 80% (its window of 128
  jobs, the picks among the rule's first k there), then run greedy on the protocol: can what the
  lookahead picks be learned from what a policy sees?
- `--agree CKPT`: the lookahead (the first of --futures) played in CKPT's own queue (its window and
  inputs, as the expert-iteration warm start plays its teacher), and how often CKPT's greedy pick is
  the lookahead's: a student's agreement with its teacher on the protocol's sequences.

    python scripts/experiments/queue_lookahead.py --trace ../shared/traces/lublin_256.swf.gz \\
        ../shared/traces/lublin_256_new2.swf.gz --backfill off easy --student 30 --threads 1
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched.queue import lookahead as rules  # noqa: E402
from lightning_sched.queue.config import RULES, QueueConfig  # noqa: E402
from lightning_sched.queue.env import QueueEnv  # noqa: E402
from lightning_sched.queue.evaluation import (  # noqa: E402
    EVAL_LENGTH,
    TRAIN_FRACTION,
    evaluate_queue,
    heuristic_config,
    mean_ci95,
    network_config,  # noqa: E402
    protocol_starts,
)
from lightning_sched.queue.heuristics import QueueHeuristic, priority, rule_keys  # noqa: E402
from lightning_sched.queue.log import QueueLog, read_queue_log  # noqa: E402
from lightning_sched.queue.lookahead import FUTURES, lookahead_pick, simulation_config  # noqa: E402
from lightning_sched.queue.policy import QueueNetwork, QueuePolicy, QueuePolicySpec, load_queue_policy  # noqa: E402
from lightning_sched.queue.reservation import SUFFIX, ReservingRule, reserve_pick, reserving_config  # noqa: E402
from lightning_sched.queue.state import QueueState  # noqa: E402


class RuleBase(rules.RuleBase):
    """A rule as the lookahead's base, played with the whole queue visible as rules are measured."""

    def config(self, cfg: QueueConfig, sim_window: int) -> tuple[QueueConfig, QueueConfig]:
        """(the played queue, the copies' queue)."""
        return heuristic_config(replace(cfg, rule_ranks=())), simulation_config(cfg, sim_window)


class RulesBase(rules.RulesBase, RuleBase):
    pass


class NetworkBase:
    """A queue policy network as the lookahead's base: its highest logits are the candidates and it
    decides (greedy) in the copies, which show it the window it was trained with."""

    def __init__(self, path: str):
        self.name, (self.net, self.trained) = path, load_queue_policy(path)

    def config(self, cfg: QueueConfig, sim_window: int) -> tuple[QueueConfig, QueueConfig]:
        played = network_config(cfg, self.trained)
        return played, played

    @torch.no_grad()
    def scores(self, state: QueueState, obs) -> torch.Tensor:
        return -self.net.scorer(obs["job_features"], obs["cluster_features"], obs["action_mask"])


class ReservingBase:
    """A rule with its own reservation as the lookahead's base: its reservation's pick scores lowest,
    then the rule's order, so the candidates are that pick and the rule's first picks, and in the
    copies (which show the fit delays it reads) it decides with its reservation."""

    def __init__(self, name: str):
        self.name, self.rule = name, name[:-len(SUFFIX)]

    def config(self, cfg: QueueConfig, sim_window: int) -> tuple[QueueConfig, QueueConfig]:
        played = reserving_config(heuristic_config(replace(cfg, rule_ranks=())))
        return played, replace(simulation_config(cfg, sim_window), fit_delay=True)

    def scores(self, state: QueueState, obs) -> torch.Tensor:
        keys = {**rule_keys(state, obs["window_job"]), "job_features": obs["job_features"]}
        score = priority(self.rule, keys).double()
        return score.scatter(1, reserve_pick(score, keys)[:, None], -torch.inf)


def run_lookahead(log: QueueLog, played: QueueConfig, sim_cfg: QueueConfig, starts: torch.Tensor, base, k: int,
                  horizon: int, future: str, repeat: int, record: bool = False, samples: int = 1):
    """Each sequence played with the lookahead: (mean bounded slowdowns, DoubleTensor[N]; with
    `record`, the decisions' observations and picks as a dict of tensors)."""
    env = QueueEnv(played, log, batch_size=[len(starts)], starts=starts)
    td, seen, draw = env.reset(), [], torch.Generator().manual_seed(0)
    while not bool(td["done"].all()):
        td["action"] = lookahead_pick(env.state, td, base, k, horizon, future, repeat, sim_cfg,
                                      samples if future == "repeat" else 1, draw)
        if record:
            live = ~td["done"].squeeze(-1)
            seen.append({key: td[key][live] for key in ("job_features", "cluster_features", "action_mask", "action")})
        td = env.step(td)["next"]
    data = {key: torch.cat([s[key] for s in seen]) for key in seen[0]} if record else None
    return env.episode_metrics()["mean_bounded_slowdown"], data


@torch.no_grad()
def agreement(log: QueueLog, cfg: QueueConfig, starts: torch.Tensor, base, path: str, args) -> dict:
    """The lookahead in the network's queue, and the share of its decisions (all; those with more
    than one visible job) where the network's greedy pick is the lookahead's."""
    net, trained = load_queue_policy(path)
    played = network_config(cfg, trained)
    bsld, seen = run_lookahead(log, played, simulation_config(played, args.sim_window), starts, base,
                               args.candidates, args.horizon, args.futures[0], args.repeat, record=True,
                               samples=args.samples)
    logits = torch.cat([net.scorer(*(seen[key][i] for key in ("job_features", "cluster_features", "action_mask")))
                        for i in torch.arange(len(seen["action"])).split(4096)])
    same, choice = logits.argmax(-1) == seen["action"], seen["action_mask"].sum(-1) > 1
    return {"lookahead_in_network_queue": float(bsld.mean()), "decisions": len(same),
            "agreement": float(same.float().mean()), "agreement_with_a_choice": float(same[choice].float().mean())}


def lookahead_student(logs: list[QueueLog], backfill: str, args) -> QueueNetwork:
    """The student fitted to the lookahead (with `args.student_future`) over each log's best rule, on
    `args.student_sequences` sequences from each log's first 80%."""
    data = []
    for log in logs:
        cfg = log.config(sequence_length=EVAL_LENGTH, backfill=backfill, rule_ranks=RULES,
                         fit_delay=args.student_fit_delay)
        high = log.jobs_before(TRAIN_FRACTION) - EVAL_LENGTH
        draw = torch.Generator().manual_seed(7 + 1000 * args.student_seed)
        starts = torch.randint(0, high + 1, (args.student_sequences,), generator=draw)
        rule = best_rule(log, cfg, starts)
        sim_cfg = simulation_config(cfg, args.sim_window)
        base = RulesBase() if args.student_base == "rules" else RuleBase(rule)
        _, picks = run_lookahead(log, cfg, sim_cfg, starts, base, args.candidates, args.horizon,
                                 args.student_future, args.repeat, record=True)
        ranks = picks["job_features"][..., 4 + RULES.index(rule)]
        agree = float((ranks.gather(1, picks["action"][:, None]) == 0).float().mean())
        print(f"{Path(log.path).name}, backfill {backfill}: the {args.student_future} lookahead over {base.name} on "
              f"{len(starts)} training sequences takes {rule}'s (the range's best rule) own first pick in "
              f"{agree:.1%} of {len(ranks)} "
              "decisions", flush=True)
        data.append(picks)
    return fit_student({key: torch.cat([d[key] for d in data]) for key in data[0]}, args.student,
                       args.student_fit_delay, args.student_seed)


def fit_student(data: dict, epochs: int, fit_delay: bool = False, seed: int = 0) -> QueueNetwork:
    """The rank-reading scorer fitted by cross-entropy to the recorded picks (Adam 1e-3, minibatches of 1024)."""
    torch.manual_seed(seed)
    net = QueueNetwork(QueuePolicySpec(rule_ranks=RULES, context=True, fit_delay=fit_delay))
    optimizer = torch.optim.Adam(net.scorer.parameters(), lr=1e-3)
    n = data["action"].shape[0]
    for _ in range(epochs):
        for index in torch.randperm(n).split(1024):
            logits = net.scorer(*(data[key][index] for key in ("job_features", "cluster_features", "action_mask")))
            loss = torch.nn.functional.cross_entropy(logits, data["action"][index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return net.eval()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", required=True, help="SWF logs (.swf or .swf.gz)")
    parser.add_argument("--backfill", nargs="+", default=["off"], choices=["off", "easy"])
    parser.add_argument("--protocol", default="heldout", choices=["heldout", "recent", "rlscheduler"])
    parser.add_argument("--sequences", type=int, default=100, help="the protocol's sequences (heldout, recent)")
    parser.add_argument("--futures", nargs="*", default=list(FUTURES), choices=FUTURES, help="none: no lookahead")
    parser.add_argument("--base", default="best",
                        help="the lookahead's base: 'best' (the protocol's best rule: an analysis, chosen on the "
                             "test), a rule name, RULE+reserve, 'rules', or a queue policy checkpoint")
    parser.add_argument("--candidates", type=int, default=4, help="k: the rule's first picks tried")
    parser.add_argument("--horizon", type=int, default=64, help="H: the rule's decisions in each copy")
    parser.add_argument("--repeat", type=int, default=128, help="m: arrivals the 'repeat' forecast replays")
    parser.add_argument("--samples", type=int, default=1,
                        help="forecasts the repeat lookahead averages (the last m arrivals, then earlier blocks)")
    parser.add_argument("--sim_window", type=int, default=128, help="the window the rule ranks in the copies")
    parser.add_argument("--student", type=int, default=0, help="epochs of the student's fit (0: none)")
    parser.add_argument("--student_sequences", type=int, default=16, help="training sequences per log")
    parser.add_argument("--student_future", default="clairvoyant", choices=FUTURES, help="the teacher's future")
    parser.add_argument("--student_fit_delay", action="store_true", help="the student also reads fit delays")
    parser.add_argument("--student_seed", type=int, default=0, help="the student's training sequences and weights")
    parser.add_argument("--student_base", default="best", choices=["best", "rules"],
                        help="the teacher's base: the training range's best rule, or every rule (as --base rules)")
    parser.add_argument("--agree", default=None, help="a queue policy checkpoint: its agreement with the lookahead")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    logs = [read_queue_log(path) for path in args.trace]
    for backfill in args.backfill:
        student = lookahead_student(logs, backfill, args) if args.student else None
        for log in logs:
            name = Path(log.path).name
            cfg = log.config(sequence_length=EVAL_LENGTH, backfill=backfill)
            starts = protocol_starts(log, args.protocol, args.sequences)
            rules = {r: evaluate_queue(QueueHeuristic(r), heuristic_config(cfg), log, starts)
                     .sequences["mean_bounded_slowdown"] for r in RULES}
            best = min(rules, key=lambda r: float(rules[r].mean()))
            mean, ci = mean_ci95(rules[best])
            print(f"{name}, backfill {backfill}, {args.protocol} ({len(starts)} sequences of {EVAL_LENGTH}): best rule "
                  f"{best} {mean:.2f} ± {ci:.2f}; differences to it, paired 95% CIs:", flush=True)
            results = {"per-sequence best rule": torch.stack(list(rules.values())).min(0).values}
            base = NetworkBase(args.base) if args.base.endswith(".ckpt") else RulesBase() if args.base == "rules" \
                else ReservingBase(args.base) if args.base.endswith(SUFFIX) \
                else RuleBase(best if args.base == "best" else args.base)
            if isinstance(base, NetworkBase):
                played, _ = base.config(cfg, args.sim_window)
                results["base policy alone"] = evaluate_queue(QueuePolicy(base.net), played, log, starts) \
                    .sequences["mean_bounded_slowdown"]
            if isinstance(base, ReservingBase):
                played, _ = base.config(cfg, args.sim_window)
                results["base alone"] = evaluate_queue(ReservingRule(base.rule), played, log, starts) \
                    .sequences["mean_bounded_slowdown"]
            if args.agree:
                found = agreement(log, cfg, starts, base, args.agree, args)
                print(f"  {args.agree} agrees with the {args.futures[0]} lookahead (samples {args.samples}) played in "
                      f"its queue: {found}", flush=True)
                if args.json:
                    print(json.dumps({"trace": name, "backfill": backfill, "protocol": args.protocol,
                                      "policy": args.agree, "base": base.name, "samples": args.samples, **found}))
                continue
            for future in args.futures:
                begin = time.perf_counter()
                results[f"lookahead, {future}"], _ = run_lookahead(
                    log, *base.config(cfg, args.sim_window), starts, base, args.candidates, args.horizon, future,
                    args.repeat, samples=args.samples)
                print(f"  (lookahead, {future}: {time.perf_counter() - begin:.0f} s)", flush=True)
            if student is not None:
                net_cfg = replace(cfg, window=128, **student.spec.observation())
                results[f"student of the {args.student_future}"] = evaluate_queue(
                    QueuePolicy(student), net_cfg, log, starts).sequences["mean_bounded_slowdown"]
            for label, values in results.items():
                diff, diff_ci = mean_ci95(values - rules[best])
                print(f"  {label:28s} {float(values.mean()):9.2f}  minus {best}: {diff:+8.2f} ± {diff_ci:.2f}",
                      flush=True)
                if args.json:
                    print(json.dumps({"trace": name, "backfill": backfill, "protocol": args.protocol, "policy": label,
                                      "base": base.name,
                                      "best_rule": best, "mean_bounded_slowdown": float(values.mean()),
                                      "minus_best_rule": diff, "minus_best_rule_ci95": diff_ci,
                                      "candidates": args.candidates, "horizon": args.horizon,
                                      "samples": args.samples}))


def best_rule(log: QueueLog, cfg: QueueConfig, starts: torch.Tensor) -> str:
    """The rule with the lowest mean bounded slowdown on `starts` (the whole queue visible)."""
    plain = replace(cfg, rule_ranks=())
    scores = {r: float(evaluate_queue(QueueHeuristic(r), heuristic_config(plain), log, starts)
                       .sequences["mean_bounded_slowdown"].mean()) for r in RULES}
    return min(scores, key=scores.get)


if __name__ == "__main__":
    main()
