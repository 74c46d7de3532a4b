"""Stopping a run by signal, whenever it comes: SIGTERM (a scheduler's preemption) and SIGINT
(Ctrl-C) both stop `scripts/fit.py` the same way. While Lightning trains, its own SIGTERM handler
is in place and the run stops at the next iteration boundary (LatestCheckpoint saves last.ckpt and
prints the command that resumes it); SIGINT is passed on to it as SIGTERM. During a validation or
test loop (`StopEvaluations`) the signal stops it at once, as Lightning's SIGTERMException: Lightning
would let the loop's batch end first, and here one batch is the whole validation (a minute for a
queue policy). Before training starts or after it ends, `Stopped` is raised, and the run's folder
is removed unless it holds a checkpoint: a stopped run leaves nothing or a resumable folder; a
second signal there only says the run is already stopping."""
from __future__ import annotations

import os
import signal
import sys

from lightning.pytorch import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as a shell reports it
_received: list[int] = []
_evaluating: list[bool] = [False]  # a validation or test loop runs: a signal stops it at once


class Stopped(BaseException):
    """A stop signal outside training (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal_name(signum)}")
        self.signum = signum


def signal_name(signum: int | None = None) -> str:
    """The signal that stopped the run (the first received), as the messages name it."""
    signum = signum if signum is not None else (_received[0] if _received else signal.SIGTERM)
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


def exit_code() -> int:
    return EXIT_CODES.get(_received[0] if _received else signal.SIGTERM, 143)


def _handle(signum, frame) -> None:
    _received.append(signum)
    if signal.getsignal(signal.SIGTERM) is not _handle:  # Lightning's handler: it stops the run itself
        if signum == signal.SIGINT:
            os.kill(os.getpid(), signal.SIGTERM)
        elif _evaluating[0]:
            _evaluating[0] = False  # once: a second signal while the run saves must not cut the save
            raise SIGTERMException
        return
    if len(_received) > 1:  # the first one stops the run; raised again, this one would land in its clean-up
        os.write(2, b"already stopping\n")  # (atexit, a finaliser: "Exception ignored in ...") and cut it short
        return
    raise Stopped(signum)


def forget() -> None:
    """Forgets the signals received (a run in this process that starts again, a test after one)."""
    _received.clear()
    _evaluating[0] = False


def install() -> None:
    """SIGTERM and SIGINT handled as above, from now on in this process (Lightning's SIGTERM handler
    calls this one too while it is in place). A run started again in the same process starts afresh."""
    forget()
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)


class StopEvaluations(Callback):
    """A stop signal during a validation or test loop stops it at once (`_handle` raises Lightning's
    SIGTERMException there). Validation changes no weight: last.ckpt then holds the last training
    step's state, as a signal just before the validation would have left it. One process only:
    under DDP a rank stopping mid-loop would leave the others waiting in a collective, so the
    loop ends first there, as Lightning has it."""

    def _set(self, evaluating: bool) -> None:
        _evaluating[0] = evaluating

    def on_validation_start(self, trainer, pl_module) -> None:
        self._set(trainer.world_size == 1)

    def on_test_start(self, trainer, pl_module) -> None:
        self._set(trainer.world_size == 1)

    def on_validation_end(self, trainer, pl_module) -> None:
        self._set(False)

    def on_test_end(self, trainer, pl_module) -> None:
        self._set(False)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._set(False)
        if isinstance(exception, SIGTERMException) and trainer.state.fn != "fit" and trainer.is_global_zero:
            print(f"\nstopped by {signal_name()} during {trainer.state.fn.value}; nothing to save", file=sys.stderr,
                  flush=True)
