"""`TrainingSummary`: what a finished `fit` leaves, printed at its end: the best checkpoint (where it
is, its monitored validation value and step), the heuristics' values on the same validation jobsets
(HeuristicComparison's), and the command that evaluates it on unseen jobsets (or, for a module with
its own protocol, its `evaluation_command`)."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sched.cli import workload_flags

from .checkpoints import LatestCheckpoint
from .heuristics import HeuristicComparison

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


class TrainingSummary(Callback):
    """Prints `summary()` when fit ends normally (not when stopped by a signal or an error)."""

    def on_fit_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and not trainer.interrupted:
            print(self.summary(trainer, pl_module), flush=True)

    @staticmethod
    def summary(trainer, pl_module) -> str:
        best = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)
                     and not isinstance(c, LatestCheckpoint) and c.monitor), None)
        folder = os.path.relpath(trainer.default_root_dir)
        lines = [f"\nfit done at step {trainer.global_step}; run folder {folder}"]
        # a branch into a new folder keeps the best of the run it came from until it validates itself
        if best is None or not best.best_model_path or best.best_model_score is None or \
                Path(best.best_model_path).resolve().parent != Path(best.dirpath).resolve():
            return "\n".join(lines + [no_best(trainer)])
        path, metric = os.path.relpath(best.best_model_path), best.monitor
        direction = "lower" if best.mode == "min" else "higher"
        lines.append(f"best checkpoint: {path} ({metric} {float(best.best_model_score):.3f}, {direction} is better)")
        name = metric.split("/")[-1]
        compare = next((c for c in trainer.callbacks if isinstance(c, HeuristicComparison)), None)
        if compare is not None and hasattr(pl_module, "val_jobs") and hasattr(pl_module, "cluster"):
            reference = compare._reference(pl_module)  # evaluated once: the validation jobsets are fixed
            values = {h: s[name] for h, s in reference.items() if name in s}
            if values:
                lines.append(f"heuristics on the same {pl_module.val_jobs.batch_size} validation jobsets, {name}: "
                             + ", ".join(f"{h} {v:.3f}" for h, v in values.items()))
        # a module with its own protocol (the queue env's) names its script and arguments
        own = getattr(pl_module, "evaluation_command", None)
        flags = workload_flags(getattr(pl_module, "workload", None))  # the workload it trained on
        script, arguments = own(path) if own else ("evaluate", ["--policy", path, "tetris", "sjf", "--jobsets", "200",
                                                                *(flags or [])])
        installed = os.path.basename(sys.argv[0]).startswith("lsched-")  # run as the wheel's console command
        # the script's path from where the run was started, as the checkpoint's is: the line runs as pasted
        command = [f"lsched-{script}"] if installed else ["python", os.path.relpath(SCRIPTS / f"{script}.py")]
        lines.append(f"evaluate it{'' if own else ' on unseen jobsets'}: {shlex.join([*command, *arguments])}"
                     + ("" if own or flags is not None else " (DeepRM's workload: give evaluate.py this run's "
                                                            "workload, a family or a trace, by its flags)"))
        return "\n".join(lines)


def no_best(trainer) -> str:
    """Why a run has no best checkpoint, and what it left: a run shorter than its first validation
    (trainer.val_check_interval iterations) still saved its latest state."""
    interval = trainer.val_check_interval
    why = (f"no validation ran: the first comes after {interval} iterations (--trainer.val_check_interval) "
           f"and the run stopped at {trainer.global_step}" if isinstance(interval, int)
           and trainer.global_step < interval else "no validation ran, or no monitored metric")
    latest = next((c for c in trainer.checkpoint_callbacks if isinstance(c, LatestCheckpoint)), None)
    last = Path(latest.dirpath) / "last.ckpt" if latest is not None and latest.dirpath else None
    left = (f"; its latest state: {os.path.relpath(last)} (go on with --ckpt_path and a larger "
            "--trainer.max_steps)") if last is not None and last.is_file() else ""
    return f"no best checkpoint of this run ({why}){left}"
