"""Train, validate and test schedulers with LightningCLI.

    python scripts/fit.py fit --config configs/base/deeprm.yaml --config configs/deeprm_slowdown.yaml
    python scripts/fit.py fit --config configs/smoke.yaml --trainer.max_steps 5
    python scripts/fit.py fit --config runs/smoke/config.yaml --ckpt_path runs/smoke/checkpoints/last.ckpt  # resume
    python scripts/fit.py test --config configs/base/deeprm.yaml --config configs/deeprm_slowdown.yaml \
        --ckpt_path checkpoints/reinforce_slowdown.ckpt
    python scripts/fit.py fit --config configs/smoke.yaml --trainer.strategy ddp --trainer.devices 2
    python scripts/fit.py fit --print_config

`--model` picks the LightningModule (tasks.reinforce.Reinforce by default).

Run folder: everything of a run goes to one folder, `--trainer.default_root_dir` when given, else
`runs/<name>` with <name> the stem of the last `--config` (`fit` without one; `<name>-test` for the
test subcommand, and so on), `-2`, `-3`, ... appended when that folder exists. It holds
    config.yaml     the full config of the run
    checkpoints/    best-<step>.ckpt (lowest eval/mean_slowdown, `--checkpoint.*`) and last.ckpt
                    (the state at the latest validation, or where SIGTERM stopped the run)
    metrics.csv     every logged metric (`python scripts/figures.py learning_curve --metrics ...`)
    wandb/          the Weights & Biases run, offline unless WANDB_API_KEY is set
                    (`wandb sync DIR/wandb/offline-run-*` uploads it later)
`fit` prints these paths at start. `--trainer.logger false` turns W&B off (metrics.csv stays);
a `--trainer.logger` or `--checkpoint.dirpath` of your own is used as given. A folder named by
`--trainer.default_root_dir` that already holds a run is refused unless the run resumes.

Resume: `fit --ckpt_path RUN/checkpoints/last.ckpt` continues RUN (same folder, same best
checkpoint, same W&B run). The model settings of the config must be the checkpoint's (a field
that differs is an error naming it; `--config RUN/config.yaml` has them); the trainer's, such as
`--trainer.max_steps`, may change. SIGTERM saves last.ckpt, prints the command that resumes, and
exits with 143. `test`/`validate --ckpt_path` measure on the config's `model.evaluation` and take
the other model settings from the checkpoint (naming those that differ); another cluster is refused.

Errors: a bad value prints one line naming the field (`error: ...`), exit code 2; set
LIGHTNING_SCHED_TRACEBACK=1 for the full traceback or parser message.
"""
from __future__ import annotations

import copy
import itertools
import logging
import os
import re
import shlex
import shutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runs from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from jsonargparse import Namespace, lazy_instance  # noqa: E402
from lightning.pytorch import LightningModule  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar  # noqa: E402
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback  # noqa: E402
from lightning.pytorch.loggers import CSVLogger, WandbLogger  # noqa: E402
from lightning.pytorch.plugins.io import TorchCheckpointIO  # noqa: E402
from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: E402

from _common import show_tracebacks  # noqa: E402
from callbacks import (  # noqa: E402
    WANDB_ID_KEY,
    AtomicCheckpointIO,
    HeuristicComparison,
    LatestCheckpoint,
    RunCSVLogger,
    RunProgressBar,
    WandbRunId,
)
from lightning_sched import ConfigError  # noqa: E402
from lightning_sched.allocator import reuse_freed_memory  # noqa: E402
from tasks.reinforce import Reinforce  # noqa: E402

RUN_DIR_ENV = "LIGHTNING_SCHED_RUN_DIR"  # the run folder, handed to the DDP processes Lightning starts
SIGTERM_EXIT = 143  # 128 + SIGTERM: what a shell reports for a process ended by SIGTERM


