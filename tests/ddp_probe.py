"""A callback the DDP test adds to a real `scripts/fit.py` run: at the end of training each rank
writes a checksum of its parameters (and, for DeepRM's modules, of the jobsets it drew last) into
$DDP_PROBE_DIR."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lightning.pytorch import Callback


class ParameterProbe(Callback):
    def on_train_end(self, trainer, pl_module):
        params = [p.detach().double() for p in pl_module.net.parameters()]
        out = {"rank": trainer.global_rank, "world": trainer.world_size, "step": trainer.global_step,
               "epoch": trainer.current_epoch,
               "params": [float(p.sum()) for p in params] + [float((p * p).sum()) for p in params]}
        if hasattr(pl_module, "draw_jobsets"):  # DeepRM's modules: what this rank drew last
            jobs = pl_module.draw_jobsets()
            out.update(jobsets=int(jobs.batch_size), arrivals=jobs.arrival.tolist(), durations=jobs.duration.tolist())
        Path(os.environ["DDP_PROBE_DIR"], f"rank{trainer.global_rank}.json").write_text(json.dumps(out))
