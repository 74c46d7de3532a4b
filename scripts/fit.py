"""Train, validate and test schedulers with LightningCLI.

    python scripts/fit.py fit --config configs/base/deeprm.yaml --config configs/deeprm_slowdown.yaml
    python scripts/fit.py fit --config configs/smoke.yaml --trainer.max_steps 5
    python scripts/fit.py fit --config runs/smoke/config.yaml --ckpt_path runs/smoke/checkpoints/last.ckpt  # resume
    python scripts/fit.py test --config configs/base/deeprm.yaml --config configs/deeprm_slowdown.yaml \
        --ckpt_path checkpoints/reinforce_slowdown.ckpt
    python scripts/fit.py fit --config configs/smoke.yaml --trainer.strategy ddp --trainer.devices 2
    python scripts/fit.py fit --print_config

Any LightningModule trains here: the config's `model.class_path` or `--model` names it
(tasks.reinforce.Reinforce when neither does; callbacks/cli.py). Each run gets one folder, runs/<the
last config's stem> (`-2`, `-3`, ... when taken) or `--trainer.default_root_dir`, holding its
config.yaml, checkpoints/ (best-<step>.ckpt and last.ckpt), metrics.csv and wandb/ (offline unless
WANDB_API_KEY is set); `fit` prints these paths at start (callbacks/run_folder.py). `fit --ckpt_path
RUN/checkpoints/last.ckpt` resumes RUN: same folder, best checkpoint and W&B run, and the
checkpoint's model settings (callbacks/resume.py); only from RUN's last.ckpt, and one process at a
time (callbacks/run_folder.py). SIGTERM or Ctrl-C saves last.ckpt, prints the command that resumes,
and exits with 143 (130 for Ctrl-C), at once also during a validation or test; before training starts it
leaves no run folder (callbacks/stop.py). A bad value prints one line naming the field (`error: ...`),
exit code 2, and so does a disk that fills mid-run (naming the file and the space left; the run's
files are left whole and it resumes from last.ckpt); LIGHTNING_SCHED_TRACEBACK=1 shows the full
traceback or parser message.
"""
from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Literal, Union

from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden

from _common import one_line_warnings, set_threads, show_tracebacks  # puts the checkout on sys.path
from callbacks import HeuristicComparison, LatestCheckpoint, stop
from callbacks.cli import (
    config_error,
    one_line,
    quiet_start,
    require_base,
    require_text_configs,
    where_set,
    with_default_model,
)
from callbacks.resume import (
    check_checkpoint_model,
    config_strings,
    read_training_checkpoint,
    require_fitting_weights,
    require_project_classes,
    require_same_module,
)
from callbacks.run import WANDB_ID_KEY, prepare_trainer, run_callbacks
from callbacks.run_folder import (
    RunConfig,
    RunFolders,
    RunWriteFailed,
    describe_run,
    require_free_space,
    wandb_args,
    write_failure,
)
from lightning_sched import ConfigError
from lightning_sched.cli import SEED_LIMIT, THREADS_HELP


class SchedulerParser(LightningArgumentParser):
    """Parse errors as one line (`error: model.num_jobsets: Expected a <class 'int'>. Got value: many`),
    not the usage of every option followed by the nested message."""

    command: list[str] = []  # the command line, to say which --config file sets a refused key

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or show_tracebacks():
            super().error(message, ex)
        line = one_line(message)
        self.exit(2, f"error: {line}{where_set(line, self.command)}"
                     f" (`{self.prog.replace(' [options]', '')} --help` lists the options)\n")


