"""A training run's folder, as `scripts/fit.py` lays it out: `--trainer.default_root_dir` when
given, else `runs/<name>` with <name> the stem of the last `--config` (`fit` without one;
`<name>-test` for the test subcommand, and so on), `-2`, `-3`, ... appended when that folder
exists. It holds
    config.yaml     the full config of the run
    checkpoints/    best-<step>.ckpt (lowest eval/mean_slowdown, `--checkpoint.*`) and last.ckpt
                    (the state at the latest validation, or where SIGTERM stopped the run)
    metrics.csv     every logged metric (`python scripts/figures.py learning_curve --metrics ...`)
    wandb/          the Weights & Biases run, offline unless WANDB_API_KEY is set
                    (`wandb sync DIR/wandb/offline-run-*` uploads it later)
`--trainer.logger false` turns W&B off (metrics.csv stays); a `--trainer.logger` or
`--checkpoint.dirpath` of your own is used as given (a checkpoint folder holding another run's, or
later, checkpoints is refused, as RUN/checkpoints is). A folder named by `--trainer.default_root_dir`
that already holds a run is refused unless the run resumes; a resume continues RUN only from
RUN/checkpoints/last.ckpt (any older checkpoint of RUN would rewind it: refused, naming last.ckpt's
step; `--trainer.default_root_dir NEW` branches from it into a new folder), and drops metrics.csv's
rows after its step, so the file keeps one row per iteration. One process at a time holds a run
folder (an flock on RUN/.lock, released by the kernel when the process ends, however it ends);
the holder removes temporary files left by writes a killed process never finished. A run stopped
or failed before it wrote a checkpoint or a metric leaves no folder behind (`RunFolders.remove_unused`).

Here: which folder a run gets, the config file written into it, the loggers pointed at it, the
lines `fit` prints about it, and the checks made before training writes anything.
"""
from __future__ import annotations

import copy
import csv
import errno
import fcntl
import importlib
import io
import itertools
import os
import shutil
import sys
import warnings
from pathlib import Path

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from lightning_sched import ConfigError
from lightning_sched.files import WriteFailed, clean_temp_files, numbered_name, write_text

from .checkpoints import resume_command
from .cli import causes
from .run import RESUMED, RunCSVLogger

RUN_DIR_ENV = "LIGHTNING_SCHED_RUN_DIR"  # the run folder, handed to the DDP processes Lightning starts
RUNS = Path("runs")  # relative to the working directory
# what a run leaves in its folder: a folder holding any of them is a run's, never written over
RUN_FILES = ("config.yaml", "checkpoints", "metrics.csv", "hparams.yaml")


def run_of_checkpoint(ckpt_path: str | None) -> Path | None:
    """RUN when `ckpt_path` is RUN/checkpoints/<file> of a run folder (one holding config.yaml)."""
    if not ckpt_path:
        return None
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent
    return run if ckpt.parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def run_name(configs: list[str], subcommand: str) -> str:
    """The stem of the last config file (`fit` without one); `<stem>-test` etc. for the other subcommands."""
    name = Path(str(configs[-1])).stem if configs else "fit"
    if subcommand != "fit":
        name = f"{name}-{subcommand}" if configs else subcommand
    return name


