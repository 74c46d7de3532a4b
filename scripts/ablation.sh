#!/usr/bin/env bash
# The ablation of docs/recipes.md: train every variant in configs/ablation/ on configs/base/loads.yaml
# (two queues, one torch thread each, about an hour on 2 cores), then evaluate each run's best
# validation checkpoint at loads 0.7, 1.1 and 1.5 (docs/figures/ablation.png and .json).
#   bash scripts/ablation.sh            # train and evaluate
#   bash scripts/ablation.sh evaluate   # evaluate the runs already in runs/<variant>*
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = "evaluate" ]; then
  shift  # the rest are extra NAME=PATH policies for the figure
else
  base=(--base configs/base/loads.yaml)
  bash scripts/run_queue.sh "${base[@]}" configs/ablation/{deeprm,mask,mask_time_baseline,mask_normalized,mask_entropy}.yaml &
  bash scripts/run_queue.sh "${base[@]}" configs/ablation/{mask_ppo,mask_curriculum,mask_imitation,mask_larger}.yaml &
  wait
fi
# the newest run's best: runs/<variant>, or runs/<variant>-2, -3, ... when it was trained again
best() { ls -t runs/"$1"/checkpoints/best-*.ckpt runs/"$1"-[0-9]*/checkpoints/best-*.ckpt 2>/dev/null | head -1; }
python scripts/figures.py ablation --title "DeepRM's recipe and each upgrade on loads 0.5..1.5 (125 iterations from scratch)" --ckpt \
  "DeepRM recipe=$(best deeprm)" "+ mask=$(best mask)" "+ mask + cluster-time baseline=$(best mask_time_baseline)" \
  "+ mask + per-jobset normalisation=$(best mask_normalized)" "+ mask + entropy schedule=$(best mask_entropy)" \
  "+ mask + PPO reuse x4=$(best mask_ppo)" "+ mask + load curriculum=$(best mask_curriculum)" \
  "+ mask + imitate Tetris=$(best mask_imitation)" "+ mask + 64-64 network=$(best mask_larger)" "$@"