def wandb_online() -> bool:
    """Online only with an API key and no WANDB_MODE asking otherwise: the default run works anywhere."""
    return bool(os.environ.get("WANDB_API_KEY")) and os.environ.get("WANDB_MODE", "online") == "online"


STRUCTURE = ("Parser key", "Does not validate", "Subtypes:", "Errors:", "- Problem with given class_path",
             "Given value")


def one_line(message: str) -> str:
    """jsonargparse's message, nested one level per config key and one branch per class a value could
    be, as `key.path: reason`: the keys down the first branch (the class the config names) and the
    first reason found there."""
    keys = []
    for line in (line.strip() for line in message.splitlines()):
        key = re.match(r'Parser key "([^"]+)"', line)
        if key:
            keys.append(key.group(1))
        elif line and not line.startswith(STRUCTURE):
            return f"{'.'.join(keys)}: {line.lstrip('- ')}" if keys else line
    return message.strip().splitlines()[0] if message.strip() else message


class SchedulerParser(LightningArgumentParser):
    """Parse errors as one line (`error: model.num_jobsets: Expected a <class 'int'>. Got value: many`),
    not the usage of every option followed by the nested message."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or show_tracebacks():
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {one_line(message)} (`{prog} --help` lists the options)\n")
        self.exit(2)


class RunConfig(SaveConfigCallback):
    """config.yaml in the run folder (Lightning's puts it in the first logger's folder)."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            self.parser.save(self.config, os.path.join(trainer.default_root_dir, self.config_filename),
                             skip_unset=False, overwrite=True, multifile=self.multifile)
        self.already_saved = trainer.strategy.broadcast(True)


CREATED: list[Path] = []  # folders this process made, removed again if a bad config stops it before they fill


def make_folder(folder: Path, exist_ok: bool) -> None:
    existed = folder.is_dir()
    folder.mkdir(parents=True, exist_ok=exist_ok)
    if not existed:
        CREATED.append(folder)


def remove_empty_created() -> None:
    for folder in reversed(CREATED):
        try:
            folder.rmdir()
        except OSError:  # not empty: the run got further than its start
            pass


def claim_folder(base: Path) -> Path:
    """`base`, else `base-2`, `base-3`, ...: the first that does not exist, created here (mkdir is
    atomic, so two runs started at once get two folders)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            make_folder(folder, exist_ok=False)
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def run_of_checkpoint(ckpt_path: str | None) -> Path | None:
    """RUN when `ckpt_path` is RUN/checkpoints/<file> of a run folder (one holding config.yaml)."""
    if not ckpt_path:
        return None
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent
    return run if ckpt.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def require_writable(folder: Path, what: str) -> None:
    """An error naming `folder` if a file cannot be created in it (checked before training starts)."""
    try:
        make_folder(folder, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{what} {folder} is not writable: {error.strerror or error}") from None


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About the size of one checkpoint: the weights, two optimizer moments and the policy copy."""
    return 4 * sum(p.numel() * p.element_size() for p in model.parameters())


def flat(namespace) -> dict:
    """A model config as {dotted key: value}, comparable between the config and a checkpoint."""
    return dict(namespace.items()) if isinstance(namespace, Namespace) else {}


def entries(logger) -> list:
    """trainer.logger as a list of logger configs (False and None: none)."""
    if logger in (None, False):
        return []
    return list(logger) if isinstance(logger, list) else [logger]


def logger_class(entry) -> type | None:
    if isinstance(entry, Namespace) and isinstance(entry.get("class_path"), str):
        from jsonargparse._util import import_object

        return import_object(entry.class_path)
    return type(entry) if not isinstance(entry, (bool, Namespace)) else None