class RunFolders:
    """Creates the folders of one process's run and remembers which it made, so that a bad config
    that stops the run before they fill leaves none behind (`remove_unused`)."""

    def __init__(self, runs: Path = RUNS):
        self.runs = Path(runs)
        self.created: list[Path] = []
        self.lock = None  # the open lock file of the run folder this process holds

    def make(self, folder: Path, exist_ok: bool) -> None:
        existed = folder.is_dir()
        folder.mkdir(parents=True, exist_ok=exist_ok)
        if not existed:
            self.created.append(folder)

    def remove_unused(self) -> None:
        """Removes the folders this process made that hold no checkpoint and no metrics.csv (a bad
        config, or a stop before training): nothing in them to resume or to read."""
        for folder in reversed(self.created):
            if folder.is_dir() and not any(folder.rglob("*.ckpt")) and not any(folder.rglob("metrics.csv")):
                shutil.rmtree(folder, ignore_errors=True)

    def hold(self, folder: Path) -> None:
        """Takes the run folder's lock (refused, naming the holder, while another process has it) and
        then removes the temporary files of writes a killed process left in it."""
        lock = open(folder / ".lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise ConfigError(f"the run folder {folder} is in use by another process (pid {holder}); wait for it "
                              "to end, or name another folder") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        self.lock = lock
        for sub in (folder, folder / "checkpoints"):
            clean_temp_files(sub)

    def release(self) -> None:
        """Lets go of the run folder's lock: at the run's end, so that a caller running fit again in
        the same process (a test, a notebook) is not refused by its own earlier run."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def claim(self, base: Path) -> Path:
        """`base`, else `base-2`, `base-3`, ...: the first that does not exist, created here (mkdir is
        atomic, so two runs started at once get two folders)."""
        base.parent.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                self.make(folder, exist_ok=False)
                return folder
            except FileExistsError:
                continue
        raise AssertionError("unreachable")

    def require_writable(self, folder: Path, what: str) -> None:
        """An error naming `folder` if a file cannot be created in it (checked before training starts)."""
        try:
            self.make(folder, exist_ok=True)
            probe = folder / f".write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise ConfigError(f"{what} {folder} is not writable: {error.strerror or error}") from None

    def choose(self, subcommand: str, configs: list[str], given: str | None, ckpt_path: str | None) -> Path:
        """The run's folder, created: `given` (--trainer.default_root_dir; refused if it holds a run
        and this is no resume), the run folder `ckpt_path` (a resume) sits in, else a new one under
        runs/ named by `run_name`. `ckpt_path` is the checkpoint `fit` resumes (None otherwise)."""
        inherited = os.environ.get(RUN_DIR_ENV)
        if inherited and os.environ.get("LOCAL_RANK", "0") != "0":  # a DDP process: rank 0 chose it
            return Path(inherited)
        if given:
            folder = Path(given)
            held = [p for p in (folder / name for name in RUN_FILES) if p.exists()]
            if held and not ckpt_path:
                latest = latest_checkpoint(run_checkpoints(folder))
                advice = f"resume it with {resume_command(folder, latest)}" if latest else \
                    "it saved no checkpoint to resume (stopped before its first validation?): remove it"
                raise ConfigError(f"--trainer.default_root_dir {folder} already holds a run ({held[0]}); {advice}, "
                                  "or name another folder")
            if held:
                require_latest(folder, ckpt_path)
            self.require_writable(folder, "the run folder")
        elif run_of_checkpoint(ckpt_path):
            folder = run_of_checkpoint(ckpt_path)
            require_latest(folder, ckpt_path)
        else:
            try:
                folder = self.claim(self.runs / run_name(configs, subcommand))
            except OSError as error:
                raise ConfigError(f"cannot create a run folder under {self.runs}/: {error.strerror or error}") from None
        os.environ[RUN_DIR_ENV] = str(folder)
        return folder

    def configure(self, config: Namespace, subcommand: str, configs: list[str], wandb_id: str | None,
                  resumed_step: int | None = None) -> Path:
        """Points the subcommand's `config` (trainer, checkpoint, last_checkpoint) at the run's
        folder, chosen and held here, and returns it. `wandb_id`: the W&B run a resume continues;
        `resumed_step`: the global step of the checkpoint it continues from."""
        save_last = (config.get("checkpoint") or {}).get("save_last")
        if save_last:  # last_checkpoint writes last.ckpt; two writers would overwrite each other
            raise ConfigError(f"checkpoint.save_last={save_last!r}: last.ckpt is kept by last_checkpoint "
                              "(the latest state); leave checkpoint.save_last unset")
        ckpt = config.get("ckpt_path") if subcommand == "fit" else None
        # config.yaml keeps the checkpoint and logger folders as given: filled in here from the run
        # folder, so a run started from the file into another folder (a branch, a test) writes there
        self.portable = copy.deepcopy(config)
        run_dir = self.choose(subcommand, configs, config.trainer.get("default_root_dir"), ckpt)
        self.portable.trainer.default_root_dir = str(run_dir)
        config.trainer.default_root_dir = str(run_dir)
        if config.checkpoint.get("dirpath") is None:
            config.checkpoint.dirpath = str(run_dir / "checkpoints")
        config.last_checkpoint.dirpath = config.checkpoint.dirpath
        dirpath = Path(config.checkpoint.dirpath)
        if subcommand != "fit":  # the checkpoint callbacks only matter to training
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
        else:  # every refusal before anything in the run's folders changes
            self.require_writable(dirpath, "the checkpoint folder")
            require_own_checkpoints(dirpath, ckpt)
        if os.environ.get("LOCAL_RANK", "0") == "0":  # DDP's other processes run inside rank 0's hold
            self.hold(run_dir)
            if ckpt and resumed_step is not None:
                drop_metrics_after(run_dir / "metrics.csv", resumed_step)
                set_aside_checkpoints_after(dirpath, resumed_step)
        if ckpt:  # the folder holds this run's own checkpoints, which the resumed callbacks take over
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        config.trainer.logger = run_loggers(config.trainer.logger, run_dir, wandb_id, resumed_step)
        return run_dir


def require_own_checkpoints(dirpath: Path, ckpt_path: str | None) -> None:
    """A run writes its checkpoints (last.ckpt, best-<step>.ckpt) only into a folder holding none, or
    holding those of the run it resumes from its last.ckpt (`ckpt_path`; from an older file of the
    folder it would rewind that run): another run's, or later ones, would be overwritten."""
    others = sorted(dirpath.glob("*.ckpt"))
    if not others:
        return
    last = dirpath / "last.ckpt"
    if ckpt_path and Path(ckpt_path).resolve().parent == dirpath.resolve():
        if not last.exists() or Path(ckpt_path).resolve() == last.resolve():
            return
        raise ConfigError(f"--ckpt_path {ckpt_path} would rewind the run whose checkpoints are in {dirpath}, which "
                          f"stands at step {checkpoint_step(last)} ({last}); resume from {last}, or branch from it "
                          "into new folders (--trainer.default_root_dir NEW --checkpoint.dirpath NEW/checkpoints)")
    raise ConfigError(f"--checkpoint.dirpath {dirpath} holds checkpoints ({others[0].name}"
                      f"{f' and {len(others) - 1} more' if len(others) > 1 else ''}) this run would overwrite: "
                      "name an empty folder, or resume the run that wrote them with its --ckpt_path")


