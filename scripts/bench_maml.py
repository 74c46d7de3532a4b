"""Benchmark of one MAML meta-iteration at a config's meta-batch (default configs/base/maml.yaml):
meta_batch tasks, inner rollouts and steps through higher, outer rollouts, the meta-gradient and
Adam's step, timed around Lightning's training step. Medians over --repeats after one warm-up;
prints a line and, last, a JSON line.

    python scripts/bench_maml.py [--config configs/base/maml.yaml [--config OVERLAY ...]] [--first_order]
                                 [--threads 2] [--repeats 5]

Repeated --config files merge in order as in scripts/fit.py (configs/README.md): mappings key by key,
anything else replaced.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import yaml
from lightning.pytorch import Callback, Trainer

from _common import ROOT, run_main, set_threads
from lightning_sched import ClusterConfig, ConfigError, WorkloadFamily
from lightning_sched.cli import THREADS_HELP, ScriptParser, at_least, thread_count
from lightning_sched.policies.networks import PolicySpec
from tasks.base import EvaluationSettings
from tasks.maml import MAML


class Stopwatch(Callback):
    def __init__(self):
        self.seconds = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seconds.append(time.perf_counter() - self.start)


def merge_config(base: dict, overlay: dict) -> dict:
    """`overlay` on top of `base`: mappings merge key by key, other values (lists included) replace."""
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = merge_config(merged[key], value) if isinstance(value, dict) and isinstance(
            merged.get(key), dict) else value
    return merged


def main(argv=None) -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", help="a config; repeat for a base and its overlays")
    ap.add_argument("--first_order", action="store_true")
    ap.add_argument("--repeats", type=at_least(1), default=5)
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    args = ap.parse_args(argv)
    threads = set_threads(args.threads)
    configs = args.config or [str(ROOT / "configs" / "base" / "maml.yaml")]
    merged: dict = {}
    for path in configs:
        try:
            with open(path) as file:
                merged = merge_config(merged, yaml.safe_load(file) or {})
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise ConfigError(f"--config {path}: not a readable YAML config ({type(error).__name__})") from None
    init = dict(merged["model"]["init_args"])
    init["cluster"] = ClusterConfig(**init.get("cluster", {}))
    init["family"] = WorkloadFamily(**init["family"])
    init["policy"] = PolicySpec(**init.get("policy", {}))
    init["evaluation"] = EvaluationSettings(**init.get("evaluation", {}))
    init["first_order"] = args.first_order
    module = MAML(**init)
    watch = Stopwatch()
    Trainer(max_steps=args.repeats + 1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, limit_val_batches=0, callbacks=[watch]).fit(module)
    median = statistics.median(watch.seconds[1:])
    hp = module.hparams
    episodes = hp.meta_batch * (hp.inner_steps * hp.inner_jobsets * hp.inner_episodes
                                + hp.outer_jobsets * hp.outer_episodes)
    print(f"threads={threads} torch={torch.__version__} {' + '.join(configs)}: meta_batch {hp.meta_batch}, inner_steps "
          f"{hp.inner_steps}, {episodes} episodes, {'first' if args.first_order else 'second'} order: "
          f"{median:.3f} s per meta-iteration (median of {args.repeats})")
    print(json.dumps({"threads": threads, "config": configs, "meta_batch": hp.meta_batch,
                      "inner_steps": hp.inner_steps, "episodes": episodes, "first_order": args.first_order,
                      "repeats": args.repeats, "meta_iteration_s": round(median, 4),
                      "all_s": [round(s, 4) for s in watch.seconds]}))


if __name__ == "__main__":
    run_main(main)
