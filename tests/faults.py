"""Faults injected into real `scripts/fit.py` runs (`--trainer.callbacks+=tests.faults.<Name>`)."""
from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time

from lightning.pytorch import Callback


class SigtermAt(Callback):
    """Sends SIGTERM (or `signal`, e.g. SIGINT as Ctrl-C does) to this process after iteration
    `iteration`, as a scheduler preempting it would."""

    def __init__(self, iteration: int, signal: str = "SIGTERM"):
        self.iteration, self.signal = iteration, signal

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.iteration:
            os.kill(os.getpid(), getattr(signal, self.signal))


class SigtermInEvaluation(Callback):
    """Sends SIGTERM (or `signal`) from another thread `delay` seconds into the validation after
    iteration `iteration` (or into the test loop, when `iteration` is None), a loop made to last up
    to a minute (as a queue policy's validation does: this callback waits at its batch's end).
    `sent_at`: time.monotonic() of the signal; once per process until it is set back to None (a
    resume redoes the cut validation, this time to the end)."""

    sent_at: float | None = None

    def __init__(self, iteration: int | None = None, signal: str = "SIGTERM", delay: float = 0.2):
        self.iteration, self.signal, self.delay = iteration, signal, delay

    def _now(self, trainer) -> bool:
        if SigtermInEvaluation.sent_at is not None:
            return False
        return trainer.testing if self.iteration is None else trainer.global_step == self.iteration

    def _send(self) -> None:
        SigtermInEvaluation.sent_at = time.monotonic()
        os.kill(os.getpid(), getattr(signal, self.signal))

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if self._now(trainer):
            threading.Timer(self.delay, self._send).start()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self._now(trainer):
            end = time.monotonic() + 60
            while time.monotonic() < end:
                time.sleep(0.01)

    on_test_batch_start, on_test_batch_end = on_validation_batch_start, on_validation_batch_end


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
