"""Train, validate and test schedulers with LightningCLI.

    python scripts/fit.py fit --config configs/deeprm_slowdown.yaml
    python scripts/fit.py fit --config configs/smoke.yaml --trainer.max_steps 5
    python scripts/fit.py fit --config configs/deeprm_slowdown.yaml --ckpt_path runs/.../last.ckpt   # resume
    python scripts/fit.py test --config configs/deeprm_slowdown.yaml --ckpt_path checkpoints/reinforce_slowdown.ckpt
    python scripts/fit.py fit --config configs/deeprm_slowdown.yaml --trainer.strategy ddp --trainer.devices 2
    python scripts/fit.py fit --print_config

`--model` picks the LightningModule (tasks.reinforce.Reinforce by default). Logging goes to
Weights & Biases, offline unless WANDB_API_KEY is set (`wandb sync runs/wandb/offline-run-*`
uploads an offline run later); `--trainer.logger` overrides it (e.g. a CSVLogger). The best
policy by eval/mean_slowdown and the last one are checkpointed (`--checkpoint.*`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runs from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from jsonargparse import lazy_instance  # noqa: E402
from lightning.pytorch import LightningModule  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar  # noqa: E402
from lightning.pytorch.cli import LightningCLI  # noqa: E402
from lightning.pytorch.loggers import WandbLogger  # noqa: E402

from callbacks import HeuristicComparison, LatestCheckpoint  # noqa: E402
from lightning_sched import ClusterConfig, ConfigError  # noqa: E402
from tasks.reinforce import Reinforce  # noqa: E402


def wandb_online() -> bool:
    """Online only with an API key and no WANDB_MODE asking otherwise: the default run works anywhere."""
    return bool(os.environ.get("WANDB_API_KEY")) and os.environ.get("WANDB_MODE", "online") == "online"


class SchedulerCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "eval/mean_slowdown", "checkpoint.mode": "min",
                             "checkpoint.filename": "best-{step}", "checkpoint.auto_insert_metric_name": False})
        # last.ckpt = the state at the latest validation (callbacks/checkpoints.py says why a
        # second callback and not save_last), beside the best
        parser.add_lightning_class_args(LatestCheckpoint, "last_checkpoint")
        parser.link_arguments("checkpoint.dirpath", "last_checkpoint.dirpath")
        parser.add_lightning_class_args(HeuristicComparison, "compare")
        parser.add_lightning_class_args(RichProgressBar, "progress_bar")

    def _parse_ckpt_path(self) -> None:
        """LightningCLI lets a checkpoint's hyperparameters override the config; a cluster that differs
        would then be replaced silently, so it is an error naming the fields instead."""
        def cluster() -> ClusterConfig | None:
            model = self.config.get(self.config.get("subcommand") or "", {}).get("model") or {}
            found = (model.get("init_args") or {}).get("cluster")
            return None if found is None else ClusterConfig(**dict(found))

        asked = cluster()
        super()._parse_ckpt_path()
        saved = cluster()
        if asked is not None and saved is not None:
            try:
                saved.require_same_cluster(asked, "checkpoint", "config")
            except ConfigError as error:
                raise SystemExit(f"error: {error}") from None

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config)
        torch.set_num_threads(config.get("threads", 2))
        save_last = (config.get("checkpoint") or {}).get("save_last")
        if save_last:  # last_checkpoint writes last.ckpt; two writers would overwrite each other
            raise SystemExit(f"error: checkpoint.save_last={save_last!r}: last.ckpt is kept by last_checkpoint "
                             "(the latest state); leave checkpoint.save_last unset")


SUBCOMMANDS = ("fit", "validate", "test", "predict")


def with_default_model(args: list[str]) -> list[str]:
    """DeepRM's REINFORCE (tasks.reinforce.Reinforce, paper settings) when neither --model nor a
    config picks the module. Not a parser default: jsonargparse keeps a default instance's init_args
    when a config's class_path replaces it, so tasks.maml.MAML silently took Reinforce's values for
    the arguments both have (normalize_advantage False instead of MAML's True)."""
    # --model NAME / --config FILE pick the module; --model.<arg> only sets one of its arguments
    picks_model = any(a in ("--model", "--config", "-c") or a.startswith(("--model=", "--config=")) for a in args)
    if picks_model or not args or args[0] not in SUBCOMMANDS:
        return args
    return [args[0], f"--model={Reinforce.__module__}.{Reinforce.__qualname__}", *args[1:]]


def main(args=None) -> None:
    os.environ.setdefault("WANDB_SILENT", "true")
    if args is None:  # from the command line: LightningCLI reads sys.argv (it warns when given both)
        sys.argv[1:] = with_default_model(sys.argv[1:])
    else:
        args = with_default_model(list(args))
    trainer_defaults = {
        "accelerator": "auto",
        "devices": 1,
        "max_steps": 1000,
        "val_check_interval": 50,
        "check_val_every_n_epoch": None,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "default_root_dir": "runs",
        "logger": lazy_instance(WandbLogger, project="lightning_sched", save_dir="runs", offline=not wandb_online()),
    }
    SchedulerCLI(LightningModule, subclass_mode_model=True, trainer_defaults=trainer_defaults,
                 save_config_kwargs={"overwrite": True}, args=args,
                 parser_kwargs={"default_config_files": [], "parser_mode": "yaml"})


if __name__ == "__main__":
    main()