def checkpoint_step(path: Path) -> int | None:
    """The global step a checkpoint file holds (None when it cannot be read as one)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])
    except Exception:  # unreadable: the resume itself names the file
        return None


def run_checkpoints(folder: Path) -> Path:
    """The checkpoint folder of the run in `folder`: its config.yaml's checkpoint.dirpath, else
    folder/checkpoints."""
    try:
        config = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        config = {}
    dirpath = (config.get("checkpoint") or {}).get("dirpath") if isinstance(config, dict) else None
    return Path(dirpath) if isinstance(dirpath, str) else folder / "checkpoints"


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint of `folder` a resume continues from: last.ckpt, else the one of the latest step."""
    if (folder / "last.ckpt").is_file():
        return folder / "last.ckpt"
    steps = {path: checkpoint_step(path) for path in folder.glob("*.ckpt")}
    readable = [path for path, step in steps.items() if step is not None]
    return max(readable, key=steps.get) if readable else None


def require_latest(folder: Path, ckpt_path: str) -> None:
    """A resume into run folder `folder` only from its last.ckpt (when it has one): any other file
    would rewind the run, overwriting its later checkpoints and metrics."""
    last = folder / "checkpoints" / "last.ckpt"
    if last.is_file() and Path(ckpt_path).resolve() != last.resolve():
        branch = folder.with_name(f"{folder.name}-from-{Path(ckpt_path).stem}")
        raise ConfigError(f"--ckpt_path {ckpt_path} would rewind the run in {folder}, which stands at step "
                          f"{checkpoint_step(last)} ({last}); resume from {last}, or start a branch in a new folder "
                          f"with --trainer.default_root_dir {branch}")


