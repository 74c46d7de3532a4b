#!/usr/bin/env bash
# The checks a lent GPU machine runs (docs/performance.md, "On a GPU"), in two parts, each one device
# call whose timeouts add up to under the 600 s a command may run:
#   bash scripts/gpu_check.sh tests   the gpu-marked tests, and fit.py end to end on the GPU for both
#                                     envs with the checkpoint read back on the CPU
#   bash scripts/gpu_check.sh bench   both envs' benchmarks beside a CPU baseline of the same machine,
#                                     REINFORCE's iteration, the queue PPO iteration (env on the CPU and
#                                     on the GPU), the queue torch step's operation count
# The machine lacks the project's pip packages: bring them as wheels in .whl (../shared/gpu/README.md;
# for fit.py also wandb, jsonargparse and their needs) and copies of ../shared/traces' three logs in
# .dev/traces/; carry [".whl", ".dev"] in each call.
set -u
case "${1:-}" in tests|bench) ;; *) echo "usage: bash scripts/gpu_check.sh tests|bench"; exit 2 ;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --target "$PWD/.site" .whl/*.whl || exit
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 WANDB_MODE=offline
LOG=.dev/traces/lublin_256.swf.gz
export LIGHTNING_SCHED_TEST_TRACES=$PWD/.dev/traces  # tests/test_queue_maml.py's sites
quiet() { grep -v -i -E "warn|litlogger|pytree|data_connector|tensor cores|set_float32"; }
run() { echo "== $*"; timeout "$@" 2>&1 | quiet; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ "${1:-}" = tests ]; then
run 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_env.py tests/test_queue_step_torch.py tests/test_queue_policy.py \
    tests/test_queue_maml.py
run 80 python3 scripts/fit.py fit --config configs/base/deeprm.yaml --trainer.max_steps 2 --trainer.val_check_interval 2 \
    --trainer.default_root_dir /tmp/gpu_deeprm --trainer.accelerator gpu
run 40 python3 scripts/evaluate.py --policy /tmp/gpu_deeprm/checkpoints/best-2.ckpt tetris --jobsets 20 --device cpu
run 100 python3 scripts/fit.py fit --config configs/base/queue.yaml --model.init_args.log $LOG \
    --model.init_args.validation.sequences 2 --model.init_args.validation.sequence_length 64 --trainer.max_steps 2 \
    --trainer.val_check_interval 2 --trainer.default_root_dir /tmp/gpu_queue --trainer.accelerator gpu
else
run 80 python3 scripts/bench_env.py --device cuda --batch_sizes 4096 65536 262144 --modes none image --repeats 3 --steps 50
run 30 python3 scripts/bench_env.py --device cpu --threads 2 --batch_sizes 4096 --modes none image --repeats 3 --steps 50
run 80 python3 scripts/bench_env.py --env queue --backfill off --device cuda --batch_sizes 4096 65536 262144 --trace $LOG --repeats 2 \
    --steps 30
run 40 python3 scripts/bench_env.py --env queue --backfill easy --device cuda --batch_sizes 65536 --trace $LOG --repeats 1 --steps 5
run 30 python3 scripts/experiments/queue_step_ops.py --device cuda --trace $LOG --batch 4096 --steps 10 --backfill off
run 60 python3 scripts/bench_env.py --env queue --device cpu --threads 2 --batch_sizes 4096 --trace $LOG --repeats 3 --steps 30
run 40 python3 scripts/bench_train.py --device cuda --slots --repeats 3
run 40 python3 scripts/bench_train.py --device cpu --threads 2 --slots --repeats 3
run 150 python3 scripts/experiments/queue_iteration_devices.py --trace $LOG --devices cuda cpu --env_device auto module \
    --backfill off easy --episodes 64 --iterations 3
fi
