"""What a training run shows and keeps about itself: one progress bar over the whole run, the W&B
run id in every checkpoint (a resume continues the same W&B run), a metrics.csv that a resume
appends to, and checkpoints written whole."""
from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path

from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm, _update_n
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lightning_sched.files import append_text, temp_path, write_file, write_text

from .checkpoints import AtomicCheckpointIO
from .stop import StopEvaluations
from .summary import TrainingSummary

WANDB_ID_KEY = "wandb_run_id"
RESUMED = "-resumed-"  # an offline resume's W&B run id: <the run's id>-resumed-<step> (run_folder.run_loggers)


def first_run_id(run_id: str) -> str:
    """The W&B id of the run a (possibly resumed) W&B run continues."""
    return run_id.split(RESUMED)[0]


class RunProgressBar(TQDMProgressBar):
    """Iterations done out of the run's (`trainer.max_steps`, else max_epochs x the epoch's
    iterations), with tqdm's rate and time left; a resumed run starts at its checkpoint's iteration.
    Epochs only pace the data here, so the bar does not restart with each one."""

    def run_iterations(self, trainer) -> int | None:
        if trainer.max_steps is not None and trainer.max_steps > 0:
            return trainer.max_steps
        per_epoch = self.total_train_batches
        if trainer.max_epochs is not None and trainer.max_epochs > 0 and math.isfinite(per_epoch):
            return trainer.max_epochs * int(per_epoch)
        return None

    def on_train_start(self, trainer, pl_module) -> None:
        # initial: the rate and the time left count this session's iterations only
        self.train_progress_bar = Tqdm(desc="iteration", total=self.run_iterations(trainer),
                                       initial=trainer.global_step, position=2 * self.process_position,
                                       disable=self.is_disabled, leave=True, dynamic_ncols=True, file=sys.stdout,
                                       smoothing=0, bar_format=self.BAR_FORMAT)

    def on_train_epoch_start(self, trainer, *_) -> None:
        pass  # one bar for the run

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar = self.train_progress_bar
        if bar is not None and self._should_update(trainer.global_step, bar.total or trainer.global_step):
            _update_n(bar, trainer.global_step)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_exception(self, trainer, pl_module, exception) -> None:
        # the bars end their lines, so that the error fit.py prints next starts a line of its own
        for bar in (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar):
            if bar is not None and not bar.disable:
                bar.close()

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the logger's version: the run folder says which run this is
        metrics.pop("iteration", None)  # the bar's own count
        return metrics


class WandbRunId(Callback):
    """Writes the W&B run id into each checkpoint, under WANDB_ID_KEY, so that `fit --ckpt_path`
    resumes the same W&B run (the first run's id, also after an offline resume: run_folder.run_loggers)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                if logger.version is not None:  # None on the ranks other than 0, which write no file
                    checkpoint[WANDB_ID_KEY] = first_run_id(logger.version)
                return


def run_callbacks(trainer_config) -> list[Callback]:
    """The callbacks a run adds to the trainer's own (`trainer_config`: the trainer's instantiated
    arguments): WandbRunId, TrainingSummary, StopEvaluations and, unless the config turns the bar off
    or names its own, RunProgressBar."""
    given = trainer_config.get("callbacks") or []
    given = given if isinstance(given, list) else [given]
    extra = [WandbRunId(), TrainingSummary(), StopEvaluations()]
    if trainer_config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
        extra.append(RunProgressBar())
    return [*given, *extra]


def prepare_trainer(trainer: Trainer) -> Trainer:
    """`trainer` writing its checkpoints whole (AtomicCheckpointIO, unless it has a CheckpointIO of
    its own) and starting W&B without a warning."""
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
    for logger in trainer.loggers:
        # private: WandbLogger has no public way to leave out `anonymous`; it always passes it to
        # wandb.init (None when not asked for), and wandb 0.31 warns about any value at every start
        if isinstance(logger, WandbLogger) and logger._wandb_init.get("anonymous") is None:
            logger._wandb_init.pop("anonymous")
    return trainer


class _AppendingWriter(ExperimentWriter):
    def log_hparams(self, params) -> None:
        # hparams.yaml whole or not at all (Lightning's writes it in place, and rewrites it on a resume):
        # Lightning's YAML, drafted beside it, placed by files.write_file
        self.hparams.update(params)
        final = Path(self.log_dir, self.NAME_HPARAMS_FILE)
        draft = temp_path(final)
        try:
            save_hparams_to_yaml(str(draft), self.hparams)
            text = draft.read_bytes()
        finally:
            draft.unlink(missing_ok=True)
        write_file(final, lambda file: file.write(text), overwrite=True)

    def _check_log_dir_exists(self) -> None:
        # Lightning's deletes an existing metrics.csv here; a resumed run keeps it and appends,
        # under the columns it already has (new ones rewrite the header, keeping the rows)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])

    def save(self) -> None:
        """The rows logged since the last save, appended in one write (files.append_text); new
        columns rewrite the whole file (files.write_text). Either write, when it fails (a full
        disk), leaves the file as it was, never a row cut short, and keeps the rows to write."""
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        keys = sorted(set(self.metrics_keys).union(*self.metrics))
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=keys, lineterminator="\n", extrasaction="ignore")
        if keys != self.metrics_keys or not path.is_file():
            writer.writeheader()
            if path.is_file():
                with path.open(newline="") as file:
                    writer.writerows(csv.DictReader(file))
            writer.writerows(self.metrics)
            write_text(path, text.getvalue(), overwrite=True)
        else:
            writer.writerows(self.metrics)
            append_text(path, text.getvalue())
        self.metrics_keys, self.metrics = keys, []


class RunCSVLogger(CSVLogger):
    """`save_dir/metrics.csv` (and hparams.yaml): every logged metric, one row per logging step,
    written at every step (a file that is never behind last.ckpt, and never holds a cut row: a
    write that fails leaves it as it was); a resumed run appends its rows (after RunFolders dropped
    those of the steps after its checkpoint)."""

    def __init__(self, save_dir: str):
        super().__init__(save_dir, name="", version="", flush_logs_every_n_steps=1)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
