"""Lightning callbacks: comparison with the heuristics during training; the checkpoints; the run's
progress bar and W&B identity. Beside them, what `scripts/fit.py` needs around its LightningCLI:
the run's folder (run_folder.py), `--ckpt_path` checks (resume.py), parse errors and the default
module (cli.py)."""
from .checkpoints import AtomicCheckpointIO, LatestCheckpoint
from .heuristics import HeuristicComparison
from .run import WANDB_ID_KEY, RunCSVLogger, RunProgressBar, WandbRunId

__all__ = ["AtomicCheckpointIO", "HeuristicComparison", "LatestCheckpoint", "RunCSVLogger", "RunProgressBar",
           "WANDB_ID_KEY", "WandbRunId"]