class RunWriteFailed(OSError):
    """A file of a run could not be written (a full disk): the one line fit.py prints."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def write_failure(error: BaseException, run_dir, ckpt_dir=None) -> RunWriteFailed | None:
    """`error` as one line when a write failed (files.WriteFailed: checkpoints, metrics.csv) or a
    disk filled (ENOSPC, EDQUOT, EFBIG) anywhere in its chain: what failed, the space left where,
    and how the run resumes from `ckpt_dir`'s last.ckpt (a fit's); None for any other error."""
    chain = list(causes(error))
    failed = next((e for e in chain if isinstance(e, WriteFailed)), None)
    full = next((e for e in chain if isinstance(e, OSError) and e.errno in DISK_FULL), None)
    if failed is None and full is None:
        return None
    where = failed.path.parent if failed else Path(full.filename).parent if full.filename else Path(run_dir or ".")
    try:
        free = f"{shutil.disk_usage(where).free / 2**20:.1f} MiB free"
    except OSError:
        free = "no free space it can tell"
    what = str(failed) if failed else f"writing {full.filename or 'a file'} failed ({full.strerror})"
    line = f"{what}; {where} has {free}"
    last = Path(ckpt_dir) / "last.ckpt" if ckpt_dir else None
    if last is not None and last.is_file():
        line += f"; free space, then resume from step {checkpoint_step(last)}: {resume_command(run_dir, last)}"
    elif last is not None:
        line += "; no checkpoint was written yet, nothing to resume"
    return RunWriteFailed(line)


def drop_metrics_after(metrics: Path, step: int) -> None:
    """Removes metrics.csv's rows of steps >= `step` (logged after the checkpoint a resume starts
    from: they are logged again), so the file keeps one row per iteration across resumes."""
    if not metrics.is_file():
        return
    with metrics.open(newline="") as file:
        rows = list(csv.reader(file))
    if not rows or "step" not in rows[0]:
        return
    at = rows[0].index("step")
    # a row cut short (a disk that filled mid-write) goes too
    kept = [rows[0]] + [r for r in rows[1:] if len(r) == len(rows[0]) and r[at] and float(r[at]) < step]
    if len(kept) < len(rows):
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(kept)
        write_text(metrics, text.getvalue(), overwrite=True)


def set_aside_checkpoints_after(folder: Path, step: int) -> None:
    """Moves the checkpoints of `folder` saved after `step` (by a run stopped between writing a best
    checkpoint and last.ckpt, which a resume from last.ckpt does not know) into folder/abandoned/,
    saying so: the resumed run writes its own, and two files of one step would disagree."""
    for path in sorted(folder.glob("*.ckpt")):
        saved = checkpoint_step(path) if path.name != "last.ckpt" else None
        if saved is not None and saved > step:
            (folder / "abandoned").mkdir(exist_ok=True)
            target = next(t for n in itertools.count(1)
                          if not (t := numbered_name(folder / "abandoned" / path.name, n)).exists())
            os.replace(path, target)
            print(f"note: {path} (step {saved}) is after the resumed step {step}: moved to {target}", file=sys.stderr)


def wandb_online() -> bool:
    """Online only with an API key and no WANDB_MODE asking otherwise: the default run works anywhere."""
    return bool(os.environ.get("WANDB_API_KEY")) and os.environ.get("WANDB_MODE", "online") == "online"


def wandb_args() -> dict:
    """The arguments of the WandbLogger a run gets unless it names its own or turns logging off."""
    return {"project": "lightning_sched", "offline": not wandb_online()}


def logger_class(entry) -> type | None:
    """The class of one `trainer.logger` entry (a class_path Namespace or an instance)."""
    if isinstance(entry, Namespace) and isinstance(entry.get("class_path"), str):
        module, _, name = entry.class_path.rpartition(".")
        return getattr(importlib.import_module(module), name)
    return type(entry) if not isinstance(entry, (bool, Namespace)) else None


def run_loggers(logger, run_dir: Path, wandb_id: str | None = None, resumed_step: int | None = None) -> list:
    """trainer.logger (True, False, None, one entry or a list) with the run folder filled in: W&B
    under it, a CSVLogger named without a folder under it too, and a RunCSVLogger writing its
    metrics.csv. A resume continues W&B run `wandb_id` online;
    offline it is a run of its own, `<wandb_id>-resumed-<resumed_step>` in group `wandb_id`: W&B cannot
    append to an offline run (its history would restart at step 0), and `wandb sync` of a second
    offline folder under one id can replace the first's history."""
    entries = [] if logger in (None, False) else list(logger) if isinstance(logger, list) else [logger]
    wandb = Namespace(class_path="lightning.pytorch.loggers.WandbLogger",
                      init_args=Namespace(wandb_args()))
    loggers = [copy.deepcopy(wandb) if entry is True else entry for entry in entries]
    for entry in loggers:
        cls = logger_class(entry)
        if cls is not None and issubclass(cls, CSVLogger) and isinstance(entry, Namespace) and \
                entry.init_args.get("save_dir") in (None, "."):  # a CSVLogger named without a folder: in the run's
            entry.init_args.save_dir = str(run_dir)
        if cls is None or not issubclass(cls, WandbLogger) or not isinstance(entry, Namespace):
            continue
        args = entry.init_args
        if args.get("save_dir") in (None, ".") and args.get("dir") is None:  # "." is WandbLogger's default
            args.save_dir = str(run_dir)
        if wandb_id and args.get("id") is None and args.get("version") is None:
            if args.get("offline") and resumed_step is not None:
                resumed = f"{wandb_id}{RESUMED}{resumed_step}"
                folder = Path(args.get("save_dir") or args.get("dir") or ".", "wandb")
                taken = {p.name.split("-", 3)[-1] for p in folder.glob("offline-run-*")}
                # a second resume from the same step gets an id of its own too
                candidates = (resumed if n == 1 else f"{resumed}-{n}" for n in itertools.count(1))
                args.id = next(run_id for run_id in candidates if run_id not in taken)
                args.group = args.get("group") or wandb_id
            else:
                args.id = wandb_id
    if not any(issubclass(logger_class(e) or object, RunCSVLogger) for e in loggers):  # RUN/metrics.csv, always
        loggers.append(Namespace(class_path=f"{RunCSVLogger.__module__}.{RunCSVLogger.__qualname__}",
                                 init_args=Namespace(save_dir=str(run_dir))))
    return loggers