class SchedulerCLI(LightningCLI):
    run_dir: Path
    resumed_wandb_id: str | None = None

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

    # ----- resume: the checkpoint's model, as the config asks -----------------------------------
    def _parse_ckpt_path(self) -> None:
        """LightningCLI lets a checkpoint's hyperparameters replace the config's model silently. Here
        `fit` (a resume) refuses a model of another class or any model field that differs, naming
        them. `test`, `validate` and `predict` refuse another class or cluster; they measure on the
        config's `model.evaluation`, and take the rest from the checkpoint, naming what replaced the
        config's values."""
        subcommand = self.config.get("subcommand")
        if not subcommand or not self.config[subcommand].get("ckpt_path"):
            return super()._parse_ckpt_path()
        ckpt_path = self.config[subcommand].ckpt_path
        if not Path(ckpt_path).is_file():
            raise ConfigError(f"--ckpt_path {ckpt_path}: no such file")
        asked = copy.deepcopy(self.config[subcommand].get("model"))
        try:
            super()._parse_ckpt_path()
        except ConfigError:
            raise
        except Exception as error:  # torch.load of a file that is not a checkpoint (parse errors exit)
            raise ConfigError(f"--ckpt_path {ckpt_path} is not a Lightning checkpoint (torch.load: "
                              f"{type(error).__name__}; truncated or another kind of file)") from None
        saved = self.config[subcommand].get("model")
        if asked is None or saved is None or asked == saved:
            return
        if asked.get("class_path") != saved.get("class_path"):
            raise ConfigError(f"--ckpt_path {ckpt_path} holds a {saved.get('class_path')} model; the config trains "
                              f"{asked.get('class_path')}")
        unknown = sorted(saved.get("dict_kwargs") or {})  # saved by an older signature of the module
        if unknown and subcommand == "fit":
            raise ConfigError(f"--ckpt_path {ckpt_path} was saved with arguments {saved.class_path} no longer takes "
                              f"({', '.join(unknown)}); it cannot be resumed (scripts/evaluate.py --policy reads it)")
        if unknown:
            saved.dict_kwargs = {}
            print(f"note: {subcommand} ignores the checkpoint's arguments that {saved.class_path} no longer takes: "
                  f"{', '.join(unknown)}", file=sys.stderr, flush=True)
        want, have = flat(asked.get("init_args")), flat(saved.get("init_args"))
        differing = [key for key in want if key in have and want[key] != have[key]]

        def named(keys: list[str]) -> str:
            return ", ".join(f"model.{key} (checkpoint {have[key]!r}, config {want[key]!r})" for key in keys)

        if subcommand == "fit":
            if differing:
                run = run_of_checkpoint(ckpt_path)
                hint = f"--config {run / 'config.yaml'}" if run else "the config it was trained with"
                raise ConfigError(f"--ckpt_path {ckpt_path} was trained with other settings: {named(differing)}; "
                                  f"resume with {hint}, or leave out --ckpt_path to start a new run")
            return
        for key in [k for k in differing if k.startswith("evaluation.")]:
            saved.init_args[key] = want[key]
            differing.remove(key)
        cluster = [k for k in differing if k.startswith("cluster.")]
        if cluster:
            raise ConfigError(f"--ckpt_path {ckpt_path} was trained on another cluster: {named(cluster)}")
        if differing:
            print(f"note: {subcommand} uses the checkpoint's settings where the config differs: {named(differing)}",
                  file=sys.stderr, flush=True)

    # ----- the run folder ------------------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        threads = config.get("threads", 2)
        if threads is None or threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
        reuse_freed_memory()
        save_last = (config.get("checkpoint") or {}).get("save_last")
        if save_last:  # last_checkpoint writes last.ckpt; two writers would overwrite each other
            raise ConfigError(f"checkpoint.save_last={save_last!r}: last.ckpt is kept by last_checkpoint "
                              "(the latest state); leave checkpoint.save_last unset")
        self.run_dir = self.choose_run_folder(config)
        config.trainer.default_root_dir = str(self.run_dir)
        if config.checkpoint.get("dirpath") is None:
            config.checkpoint.dirpath = str(self.run_dir / "checkpoints")
        config.last_checkpoint.dirpath = config.checkpoint.dirpath
        if self.subcommand != "fit":  # the checkpoint callbacks only matter to training
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
        if self.subcommand == "fit":
            require_writable(Path(config.checkpoint.dirpath), "the checkpoint folder")
            ckpt = config.get("ckpt_path")
            if ckpt:
                saved = torch.load(ckpt, map_location="cpu", weights_only=False)
                self.resumed_wandb_id = saved.get(WANDB_ID_KEY)
                # the folder holds this run's own checkpoints, which the resumed callbacks take over
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        config.trainer.logger = self.run_loggers(config.trainer.logger)

    def choose_run_folder(self, config) -> Path:
        """The folder of this run (see the module docstring), created."""
        inherited = os.environ.get(RUN_DIR_ENV)
        if inherited and os.environ.get("LOCAL_RANK", "0") != "0":  # a DDP process: rank 0 chose it
            return Path(inherited)
        ckpt = config.get("ckpt_path") if self.subcommand == "fit" else None
        given = config.trainer.get("default_root_dir")
        if given:
            folder = Path(given)
            held = [p for p in (folder / "config.yaml", folder / "checkpoints") if p.exists()]
            if held and not ckpt:
                raise ConfigError(f"--trainer.default_root_dir {folder} already holds a run ({held[0]}); resume it "
                                  f"with --ckpt_path, or name another folder")
            require_writable(folder, "the run folder")
        elif run_of_checkpoint(ckpt):
            folder = run_of_checkpoint(ckpt)
        else:
            configs = [*(self.config.get("config") or []), *(config.get("config") or [])]
            name = Path(str(configs[-1])).stem if configs else "fit"
            if self.subcommand != "fit":
                name = f"{name}-{self.subcommand}" if configs else self.subcommand
            try:
                folder = claim_folder(Path("runs") / name)
            except OSError as error:
                raise ConfigError(f"cannot create a run folder under runs/: {error.strerror or error}") from None
        os.environ[RUN_DIR_ENV] = str(folder)
        return folder

    def run_loggers(self, logger) -> list:
        """trainer.logger with the run folder filled in: W&B under it (offline unless WANDB_API_KEY;
        a resume continues the checkpoint's W&B run) and a CSVLogger writing its metrics.csv."""
        loggers = [Namespace(class_path="lightning.pytorch.loggers.WandbLogger", init_args=Namespace(
            project="lightning_sched", offline=not wandb_online())) if entry is True else entry
            for entry in entries(logger)]
        for entry in loggers:
            cls = logger_class(entry)
            if cls is None or not issubclass(cls, WandbLogger) or not isinstance(entry, Namespace):
                continue
            args = entry.init_args
            if args.get("save_dir") in (None, ".") and args.get("dir") is None:  # "." is WandbLogger's default
                args.save_dir = str(self.run_dir)
            if self.resumed_wandb_id and args.get("id") is None and args.get("version") is None:
                args.id = self.resumed_wandb_id
        if not any(issubclass(logger_class(e) or object, CSVLogger) for e in loggers):
            loggers.append(Namespace(class_path=f"{RunCSVLogger.__module__}.{RunCSVLogger.__qualname__}",
                                     init_args=Namespace(save_dir=str(self.run_dir))))
        return loggers

    def _instantiate_trainer(self, config, callbacks):
        callbacks = [*callbacks, WandbRunId()]
        given = config.get("callbacks") or []
        given = given if isinstance(given, list) else [given]
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
            callbacks.append(RunProgressBar())
        trainer = super()._instantiate_trainer(config, callbacks)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger) and logger._wandb_init.get("anonymous") is None:
                # Lightning passes anonymous=None, which W&B warns about at every start
                logger._wandb_init.pop("anonymous")
        return trainer

    # ----- running -------------------------------------------------------------------------------
    def _run_subcommand(self, subcommand: str) -> None:
        if self.trainer.is_global_zero:
            self.print_run(subcommand)
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:
            if self.trainer.is_global_zero:
                self.print_resume()
            raise SystemExit(SIGTERM_EXIT) from None

    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [c for c in self.trainer.callbacks if isinstance(c, ModelCheckpoint)]

    def print_run(self, subcommand: str) -> None:
        """Where this run's outputs go."""
        rows = [("run folder", str(self.run_dir)), ("config", str(self.run_dir / "config.yaml"))]
        if subcommand == "fit":
            rows.append(("checkpoints", str(self.config.fit.checkpoint.dirpath)))
        for logger in self.trainer.loggers:
            if isinstance(logger, CSVLogger):
                rows.append(("metrics", os.path.join(logger.log_dir, "metrics.csv")))
            elif isinstance(logger, WandbLogger):
                folder = os.path.join(logger.save_dir or ".", "wandb")
                mode = ("offline: `wandb sync " + os.path.join(folder, "offline-run-*") + "` uploads it"
                        if getattr(logger, "_offline", False) else "online")
                rows.append(("W&B", f"{folder} ({mode})"))
        ckpt = self.config[subcommand].get("ckpt_path")
        if ckpt:
            rows.append(("resumes" if subcommand == "fit" else "checkpoint", str(ckpt)))
        params = sum(p.numel() for p in self.model.parameters())
        rows.append(("model", f"{type(self.model).__name__}, {params:,} parameters"))
        print("\n".join(f"{name:<12} {value}" for name, value in rows), flush=True)

    def print_resume(self) -> None:
        latest = next((c for c in self.checkpoint_callbacks() if isinstance(c, LatestCheckpoint)), None)
        path = latest.interrupted_path() if latest else None
        if not path:
            print(f"\nstopped by SIGTERM at iteration {self.trainer.global_step}, before any checkpoint", flush=True)
            return
        command = shlex.join(["python", sys.argv[0], "fit", "--config", str(self.run_dir / "config.yaml"),
                              "--ckpt_path", os.path.relpath(path)])
        print(f"\nstopped by SIGTERM at iteration {self.trainer.global_step}; saved {os.path.relpath(path)}. "
              f"Resume with:\n  {command}", flush=True)

    def before_fit(self) -> None:
        folder = Path(self.config.fit.checkpoint.dirpath)
        need = 4 * checkpoint_bytes(self.model)  # best and last, each beside its previous file while written
        free = shutil.disk_usage(folder).free
        if free < need:
            raise ConfigError(f"the checkpoint folder {folder} has {free / 2**20:.1f} MiB free; its checkpoints "
                              f"need about {need / 2**20:.1f} MiB")


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


