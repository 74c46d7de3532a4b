"""Faults injected into real `scripts/fit.py` runs (`--trainer.callbacks+=tests.faults.<Name>`)."""
from __future__ import annotations

import os
import resource
import signal
import sys

from lightning.pytorch import Callback


class SigtermAt(Callback):
    """Sends SIGTERM (or `signal`, e.g. SIGINT as Ctrl-C does) to this process after iteration
    `iteration`, as a scheduler preempting it would."""

    def __init__(self, iteration: int, signal: str = "SIGTERM"):
        self.iteration, self.signal = iteration, signal

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.iteration:
            os.kill(os.getpid(), getattr(signal, self.signal))


class DiskFullAtSecondWrite(Callback):
    """The disk fills up while `name` is written into `folder` for the second time: from the moment
    that file is opened for writing, a file cannot grow past `limit` bytes (RLIMIT_FSIZE; writes
    beyond fail with EFBIG instead of killing the process)."""

    def __init__(self, folder: str, name: str = "last.ckpt", limit: int = 65536):
        self.folder, self.name, self.limit = os.path.realpath(folder), name, limit
        self.writes = 0
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        sys.addaudithook(self._on_event)

    def _on_event(self, event: str, args: tuple) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        path = os.fsdecode(args[0])
        mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(flags & (os.O_WRONLY | os.O_RDWR))
        if writing and os.path.realpath(os.path.dirname(path)) == self.folder and self.name in os.path.basename(path):
            self.writes += 1
            if self.writes == 2:
                resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
