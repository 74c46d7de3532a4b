"""Fine-tune a trained policy (a MAML meta-policy or any REINFORCE checkpoint) on a new workload
in a few REINFORCE steps, and save the adapted checkpoint.

    python scripts/adapt.py --ckpt checkpoints/maml.ckpt --steps 5 --load 1.2 --short_prob 0.5 --dominant_units 3 7
    python scripts/adapt.py --ckpt checkpoints/maml.ckpt --steps 5 \\
        --trace ../shared/traces/NASA-iPSC-1993-3.1-cln.swf.gz --seconds_per_step 600 \\
        --trace_capacity processors=128 --json

Each step draws --jobsets jobsets of the workload (seeds disjoint from evaluation's), rolls out
--episodes episodes of each, and takes one step (DeepRM's time-indexed baseline). After step 0 and
every step it prints the metrics on --eval_jobsets unseen jobsets (acting as the checkpoint
says: sampled or greedy); with --json one JSON
line per step, the last one the final metrics in the form of `scripts/evaluate.py --json`.
The step size, optimizer and batch default to the meta-policy's inner loop when the checkpoint
has one, with its learned per-weight step sizes if it was meta-trained with them (Meta-SGD);
else SGD, lr 0.05, 20 x 20.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from _common import (
    add_cluster_flags,
    add_trace_flags,
    add_workload_flags,
    cluster_from_args,
    format_row,
    reward_from_args,
    set_threads,
    table_header,
    trace_workload_from_args,
    workload_from_args,
)
from lightning_sched import ConfigError, seeds
from lightning_sched.adaptation import AdaptationSettings, adapt
from lightning_sched.checkpoints import CHECKPOINT_KEY, load_network, policy_checkpoint
from lightning_sched.evaluation import make_jobsets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    ap.add_argument("--eval_jobsets", type=int, default=200, help="unseen jobsets the metrics are measured on")
    ap.add_argument("--eval_every", type=int, default=1, help="measure after every N-th step (and the last)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the adaptation jobsets and actions")
    ap.add_argument("--out", help="adapted checkpoint (default: <ckpt>.adapted.ckpt)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    if args.eval_every < 1:
        ap.error(f"--eval_every must be >= 1, got {args.eval_every}")
    try:
        cluster, sized = cluster_from_args(args)
        net, cfg, saved = load_network(args.ckpt, args.device, cluster if sized else None)
        cfg = cfg.replace(**reward_from_args(args))
        settings = AdaptationSettings.from_checkpoint(
            saved, args.steps, jobsets=args.jobsets, episodes=args.episodes, lr=args.lr, optimizer=args.optimizer,
            normalize_advantage=False if args.no_normalize else None)
        if args.trace:
            workload = trace_workload_from_args(args, cfg)
            workload_desc = workload.describe()
            if args.trace_split == "test":  # adapt on the history before the held-out range
                train = trace_workload_from_args(argparse.Namespace(**{**vars(args), "trace_split": "train"}), cfg)
            else:
                train = workload
        else:
            workload = train = workload_from_args(args, cfg)
            workload_desc = f"DeepRMWorkload({', '.join(f'{k}={v}' for k, v in workload.to_dict().items())})"
        eval_jobs = make_jobsets(workload, args.eval_jobsets, seeds.EVALUATION)
    except (ConfigError, FileNotFoundError) as error:
        ap.error(str(error))
    learned = (saved.get("adaptation") or {}).get("step_sizes") is not None
    print(f"adapting {args.ckpt} on {workload_desc}: {settings}"
          + (" with learned per-weight step sizes" if settings.step_sizes is not None else "")
          + (" (the checkpoint's learned step sizes scale SGD only: not used)"
             if learned and settings.step_sizes is None else ""))
    print(table_header("step"))

    def report(step, summary):
        print(format_row(f"step {step}", summary), flush=True)
        if args.json:
            print(json.dumps({"policy": args.ckpt, **summary}), flush=True)

    greedy = saved.get("greedy", True)
    adapt(net, cfg, train, settings, eval_jobs, seed=args.seed, device=args.device, greedy=greedy, report=report,
          eval_steps=set(range(0, args.steps + 1, args.eval_every)))
    out = Path(args.out or Path(args.ckpt).with_suffix(".adapted.ckpt"))
    torch.save({CHECKPOINT_KEY: {**policy_checkpoint(net, greedy), "adapted_from": str(args.ckpt),
                                 "adapted_on": workload_desc, "adaptation": {k: v for k, v in vars(settings).items()}}},
               out)
    print(f"saved {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
