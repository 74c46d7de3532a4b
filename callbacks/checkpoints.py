"""Checkpoints of a run: last.ckpt as the latest state, and files that are always whole.

Lightning's `ModelCheckpoint(save_last=True)` copies a checkpoint to last.ckpt only when it saves
one, i.e. when the monitored value improves, so last.ckpt would be the best checkpoint, not the
latest. `scripts/fit.py` keeps the best with one ModelCheckpoint (a monitor) and the latest with
`LatestCheckpoint` (no monitor: it saves at every validation, at the end, and when the run is stopped by
SIGTERM or Ctrl-C (callbacks/stop.py), replacing its previous file, and then prints the command
that resumes the run).

Lightning stages a checkpoint in $TMPDIR and moves it; across filesystems the move is a copy over
the previous file, so a kill or a full disk during the copy leaves a truncated file and no good
one. `AtomicCheckpointIO` writes next to the target and renames.
"""
from __future__ import annotations

import os
import shlex
import sys

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightning_sched import ConfigError
from lightning_sched.files import atomic_torch_save, load_torch_file

from .stop import signal_name


def resume_command(run_dir: str | os.PathLike, ckpt: str | os.PathLike, subcommand: str = "fit") -> str:
    """The `scripts/fit.py` command that resumes the run in `run_dir` (holding its config.yaml)
    from the checkpoint `ckpt`; with `subcommand` validate, the one that measures it (into a folder
    of its own beside the run's, which a validation must not write into)."""
    own = [] if subcommand == "fit" else ["--trainer.default_root_dir", f"{os.fspath(run_dir)}-{subcommand}"]
    return shlex.join(["python", sys.argv[0], subcommand, "--config", os.path.join(run_dir, "config.yaml"),
                       "--ckpt_path", os.path.relpath(ckpt), *own])


def redo_validation(trainer) -> None:
    """Marks the validation a signal cut (StopEvaluations) as Lightning marks one cut inside its
    batch: started, not processed, which a resume goes back to and runs again (Lightning's own
    restart of a validation, its counters public on the loop). Cut elsewhere (a hook after the
    batch), it would be skipped, and the run would miss that validation's best checkpoint."""
    progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
    for counts in (progress.total, progress.current):
        counts.ready = counts.started = max(counts.started, 1)
        counts.processed = counts.completed = counts.started - 1


class LatestCheckpoint(ModelCheckpoint):
    """`last.ckpt`, rewritten at every validation, at the end of training and when SIGTERM stops it."""

    def __init__(self, dirpath: str | None = None, filename: str = "last", save_weights_only: bool = False):
        if save_weights_only:  # the file a stopped run resumes from, and resuming needs the optimizer's state
            raise ConfigError("last_checkpoint.save_weights_only: last.ckpt is what a run resumes from, which needs "
                              "the optimizer's state; checkpoint.save_weights_only may thin the best-<step> files")
        super().__init__(dirpath=dirpath, filename=filename, monitor=None, save_top_k=1,
                         save_weights_only=save_weights_only, enable_version_counter=False)

    @property
    def state_key(self) -> str:
        # its own key: a monitor-less best-checkpoint callback beside it would otherwise share one
        return "LatestCheckpoint"

    def on_train_end(self, trainer, pl_module) -> None:
        # iterations after the last validation (max_steps not a multiple of val_check_interval)
        # would otherwise be on no disk
        if not self._should_skip_saving_checkpoint(trainer) and trainer.global_step != self._last_global_step_saved:
            self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Lightning raises SIGTERMException between iterations (after the optimizer step and any
        # validation), StopEvaluations during a validation (which changes no weight), so the state
        # saved here is a consistent point to resume from
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit":
            if trainer.validating:
                redo_validation(trainer)
            # a validation that ended this iteration saved it already, as Lightning resumes from one (its
            # logging step not yet counted); saved again after the iteration's end, the resumed run's
            # logged steps would all be one late
            if trainer.validating or trainer.global_step != self._last_global_step_saved:
                self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))
            if trainer.is_global_zero:
                final = 0 <= trainer.max_steps <= trainer.global_step  # nothing left to train: no resume
                print(self.stopped_message(trainer.global_step, trainer.default_root_dir, trainer.validating, final),
                      flush=True)

    def stopped_message(self, iteration: int, run_dir: str, validating: bool = False, final: bool = False) -> str:
        """Where a run stopped by SIGTERM at `iteration` (in the validation after it: `validating`)
        was saved, and the `scripts/fit.py` command that resumes it (the run folder `run_dir` holds
        its config.yaml); at its last iteration (`final`), the one that validates what it saved."""
        path = self.interrupted_path()
        redo = "the validate command below measures it" if final else "the resume redoes it"
        at = f"at iteration {iteration}" + (f" (its validation cut short: {redo})" if validating else "")
        if not path:
            return f"\nstopped by {signal_name()} {at}, before any checkpoint"
        if final:  # a resume has no iteration left to run (fit.py refuses it)
            return (f"\nstopped by {signal_name()} {at}, its last; saved {os.path.relpath(path)}. Validate it "
                    f"with:\n  {resume_command(run_dir, path, 'validate')}")
        return (f"\nstopped by {signal_name()} {at}; saved {os.path.relpath(path)}. "
                f"Resume with:\n  {resume_command(run_dir, path)}")

    def interrupted_path(self) -> str | None:
        """The file a stopped run resumes from (None before the first save)."""
        return self.last_model_path or self.best_model_path or None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints on local disk written by `atomic_torch_save`; remote URLs as Lightning does. Every
    load reads weights only, whatever the caller asks: a file swapped after fit.py checked it, or
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, never unpickles objects (which could run code)."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        if "://" in str(path):
            return super().load_checkpoint(path, map_location, weights_only=True)
        return load_torch_file(path, "Lightning checkpoint", weights_only=True,
                               map_location=map_location or (lambda storage, location: storage))
