"""Experiment: how far one adaptation step can move a queue policy on the held-out sites
(docs/meta_learning.md, "Tried: rule ranks as inputs").

A REINFORCE step scales with the probability mass the policy leaves off its greedy choice: a scorer
whose softmax gives the greedy job ~0.9 samples almost only it, and its gradient is small. For each
checkpoint and held-out site this rolls out `scripts/adapt.py --env queue`'s first adaptation batch
(--sequences x --episodes sequences of --sequence_length jobs from the site's first 80%, seed --seed)
and prints, over the decisions with more than one waiting job: the greedy job's mean probability,
the share of sampled actions that are the greedy one, and the norm of the first step's gradient
(reinforce_loss, as adapt takes it) beside the scorer's weight norm.

    python scripts/experiments/queue_policy_peakedness.py --policy checkpoints/queue_bsld.ckpt RANKS.ckpt --threads 1
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched.queue.adaptation import reinforce_loss, rollout, site_env  # noqa: E402
from lightning_sched.queue.evaluation import TRAIN_FRACTION, network_config  # noqa: E402
from lightning_sched.queue.policy import load_queue_policy  # noqa: E402
from lightning_sched.queue.sites import HELDOUT_SITES, TRACES_DIR, site_log  # noqa: E402


def peakedness(ckpt: str, log, sequences: int, episodes: int, length: int, seed: int) -> dict[str, float]:
    """The adaptation batch's statistics of `ckpt` on `log` (see the module docstring)."""
    net, trained = load_queue_policy(ckpt)
    cfg = network_config(log.config(sequence_length=length, backfill="off"), trained)
    env = site_env(log, cfg, sequences, episodes, log.positions(0, log.jobs_before(TRAIN_FRACTION), length), seed)
    traj = rollout(env, net.scorer, net.spec, torch.Generator().manual_seed(seed))
    steps = traj.transpose(0, 1)  # [T, B]: the decisions in reinforce_loss's order
    decisions = steps[~steps["done"].squeeze(-1)]  # [D]
    with torch.no_grad():
        logits = net.scorer(decisions["job_features"], decisions["cluster_features"], decisions["action_mask"])
        choice = decisions["action_mask"].sum(-1) > 1  # [D]: decisions with something to choose
        greedy_prob = torch.softmax(logits, -1).max(-1).values[choice]
        sampled_greedy = (logits.argmax(-1) == decisions["first"])[choice].float()
    reinforce_loss(net.scorer, traj, episodes).backward()
    params = list(net.scorer.parameters())
    return {"choices": int(choice.sum()), "greedy_prob": float(greedy_prob.mean()),
            "sampled_greedy": float(sampled_greedy.mean()),
            "grad_norm": float(torch.sqrt(sum((p.grad ** 2).sum() for p in params))),
            "weight_norm": float(torch.sqrt(sum((p.detach() ** 2).sum() for p in params)))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", nargs="+", required=True, help="queue policy checkpoints")
    parser.add_argument("--traces_dir", default=TRACES_DIR, help="where the held-out sites' logs are")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--sequence_length", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="adapt.py's --seed")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    for name, model in HELDOUT_SITES:
        log = site_log(name, model, args.traces_dir)
        for ckpt in args.policy:
            s = peakedness(ckpt, log, args.sequences, args.episodes, args.sequence_length, args.seed)
            print(f"{model.name:22s} {ckpt}: {s['choices']} decisions with a choice, greedy job's probability "
                  f"{s['greedy_prob']:.3f}, sampled = greedy {s['sampled_greedy']:.3f}, first step's gradient norm "
                  f"{s['grad_norm']:.3f} (weights {s['weight_norm']:.2f})")


if __name__ == "__main__":
    main()
