"""Regenerate the figures in docs/figures/ (each also writes its numbers as JSON beside it).

    python scripts/figures.py load_sweep [--ckpt NAME=PATH ...] [--jobsets 200]

load_sweep: mean slowdown vs load 0.1..1.9 (DeepRM Figure 4), heuristics and any checkpoints,
200 unseen jobsets a point, 95% CIs over jobsets.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import ROOT, set_threads

from lightning_sched import ClusterConfig, DeepRMWorkload
from lightning_sched.evaluation import evaluate, make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.plots import slowdown_vs_load

FIGURES = ROOT / "docs" / "figures"
EVAL_SEED = 12345  # as scripts/evaluate.py: unseen by training
LOADS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9]


def named_policies(cfg: ClusterConfig, heuristics: list[str], ckpts: list[str], device: str):
    import torch

    policies = {h: make_heuristic(h, cfg, **({"generator": torch.Generator().manual_seed(0)} if h == "random" else {}))
                for h in heuristics}
    for item in ckpts:
        name, _, path = item.partition("=")
        from lightning_sched.policies import load_policy

        policies[name], _ = load_policy(path, device=device, greedy=True)
    return policies


def load_sweep(args) -> None:
    cfg = ClusterConfig(observation="none")
    policies = named_policies(cfg, args.heuristics, args.ckpt, args.device)
    results: dict[str, dict[float, tuple[float, float]]] = {name: {} for name in policies}
    for i, load in enumerate(args.loads):
        jobs = make_jobsets(DeepRMWorkload(load=load), args.jobsets, EVAL_SEED + i)
        line = [f"load {load:.1f}"]
        for name, policy in policies.items():
            s = evaluate(policy, cfg, jobs, device=args.device).summary
            results[name][load] = (s["mean_slowdown"], s["mean_slowdown_ci95"])
            line.append(f"{name} {s['mean_slowdown']:.3f}±{s['mean_slowdown_ci95']:.3f}")
        print("  ".join(line), flush=True)
    fig = slowdown_vs_load(results, f"Mean slowdown vs load ({args.jobsets} unseen jobsets a point)")
    out = Path(args.out or FIGURES / "slowdown_vs_load.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    out.with_suffix(".json").write_text(json.dumps(
        {"jobsets": args.jobsets, "seed": EVAL_SEED, "results": {n: {str(l): v for l, v in r.items()} for n, r in results.items()}},
        indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="figure", required=True)
    p = sub.add_parser("load_sweep", help="mean slowdown vs load")
    p.add_argument("--loads", type=float, nargs="+", default=LOADS)
    p.add_argument("--heuristics", nargs="+", default=["tetris", "sjf", "packer", "random"])
    p.add_argument("--ckpt", nargs="*", default=[], help="NAME=PATH.ckpt, evaluated greedily")
    p.add_argument("--jobsets", type=int, default=200)
    p.add_argument("--out", help="PNG path (default docs/figures/slowdown_vs_load.png)")
    p.set_defaults(run=load_sweep)
    for parser in sub.choices.values():
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_threads(args.threads)
    args.run(args)


if __name__ == "__main__":
    main()
