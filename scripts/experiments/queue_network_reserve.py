"""Experiment: a trained queue network ranks, its own reservation picks (backfilling off; docs/hpc_queue_rounds.md,
"An eighth round"). The network is not retrained: its scores order the window, and
lightning_sched.queue.reservation starts a filler when the first job does not fit. Prints, per log, the
network with and without the reservation minus F1 (paired 95% CIs) on a protocol's sequences.

    python scripts/experiments/queue_network_reserve.py --policy checkpoints/queue_bsld.ckpt \
        --trace ../shared/traces/lublin_256.swf.gz ../shared/traces/lublin_256_new2.swf.gz --protocol heldout
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import set_threads  # noqa: E402
from lightning_sched.queue.evaluation import (  # noqa: E402
    compare_queue,
    heuristic_policies,
    network_config,
    paired,
    protocol_starts,
    resolve,
)
from lightning_sched.queue.log import read_queue_log  # noqa: E402
from lightning_sched.queue.policy import load_queue_policy  # noqa: E402
from lightning_sched.queue.reservation import reserve_pick  # noqa: E402


class NetworkWithReservation:
    """td -> td with "action": the network's greedy ranking of the window, played by reserve_pick. It
    reads the env's four job features; the fifth, the fit delay, is the reservation's."""

    def __init__(self, net):
        self.net = net

    @torch.no_grad()
    def __call__(self, td):
        mask = td["action_mask"]
        logits = self.net.scorer(td["job_features"][..., :4], td["cluster_features"], mask)
        td["action"] = reserve_pick(torch.where(mask, -logits.double(), torch.inf), td)
        return td


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="a queue network checkpoint (extra job features: none)")
    ap.add_argument("--trace", nargs="+", required=True)
    ap.add_argument("--protocol", default="heldout", choices=["heldout", "recent", "rlscheduler"])
    ap.add_argument("--sequences", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    net, trained = load_queue_policy(args.policy)
    if trained.job_features != 4:
        ap.error(f"--policy {args.policy}: reads {trained.job_features} job features; this takes networks of 4")
    for trace in args.trace:
        log = read_queue_log(trace)
        cfg = log.config(sequence_length=1024, backfill="off")
        starts = protocol_starts(log, args.protocol, args.sequences)
        policies = {**heuristic_policies(["f1"], cfg), "network": resolve(args.policy, cfg),
                    "network+reserve": (NetworkWithReservation(net), replace(network_config(cfg, trained),
                                                                             fit_delay=True))}
        results = compare_queue(policies, log, starts)
        for name in ("network", "network+reserve"):
            diff, ci = paired(results[name], results["f1"])
            bsld = {k: r.summary["mean_bounded_slowdown"] for k, r in results.items()}
            print(f"{Path(trace).name} {args.protocol} {name}: {bsld[name]:.2f}, F1 {bsld['f1']:.2f}, "
                  f"minus F1 {diff:+.2f} ± {ci:.2f}", flush=True)


if __name__ == "__main__":
    main()
