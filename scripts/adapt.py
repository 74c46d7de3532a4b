"""Fine-tune a trained policy (a MAML meta-policy or any REINFORCE checkpoint) on a new workload
in a few REINFORCE steps, and save the adapted checkpoint.

    python scripts/adapt.py --ckpt checkpoints/maml.ckpt --steps 5 --load 1.2 --short_prob 0.5 --dominant_units 3 7
    python scripts/adapt.py --ckpt checkpoints/image_maml.ckpt --steps 5 \\
        --trace ../shared/traces/NASA-iPSC-1993-3.1-cln.swf.gz --seconds_per_step 600 \\
        --trace_capacity processors=128 --json
    python scripts/adapt.py --ckpt checkpoints/slots_slowdown.ckpt --steps 5 --trace LOG.swf.gz --fit_cluster

Each step draws --jobsets jobsets of the workload (seeds disjoint from evaluation's), rolls out
--episodes episodes of each, and takes one step (DeepRM's time-indexed baseline). After step 0 and
every step it prints the metrics on --eval_jobsets unseen jobsets (acting as the checkpoint
says: sampled or greedy) and, in the last column, how far the objective's metric is from the
best heuristic's on the same jobsets (the reference line above the table); with --json one JSON
line per step, the last one the final metrics in the form of `scripts/evaluate.py --json`.
With --trace it adapts on the trace's train split and evaluates on --trace_split (default test).
The step size, optimizer and batch default to the meta-policy's inner loop when the checkpoint
has one, with its learned per-weight step sizes if it was meta-trained with them (Meta-SGD);
else SGD, lr 0.05, 20 x 20.

With --acting select, the adapted policy then acts in each mode (greedy or sampled, and each rule for
voiding while a job fits: `lightning_sched.policies.acting.IDLE_RULES`) on --select_jobsets jobsets of the
workload it adapted on (the train split for a trace; selection seeds, never the evaluation ones),
and the best mode is evaluated, printed as the last row and saved in the checkpoint. Whether
leaving capacity idle pays depends on the load, so a light log may want a work-conserving mode.

The adapted checkpoint goes to runs/adapted/<checkpoint name>.ckpt (-2, -3, ... appended when that
file exists), or to --out, which must not exist (unless --overwrite) nor be --ckpt.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from _common import OBJECTIVE_METRIC, RUNS, format_row, heuristic, run_main, set_threads, table_header, unused_path
from lightning_sched import ClusterConfig, ConfigError, seeds
from lightning_sched.analysis import select_acting
from lightning_sched.cli import (
    ScriptParser,
    add_cluster_flags,
    add_trace_flags,
    add_workload_flags,
    at_least,
    reward_from_args,
    setup_from_args,
    workload_from_args,
)
from lightning_sched.evaluation import compare, evaluate, make_jobsets
from lightning_sched.learning.adaptation import AdaptationSettings, adapt
from lightning_sched.policies.acting import NetworkPolicy
from lightning_sched.policies.checkpoints import PolicyRecord, load_network

# the heuristics the adapted policy is compared with (random left out: it repeats only with its seed)
REFERENCE_HEURISTICS = ("tetris", "sjf", "packer", "edf")


def output_path(args) -> tuple[Path, bool]:
    """(where the adapted checkpoint goes, whether the user named it). Refused: --out equal to the
    checkpoint being adapted (a resumable Lightning checkpoint would become a policy-only file) and
    an existing --out without --overwrite. The default, runs/adapted/<ckpt name>.ckpt, takes -2,
    -3, ... when taken."""
    if args.out is None:
        return unused_path(RUNS / "adapted" / f"{Path(args.ckpt).stem}.ckpt"), False
    out = Path(args.out)
    if out.resolve() == Path(args.ckpt).resolve():
        raise ConfigError(f"--out {args.out} is the checkpoint being adapted (--ckpt); name another file")
    if out.exists() and not args.overwrite:
        raise ConfigError(f"--out {args.out} exists; name another file or pass --overwrite")
    return out, True


def heuristic_reference(cfg: ClusterConfig, eval_jobs, metric: str, device) -> tuple[str, float]:
    """(the best deterministic heuristic on the evaluation jobsets by `metric`, its mean)."""
    results = compare({h: heuristic(h, cfg, device) for h in REFERENCE_HEURISTICS}, cfg, eval_jobs, device=device)
    best = results.best(metric=metric)
    return best, results.mean_ci(best, metric)[0]


def main(argv=None) -> int:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="checkpoint to adapt")
    ap.add_argument("--steps", type=int, default=5, help="adaptation steps K")
    add_workload_flags(ap)
    add_trace_flags(ap)
    add_cluster_flags(ap, reward_default=False)
    ap.add_argument("--jobsets", type=int, help="jobsets per step (default: the checkpoint's inner loop, else 20)")
    ap.add_argument("--episodes", type=int, help="episodes per jobset and step (default: inner loop, else 20)")
    ap.add_argument("--lr", type=float, help="step size (default: the meta-policy's inner lr, else 0.05; with "
                    "learned per-weight step sizes each weight moves by lr * its own)")
    ap.add_argument("--optimizer", choices=("sgd", "adam", "rmsprop"),
                    help="default: the meta-policy's inner optimizer, else sgd")
    ap.add_argument("--no_normalize", action="store_true",
                    help="raw advantages (default: normalized, as the inner loop)")
    ap.add_argument("--eval_jobsets", type=at_least(1), default=200, help="unseen jobsets the metrics are measured on")
    ap.add_argument("--eval_every", type=at_least(1), default=1, help="measure after every N-th step (and the last)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the adaptation jobsets and actions")
    ap.add_argument("--acting", choices=("saved", "select"), default="saved",
                    help="saved: act as the checkpoint says; select: pick the best acting mode on the adaptation "
                         "workload after the last step, and save it")
    ap.add_argument("--select_jobsets", type=at_least(1), default=200,
                    help="jobsets of the adaptation workload (selection seeds) that --acting select scores on")
    ap.add_argument("--out", help="adapted checkpoint (default: runs/adapted/<ckpt name>.ckpt, with -2, -3, ... "
                    "when taken)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out (never --ckpt itself)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    out, named = output_path(args)  # before adapting: a refused --out costs nothing
    cluster, sized, trace = setup_from_args(args)
    net, cfg, record = load_network(args.ckpt, args.device, cluster if sized else None)
    cfg = cfg.replace(**reward_from_args(args))
    settings = AdaptationSettings.from_checkpoint(
        record.adaptation, args.steps, jobsets=args.jobsets, episodes=args.episodes, lr=args.lr,
        optimizer=args.optimizer,
        normalize_advantage=False if args.no_normalize else None)
    if trace:
        workload = trace.workload(cfg)
        if args.trace_split == "test":  # adapt on the history before the held-out range
            train = trace.workload(cfg, split="train")
        else:
            train = workload
        train_desc, eval_desc = train.describe(), workload.describe()
    else:
        workload = train = workload_from_args(args, cfg)
        workload.validate(cfg)
        train_desc = f"DeepRMWorkload({', '.join(f'{k}={v}' for k, v in workload.to_dict().items())})"
        eval_desc = "the same workload"
    eval_jobs = make_jobsets(workload, args.eval_jobsets, seeds.EVALUATION)
    learned = (record.adaptation or {}).get("step_sizes") is not None
    print(f"adapting {args.ckpt} on {train_desc}: {settings}"
          + (" with learned per-weight step sizes" if settings.step_sizes is not None else "")
          + (" (the checkpoint's learned step sizes scale SGD only: not used)"
             if learned and settings.step_sizes is None else ""))
    print(f"evaluating on {args.eval_jobsets} unseen jobsets of {eval_desc}; saving to {out}")
    metric = OBJECTIVE_METRIC[cfg.objective]
    best, reference = heuristic_reference(cfg, eval_jobs, metric, args.device)
    print(f"reference: best heuristic {best}, {metric} {reference:.3f} on the same jobsets "
          f"(of {', '.join(REFERENCE_HEURISTICS)})")
    print(f"{table_header('step')} {metric + ' - ' + best:>24s}")

    def report(step, summary):
        print(f"{format_row(f'step {step}', summary)} {summary[metric] - reference:>+24.3f}", flush=True)
        if args.json:
            print(json.dumps({"policy": args.ckpt, **summary, "reference": {"heuristic": best, metric: reference}}),
                  flush=True)

    acting = record.acting
    adapt(net, cfg, train, settings, eval_jobs, seed=args.seed, device=args.device, acting=acting, report=report,
          eval_steps=set(range(0, args.steps + 1, args.eval_every)))
    selected = None
    if args.acting == "select":
        select_jobs = make_jobsets(train, args.select_jobsets, seeds.SELECTION)
        acting, scores = select_acting(net, cfg, select_jobs, metric, seed=args.seed, device=args.device,
                                       wait_rate=acting.wait_rate)
        print(f"acting modes on {args.select_jobsets} selection jobsets of the adaptation workload, {metric}: "
              + ", ".join(f"{name} {value:.3f}" for name, value in scores.items()))
        selected = {"metric": metric, "jobsets": args.select_jobsets, "seed": seeds.SELECTION, "scores": scores}
        policy = NetworkPolicy(net, acting, torch.Generator(device=args.device).manual_seed(args.seed))
        report(str(acting), {"step": args.steps, "acting": str(acting),
                             **evaluate(policy, cfg, eval_jobs, device=args.device).summary})
    if not named:  # another run may have taken the name meanwhile
        out = unused_path(out)
    PolicyRecord.of(net, acting, adaptation=dict(vars(settings)), adapted_from=str(args.ckpt), adapted_on=train_desc,
                    acting_selected=selected).save(out)
    print(f"saved {out}", file=sys.stderr)  # stdout's last line stays the final metrics (--json)
    return 0


if __name__ == "__main__":
    run_main(main)
