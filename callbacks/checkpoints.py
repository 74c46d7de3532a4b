"""Checkpoints of a run: last.ckpt as the latest state, and files that are always whole.

Lightning's `ModelCheckpoint(save_last=True)` copies a checkpoint to last.ckpt only when it saves
one, i.e. when the monitored value improves, so last.ckpt would be the best checkpoint, not the
latest. `scripts/fit.py` keeps the best with one ModelCheckpoint (a monitor) and the latest with
`LatestCheckpoint` (no monitor: it saves at every validation and when the run is stopped by
SIGTERM, replacing its previous file).

Lightning stages a checkpoint in $TMPDIR and moves it; across filesystems the move is a copy over
the previous file, so a kill or a full disk during the copy leaves a truncated file and no good
one. `AtomicCheckpointIO` writes next to the target and renames.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException


class LatestCheckpoint(ModelCheckpoint):
    """`last.ckpt`, rewritten at every validation and when SIGTERM stops training."""

    def __init__(self, dirpath: str | None = None, filename: str = "last", save_weights_only: bool = False):
        super().__init__(dirpath=dirpath, filename=filename, monitor=None, save_top_k=1,
                         save_weights_only=save_weights_only, enable_version_counter=False)

    @property
    def state_key(self) -> str:
        # its own key: a monitor-less best-checkpoint callback beside it would otherwise share one
        return "LatestCheckpoint"

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Lightning raises SIGTERMException between iterations (after the optimizer step and any
        # validation), so the state saved here is a consistent point to resume from
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit":
            self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))

    def interrupted_path(self) -> str | None:
        """The file a stopped run resumes from (None before the first save)."""
        return self.last_model_path or self.best_model_path or None


def atomic_torch_save(checkpoint: dict, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in `path`'s folder, flushed to disk, then renamed over `path`
    (a rename within one folder is atomic): a failure at any point leaves the previous file whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # os.open with 0o666: the file gets the umask's permissions, as a plain open would
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as file:
            torch.save(checkpoint, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, (OSError, RuntimeError)):  # torch reports a failed write as a RuntimeError
            raise OSError(f"writing the checkpoint {path} failed ({error}); {path.name} was left as it "
                          "was") from error
        raise


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints on local disk written by `atomic_torch_save`; remote URLs as Lightning does."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)