class SchedulerCLI(LightningCLI):
    def __init__(self, *args, **kwargs):
        argv = kwargs.get("args")
        argv = sys.argv[1:] if argv is None else argv
        # a parser for the asked subcommand only: each costs half a second of signature parsing
        self.asked_subcommand = argv[0] if argv and argv[0] in LightningCLI.subcommands() else None
        self.folders, self.asked_model, self.wandb_id, self.resumed_step = RunFolders(), None, None, None
        self.saved_shapes: dict | None = None  # the --ckpt_path weights' shapes, held against the model
        try:
            super().__init__(*args, **kwargs)
        except BaseException as error:
            self.folders.remove_unused()  # a bad config or an early stop leaves no run folder behind
            run_dir = getattr(self, "run_dir", None)
            failed = write_failure(error, run_dir, run_dir and self.subcommand == "fit" and
                                   self.config.fit.checkpoint.dirpath)
            if failed is None or show_tracebacks():
                raise
            raise failed from error
        finally:
            self.folders.release()

    def subcommands(self) -> dict[str, set[str]]:
        every = LightningCLI.subcommands()
        return {self.asked_subcommand: every[self.asked_subcommand]} if self.asked_subcommand else every

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--threads", type=Union[int, Literal["auto"]], default="auto", help=THREADS_HELP)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "eval/mean_slowdown", "checkpoint.mode": "min",
                             "checkpoint.filename": "best-{step}", "checkpoint.auto_insert_metric_name": False})
        # last.ckpt = the state at the latest validation (callbacks/checkpoints.py says why a
        # second callback and not save_last), beside the best
        parser.add_lightning_class_args(LatestCheckpoint, "last_checkpoint")
        parser.link_arguments("checkpoint.dirpath", "last_checkpoint.dirpath")
        parser.add_lightning_class_args(HeuristicComparison, "compare")

    def parse_arguments(self, parser, args) -> None:
        SchedulerParser.command = sys.argv[1:] if args is None else list(args)
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand and self.config[subcommand].get("weights_only") is False:
            raise ConfigError("--weights_only false: a checkpoint here is read with weights only (loading pickled "
                              "objects could run the file's code); leave --weights_only out")
        ckpt = subcommand and self.config[subcommand].get("ckpt_path")
        if ckpt:  # LightningCLI then replaces the model by the checkpoint's: keep the config's to compare
            saved = read_training_checkpoint(ckpt, resume=subcommand == "fit")
            require_project_classes(saved, ckpt, config_strings(self.config[subcommand].get("model")))
            held = (saved.get("hyper_parameters") or {}).get("_class_path")
            asked = (self.config[subcommand].get("model") or {}).get("class_path")
            if held and asked:  # before LightningCLI parses one's arguments as the other's
                require_same_module(ckpt, held, asked)
            self.saved_shapes = {k: tuple(v.shape) for k, v in saved["state_dict"].items()}
            if subcommand == "fit":
                self.wandb_id, self.resumed_step = saved.get(WANDB_ID_KEY), saved.get("global_step")
            self.asked_model = copy.deepcopy(self.config[subcommand].get("model"))

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        interval = config.trainer.get("val_check_interval")
        if isinstance(interval, (int, float)) and not (interval > 0 and math.isfinite(interval)):
            raise ConfigError(f"trainer.val_check_interval must be > 0 (iterations between validations, or a "
                              f"fraction of an epoch), got {interval}")
        seed = (config.get("model") or {}).get("init_args", {}).get("seed")
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < SEED_LIMIT):  # training seeds stay int64
            raise ConfigError(f"model.seed must be an integer in [0, 2^31), got {seed!r}")
        if config.get("ckpt_path"):
            for note in check_checkpoint_model(self.asked_model, config.get("model"), self.subcommand,
                                               config.ckpt_path):
                print(note, file=sys.stderr, flush=True)
        max_steps = config.trainer.get("max_steps")
        if self.subcommand == "fit" and self.resumed_step is not None and isinstance(max_steps, int) \
                and 0 <= max_steps <= self.resumed_step:  # Lightning would stop at once (and W&B open an empty run)
            raise ConfigError(f"--ckpt_path {config.ckpt_path}: its run stands at step {self.resumed_step}, which "
                              f"trainer.max_steps {max_steps} has reached: give --trainer.max_steps N, above "
                              f"{self.resumed_step}, to go on")
        set_threads(config.threads)
        configs = [*(self.config.get("config") or []), *(config.get("config") or [])]
        self.run_dir = self.folders.configure(config, self.subcommand, configs, self.wandb_id, self.resumed_step)
        self.save_config_kwargs["portable"] = self.folders.portable  # config.yaml: the paths as given

    def instantiate_trainer(self, **kwargs):
        callbacks = run_callbacks(self.config_init[self.subcommand].trainer)
        return prepare_trainer(super().instantiate_trainer(callbacks=callbacks, **kwargs))

    def print_run(self) -> None:
        if self.saved_shapes is not None:  # before Lightning loads them (a traceback)
            require_fitting_weights(self.config[self.subcommand].ckpt_path, self.saved_shapes, self.model)
        if self.trainer.is_global_zero:
            config = self.config[self.subcommand]
            print(describe_run(self.run_dir, self.subcommand, config.checkpoint.dirpath, self.trainer.loggers,
                               config.get("ckpt_path"), self.model), flush=True)
            report = getattr(getattr(self.model, "workload", None), "report", None)
            if report is not None:  # a trace's jobs: what the mapping kept, dropped and clipped
                print(report.line(), flush=True)
            for line in getattr(self.model, "data_report", list)():  # a queue log's: what reading did
                print(line, flush=True)

    def before_fit(self) -> None:
        self.print_run()
        require_monitored_metric(self.trainer, self.model)
        require_free_space(Path(self.config.fit.checkpoint.dirpath), self.model)

    def before_test(self) -> None:
        if not is_overridden("test_step", self.model):
            raise ConfigError(f"{type(self.model).__name__} has no test: `fit.py validate` runs its validation, "
                              "scripts/evaluate.py its evaluation protocols")
        self.print_run()

    before_validate = before_predict = print_run