def describe_run(run_dir: Path, subcommand: str, checkpoint_dir: str | None, loggers, ckpt_path: str | None,
                 model: torch.nn.Module) -> str:
    """The lines `fit` prints at start: where this run's outputs go."""
    rows = [("run folder", str(run_dir)), ("config", str(run_dir / "config.yaml"))]
    if subcommand == "fit":
        rows.append(("checkpoints", str(checkpoint_dir)))
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            rows.append(("metrics", os.path.join(logger.log_dir, "metrics.csv")))
        elif isinstance(logger, WandbLogger):
            folder = os.path.join(logger.save_dir or ".", "wandb")
            # WandbLogger has no public reader of its offline flag (reading `experiment` would start W&B)
            mode = ("offline: `wandb sync " + os.path.join(folder, "offline-run-*") + "` uploads it"
                    if getattr(logger, "_offline", False) else "online")
            rows.append(("W&B", f"{folder} ({mode})"))
    if ckpt_path:
        rows.append(("resumes" if subcommand == "fit" else "checkpoint", str(ckpt_path)))
    params = sum(p.numel() for p in model.parameters())
    rows.append(("model", f"{type(model).__name__}, {params:,} parameters"))
    return "\n".join(f"{name:<12} {value}" for name, value in rows)


def require_free_space(folder: Path, model: torch.nn.Module) -> None:
    """An error if `folder` cannot hold the run's checkpoints: best and last, each beside its
    previous file while written, each about the weights, two optimizer moments and the policy copy."""
    need = 4 * 4 * sum(p.numel() * p.element_size() for p in model.parameters())
    free = shutil.disk_usage(folder).free
    if free < need:
        raise ConfigError(f"the checkpoint folder {folder} has {free / 2**20:.1f} MiB free; its checkpoints "
                          f"need about {need / 2**20:.1f} MiB")


class RunConfig(SaveConfigCallback):
    """config.yaml in the run folder (Lightning's puts it in the first logger's folder), written whole
    or not at all: `portable`, the config as given (RunFolders.portable: the checkpoint folder and the
    loggers' folders are filled in from the run folder at each start, not stored), else the config."""

    def __init__(self, *args, portable: Namespace | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.portable = portable

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            text = self.parser.dump(self.config if self.portable is None else self.portable, skip_unset=False)
            write_text(Path(trainer.default_root_dir, self.config_filename), text, overwrite=True)
        self.already_saved = trainer.strategy.broadcast(True)
