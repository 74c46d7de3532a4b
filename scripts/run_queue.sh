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
failed=0
for config in "$@"; do
  name=$(basename "$config" .yaml)
  if ! OMP_NUM_THREADS=1 python scripts/fit.py fit "${base[@]}" --config "$config" --threads 1 \
      --trainer.enable_progress_bar false > "logs/$name.log" 2>&1; then
    echo "$config failed (logs/$name.log)" >&2
    failed=$((failed + 1))
  fi
done
# the queue goes on past a failed run; its exit status says whether any failed
[ "$failed" -eq 0 ] || { echo "$failed of $# runs failed" >&2; exit 1; }
