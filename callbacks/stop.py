"""Stopping a run by signal, whenever it comes: SIGTERM (a scheduler's preemption) and SIGINT
(Ctrl-C) both stop `scripts/fit.py` the same way. While Lightning trains, its own SIGTERM handler
is in place and the run stops at the next iteration boundary (LatestCheckpoint saves last.ckpt and
prints the command that resumes it); SIGINT is passed on to it as SIGTERM. Before training starts
or after it ends, `Stopped` is raised, and the run's folder is removed unless it holds a
checkpoint: a stopped run leaves nothing or a resumable folder."""
from __future__ import annotations

import os
import signal

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as a shell reports it
_received: list[int] = []


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
        return
    raise Stopped(signum)


def install() -> None:
    """SIGTERM and SIGINT handled as above, from now on in this process (Lightning's SIGTERM handler
    calls this one too while it is in place)."""
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
