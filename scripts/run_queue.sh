#!/usr/bin/env bash
# Run fit.py on configs one after another with one torch thread (two queues share 2 cores):
#   bash scripts/run_queue.sh configs/smoke.yaml configs/trace_nasa.yaml
#   bash scripts/run_queue.sh --base configs/base/loads.yaml configs/ablation/deeprm.yaml configs/ablation/mask.yaml
# With --base, each run is that base followed by one overlay (configs/README.md). Each run's folder is
# runs/<overlay name>; its console output goes to logs/<overlay name>.log.
set -u
base=()
if [ "${1:-}" = "--base" ]; then
  base=(--config "$2")
  shift 2
fi
mkdir -p logs
for config in "$@"; do
  name=$(basename "$config" .yaml)
  OMP_NUM_THREADS=1 python scripts/fit.py fit "${base[@]}" --config "$config" --threads 1 \
    --progress_bar.refresh_rate 0 > "logs/$name.log" 2>&1 || echo "$config failed (logs/$name.log)" >&2
done