class _DropMessages(logging.Filter):
    def __init__(self, *starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


def quiet_start() -> None:
    """Silence the start-up messages a user of this script cannot act on; other warnings still show."""
    os.environ.setdefault("WANDB_SILENT", "true")
    # torch's pytree API as Lightning calls it
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # jobsets are drawn from the iteration's seed, so a resume inside an epoch draws the same ones
    warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before the epoch ended")
    drop = _DropMessages("💡 Tip", "TPU available", "HPU available", "Seed set to")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed"):
        logging.getLogger(name).addFilter(drop)


def config_error(error: BaseException) -> ConfigError | None:
    """The ConfigError that caused `error` (jsonargparse wraps those raised while instantiating)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConfigError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def main(args=None) -> None:
    quiet_start()
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
        "enable_model_summary": False,  # the start-up lines name the model and its parameters
        "logger": lazy_instance(WandbLogger, project="lightning_sched", offline=not wandb_online()),
    }
    try:
        SchedulerCLI(LightningModule, subclass_mode_model=True, trainer_defaults=trainer_defaults,
                     save_config_callback=RunConfig, parser_class=SchedulerParser, seed_everything_default=0,
                     args=args, parser_kwargs={"default_config_files": [], "parser_mode": "yaml"})
    except Exception as error:
        remove_empty_created()
        found = config_error(error)
        if found is None or show_tracebacks():
            raise
        print(f"error: {found}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
