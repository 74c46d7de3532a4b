"""One queue policy from several trained runs of one recipe (their seeds): the scorers' logits are
averaged (QueuePolicySpec.ensemble), so it acts on the departures from its prior that the runs
agree on. The runs must share the queue config, policy spec, logs and train fraction.

    python scripts/ensemble.py --policy RUN_A/checkpoints/last.ckpt RUN_B/checkpoints/last.ckpt --out ENSEMBLE.ckpt

The file holds only plain values and tensors (torch.load(weights_only=True)), is written whole or
not at all, and evaluate.py, adapt.py and decide.py read it as any queue policy.
"""
from __future__ import annotations

import argparse

from _common import run_main
from lightning_sched.cli import ScriptParser
from lightning_sched.files import refuse_output
from lightning_sched.queue.policy import ensemble_record, queue_network, read_queue_record


def main(argv=None) -> int:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", nargs="+", required=True, help="queue policy checkpoints, two at least")
    ap.add_argument("--out", required=True, help="the ensemble's checkpoint (never one of --policy)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = ap.parse_args(argv)
    refuse_output(args.out, args.overwrite, "--out", args.policy)
    if len(set(args.policy)) != len(args.policy):
        ap.error(f"--policy names a file twice: {' '.join(args.policy)}")
    record = ensemble_record({path: read_queue_record(path) for path in args.policy})
    queue_network(record, args.out)  # its weights rebuild the network before anything is written
    record.save(args.out, args.overwrite)
    print(f"{args.out}: the mean of {len(args.policy)} scorers ({', '.join(args.policy)})")
    return 0


if __name__ == "__main__":
    run_main(main)
