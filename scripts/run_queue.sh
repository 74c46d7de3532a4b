#!/usr/bin/env bash
# Run fit.py on configs one after another with one torch thread (two queues share 2 cores):
#   bash scripts/run_queue.sh configs/ablation/deeprm.yaml configs/ablation/mask.yaml
# Logs go to logs/<config name>.log.
set -u
mkdir -p logs
for config in "$@"; do
  name=$(basename "$config" .yaml)
  OMP_NUM_THREADS=1 python scripts/fit.py fit --config "$config" --threads 1 --progress_bar.refresh_rate 0 \
    > "logs/$name.log" 2>&1 || echo "$config failed (logs/$name.log)" >&2
done
