#!/usr/bin/env bash
# How much a policy can still gain on each held-out workload of `scripts/figures.py adaptation`:
# the mixture-trained REINFORCE policy fine-tuned for 300 steps (Adam lr 0.003, 20 x 20 episodes a
# step, as its adaptation curve), measured every 25 steps on the figure's 200 unseen jobsets.
# Output: docs/figures/headroom/<workload>.jsonl (one JSON line per measurement).
set -euo pipefail
cd "$(dirname "$0")/.."
CKPT=${CKPT:-checkpoints/reinforce_mixture_masked.ckpt}
OUT=docs/figures/headroom
mkdir -p "$OUT"
run() {  # name, workload flags...
  local name=$1; shift
  python scripts/adapt.py --ckpt "$CKPT" --steps 300 --optimizer adam --lr 0.003 --jobsets 20 --episodes 20 \
    --eval_every 25 --threads "${THREADS:-1}" --json --out "/tmp/headroom_$name.ckpt" "$@" \
    | grep '^{' > "$OUT/$name.jsonl"
}
run heavy_load_1.5 --load 1.5
run long_job_mix --load 0.9 --short_prob 0.5
run small_demands --load 0.9 --dominant_units 2 4
run medium_jobs --load 0.9 --long_len 5 8
