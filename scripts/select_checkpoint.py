"""Pick one checkpoint among candidates on selection jobsets (never the evaluation seeds), by its
worst ratio to the best heuristic over a range of loads.

    python scripts/select_checkpoint.py --ckpt A.ckpt B.ckpt --metric mean_slowdown
    python scripts/select_checkpoint.py --ckpt A.ckpt B.ckpt --metric slo_hit_rate --loads 1.1 1.3 1.5 1.7 1.9

For mean_slowdown the score at a load is policy / best heuristic (lower is better); for
slo_hit_rate it is policy - best heuristic in percentage points (higher is better). The winner is
the candidate whose worst load is best, among those that finish every job of the selection jobsets
(a policy that leaves jobs waiting until max_time wins only if all do). Selection jobsets are
seeded with --seed + 100 * load (default: the selection range of lightning_sched.seeds), away from
the evaluation seeds, so the figures stay unseen data.

Every candidate is scored on the cluster its checkpoint was trained on (printed first, with DeepRM's
workload scaled to it, `DeepRMWorkload.for_cluster`); candidates of different clusters (their
objective aside) are refused with the fields that differ, since their scores would not compare.
"""
from __future__ import annotations

import argparse
import json

from _common import run_main, set_threads
from lightning_sched import ClusterConfig, ConfigError, seeds
from lightning_sched.analysis import select_by_worst_load
from lightning_sched.cli import THREADS_HELP, ScriptParser, at_least, seed_number, thread_count
from lightning_sched.config import REWARD_FIELDS
from lightning_sched.files import refuse_output
from lightning_sched.policies.acting import acting_modes
from lightning_sched.policies.checkpoints import load_policy, read_record, with_acting

# --acting's candidate modes, as Acting.override's flags on each checkpoint's own acting (its
# wait_rate kept): both modes with their default rules, or every mode and rule
ACTING = {"saved": [{}], "both": [{"greedy": True}, {"greedy": False}],
          "all": [{"greedy": mode.greedy, "idle_rule": mode.idle_rule} for mode in acting_modes()]}


def candidates_cluster(paths: list[str]) -> ClusterConfig:
    """The cluster every checkpoint of `paths` was trained on; ConfigError naming the fields when
    two differ (beyond the objective, which does not change the jobs or the metrics)."""
    clusters = {path: load_policy(path)[1] for path in paths}
    first, cfg = next(iter(clusters.items()))
    for path, other in clusters.items():
        cfg.require_same_cluster(other, first, path, may_differ=REWARD_FIELDS)
    return cfg.replace(observation="none")


def main(argv=None) -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", nargs="+", required=True)
    ap.add_argument("--metric", choices=("mean_slowdown", "slo_hit_rate"), default="mean_slowdown")
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9])
    ap.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "edf"])
    ap.add_argument("--jobsets", type=at_least(1), default=100)
    ap.add_argument("--seed", type=seed_number, default=seeds.SELECTION)
    ap.add_argument("--acting", choices=("saved", "both", "all"), default="saved",
                    help="saved: each checkpoint acts as it says; both: each is a candidate twice, greedy and sampled "
                         "(each with its default idle rule); all: every acting mode and idle rule")
    ap.add_argument("--write", help="copy the winner here, set to act in the mode it won with (an existing file "
                    "only with --overwrite, never a candidate)")
    ap.add_argument("--overwrite", action="store_true", help="let --write replace an existing file")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    args = ap.parse_args(argv)
    for load in args.loads:  # each load has its own jobsets in the selection seeds' range
        try:
            if not load > 0:
                raise ValueError(load)
            seeds.selection(load, args.seed)
        except (ConfigError, ValueError, OverflowError):
            raise ConfigError(f"--loads {load}: a selection load must be in (0, 2.22) (its jobsets' seeds are "
                              f"{seeds.SELECTION} + 100 x load, below {seeds.TUNING})") from None
    set_threads(args.threads)
    if args.write:  # before the selection's minutes; checked again as the file is written
        refuse_output(args.write, args.overwrite, "--write", args.ckpt)
    cfg = candidates_cluster(args.ckpt)
    changed = {k: v for k, (v, _) in cfg.differences(ClusterConfig(), ignore=("observation",)).items()}
    print("scoring on the candidates' cluster: "
          + (", ".join(f"{k}={v}" for k, v in changed.items()) if changed else "DeepRM's") + " (ClusterConfig)")
    # candidate name -> (checkpoint, Acting.override's flags); "saved" names the checkpoint alone
    named = {}
    for path in args.ckpt:
        saved = read_record(path).acting
        for flags in ACTING[args.acting]:
            named[path if args.acting == "saved" else f"{path}@{saved.override(**flags)}"] = (path, flags)

    def candidates() -> dict:  # made anew at each load
        return {name: load_policy(path, override=flags)[0] for name, (path, flags) in named.items()}

    def report(load: float, best: float, scores: dict[str, float]) -> None:
        print(f"load {load:.1f} best heuristic {best:.3f} " + " ".join(f"{p}: {v:.3f}" for p, v in scores.items()),
              flush=True)

    selection = select_by_worst_load(candidates, cfg, args.heuristics, args.loads, args.jobsets, args.seed,
                                     args.metric, report)
    scores, unfinished, worst, winner = selection.scores, selection.unfinished, selection.worst, selection.winner
    if any(unfinished.values()):
        print("unfinished jobs (not eligible while a candidate finishes all): "
              + " ".join(f"{p}: {n}" for p, n in unfinished.items() if n))
    # "cluster": the fields where the candidates' cluster differs from DeepRM's
    print(json.dumps({"metric": args.metric, "seed": args.seed, "jobsets": args.jobsets, "cluster": changed,
                      "worst": worst, "unfinished_jobs": unfinished, "winner": winner,
                      "scores": {p: {str(k): v for k, v in s.items()} for p, s in scores.items()}}))
    if args.write:
        path, flags = named[winner]
        acting = read_record(path).acting.override(**flags)
        selected = {"metric": args.metric, "loads": args.loads, "jobsets": args.jobsets, "seed": args.seed,
                    "worst": worst[winner], "from": path}
        out = with_acting(path, args.write, acting, overwrite=args.overwrite, selected=selected)
        print(f"wrote {out} ({acting})")


if __name__ == "__main__":
    run_main(main)