def require_monitored_metric(trainer, model) -> None:
    """ConfigError (one line) when the best checkpoint monitors a validation key (eval/...) that neither
    the module nor a callback logs: at the start, not at the first validation (after
    val_check_interval iterations). A module that declares none (validation_metrics() None) is not checked."""
    known = model.validation_metrics() if hasattr(model, "validation_metrics") else None
    if known is None:
        return
    for callback in trainer.callbacks:
        if hasattr(callback, "validation_metrics"):
            known = known | callback.validation_metrics(model)
    for callback in trainer.checkpoint_callbacks:
        monitor = callback.monitor
        if monitor is not None and monitor.startswith("eval/") and monitor not in known:
            raise ConfigError(f"checkpoint.monitor: {type(model).__name__}'s validation logs no {monitor!r} (it logs "
                              f"{', '.join(sorted(k for k in known if k.count('/') == 1 and not k.endswith('_ci95')))}"
                              ", ...)")


def finish_wandb(exit_code: int) -> None:
    """Ends the W&B run, if one is open, with `exit_code`: without it W&B records a stopped run as
    finished (exit code 0) when the process exits."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=exit_code)


def main(args=None) -> None:
    quiet_start()
    one_line_warnings()
    stop.install()
    trainer_defaults = {
        "accelerator": "auto", "devices": 1, "max_steps": 1000, "val_check_interval": 50,
        "check_val_every_n_epoch": None, "num_sanity_val_steps": 0, "log_every_n_steps": 1,
        "enable_model_summary": False,  # the start-up lines name the model and its parameters
        # a class_path entry, parsed only if it stays the run's logger (lazy_instance checks its
        # arguments against WandbLogger's signature on every start: a sixth of a config's parse)
        "logger": {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": wandb_args()},
    }
    try:
        require_text_configs(sys.argv[1:] if args is None else args)
        require_base(sys.argv[1:] if args is None else args)
        if args is None:  # from the command line: LightningCLI reads sys.argv (it warns when given both)
            sys.argv[1:] = with_default_model(sys.argv[1:])
        else:
            args = with_default_model(list(args))
        SchedulerCLI(LightningModule, subclass_mode_model=True, trainer_defaults=trainer_defaults,
                     save_config_callback=RunConfig, parser_class=SchedulerParser, seed_everything_default=0,
                     args=args, parser_kwargs={"default_config_files": [], "parser_mode": "yaml"})
    except SIGTERMException:  # LatestCheckpoint saved the run and printed how to resume it
        finish_wandb(stop.exit_code())
        raise SystemExit(stop.exit_code()) from None
    except RunWriteFailed as failed:  # a full disk: the run's files were left whole
        print(f"error: {failed}", file=sys.stderr)
        raise SystemExit(2) from None
    except stop.Stopped as stopped:  # outside training: nothing to save (SchedulerCLI removed a new folder)
        print(f"\n{stopped}, outside training; no checkpoint written", file=sys.stderr)
        raise SystemExit(stop.exit_code()) from None
    except Exception as error:
        found = config_error(error)
        if found is None or show_tracebacks():
            raise
        print(f"error: {found}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
