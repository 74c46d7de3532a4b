#!/usr/bin/env bash
# The ablation of docs/recipes.md: train every variant in configs/ablation/ on configs/base/loads.yaml
# (two queues, one torch thread each, about an hour on 2 cores), then evaluate each run's best
# validation checkpoint at loads 0.7, 1.1 and 1.5 (runs/figures/ablation.png and .json; docs/figures/ holds
# the committed one).
#   bash scripts/ablation.sh            # train and evaluate
#   bash scripts/ablation.sh evaluate   # evaluate the runs already in runs/<variant>*
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = "evaluate" ]; then
  shift  # the rest are extra NAME=PATH policies for the figure
else
  base=(--base configs/base/loads.yaml)
  bash scripts/run_queue.sh "${base[@]}" configs/ablation/{deeprm,mask,mask_time_baseline,mask_normalized,mask_entropy}.yaml &
  first=$!
  bash scripts/run_queue.sh "${base[@]}" configs/ablation/{mask_ppo,mask_curriculum,mask_imitation,mask_larger}.yaml &
  second=$!
  # both queues end before anything is judged; a failed training stops here (the figure would otherwise
  # show older runs of that variant)
  failed=0
  wait "$first" || failed=1
  wait "$second" || failed=1
  [ "$failed" -eq 0 ] || { echo "ablation: a training run failed (logs/)" >&2; exit 1; }
fi
# the newest run's best: runs/<variant>, or runs/<variant>-2, -3, ... when it was trained again
best() {
  local found
  found=$(ls -t runs/"$1"/checkpoints/best-*.ckpt runs/"$1"-[0-9]*/checkpoints/best-*.ckpt 2>/dev/null | head -1)
  [ -n "$found" ] || { echo "ablation: no best checkpoint of $1 under runs/$1*" >&2; exit 1; }
  echo "$found"
}
declare -A ckpt
for variant in deeprm mask mask_time_baseline mask_normalized mask_entropy mask_ppo mask_curriculum mask_imitation \
    mask_larger; do
  ckpt[$variant]=$(best "$variant")  # set -e: a variant without a run stops the script here
done
python scripts/figures.py ablation --title "DeepRM's recipe and each upgrade on loads 0.5..1.5 (125 iterations from scratch)" --ckpt \
  "DeepRM recipe=${ckpt[deeprm]}" "+ mask=${ckpt[mask]}" "+ mask + cluster-time baseline=${ckpt[mask_time_baseline]}" \
  "+ mask + per-jobset normalisation=${ckpt[mask_normalized]}" "+ mask + entropy schedule=${ckpt[mask_entropy]}" \
  "+ mask + PPO reuse x4=${ckpt[mask_ppo]}" "+ mask + load curriculum=${ckpt[mask_curriculum]}" \
  "+ mask + imitate Tetris=${ckpt[mask_imitation]}" "+ mask + 64-64 network=${ckpt[mask_larger]}" "$@"
