"""Lightning callbacks: comparison with the heuristics during training; the latest checkpoint."""
from .checkpoints import LatestCheckpoint
from .heuristics import HeuristicComparison

__all__ = ["HeuristicComparison", "LatestCheckpoint"]
