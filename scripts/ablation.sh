#!/usr/bin/env bash
# The ablation of README's "Upgrading DeepRM's recipe": train every variant in configs/ablation/
# (two queues, one torch thread each, about an hour on 2 cores), then evaluate each run's best
# validation checkpoint at loads 0.7, 1.1 and 1.5 (docs/figures/ablation.png and .json).
#   bash scripts/ablation.sh            # train and evaluate
#   bash scripts/ablation.sh evaluate   # evaluate the runs already in runs/ablation_*
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" != "evaluate" ]; then
  bash scripts/run_queue.sh configs/ablation/{deeprm,mask,mask_time_baseline,mask_normalized,mask_entropy}.yaml &
  bash scripts/run_queue.sh configs/ablation/{mask_ppo,mask_curriculum,mask_imitation,mask_larger}.yaml &
  wait
fi
best() { ls -t runs/ablation_"$1"/version_*/checkpoints/best-*.ckpt | head -1; }  # the newest run's best
python scripts/figures.py ablation --title "DeepRM's recipe and each upgrade on loads 0.5..1.5 (125 iterations from scratch)" --ckpt \
  "DeepRM recipe=$(best deeprm)" "+ mask=$(best mask)" "+ mask + cluster-time baseline=$(best mask_time_baseline)" \
  "+ mask + per-jobset normalisation=$(best mask_normalized)" "+ mask + entropy schedule=$(best mask_entropy)" \
  "+ mask + PPO reuse x4=$(best mask_ppo)" "+ mask + load curriculum=$(best mask_curriculum)" \
  "+ mask + imitate Tetris=$(best mask_imitation)" "+ mask + 64-64 network=$(best mask_larger)" "$@"
