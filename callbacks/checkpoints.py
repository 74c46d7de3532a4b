"""last.ckpt as the state at the latest validation.

Lightning's `ModelCheckpoint(save_last=True)` copies a checkpoint to last.ckpt only when it saves
one, i.e. when the monitored value improves, so last.ckpt would be the best checkpoint, not the
latest. `scripts/fit.py` keeps the best with one ModelCheckpoint (a monitor) and the latest with
this one (no monitor: it saves at every validation, replacing its previous file).
"""
from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint


class LatestCheckpoint(ModelCheckpoint):
    """`last.ckpt`, rewritten at every validation."""

    def __init__(self, dirpath: str | None = None, filename: str = "last", save_weights_only: bool = False):
        super().__init__(dirpath=dirpath, filename=filename, monitor=None, save_top_k=1,
                         save_weights_only=save_weights_only, enable_version_counter=False)

    @property
    def state_key(self) -> str:
        # its own key: a monitor-less best-checkpoint callback beside it would otherwise share one
        return "LatestCheckpoint"
