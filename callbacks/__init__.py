"""Lightning callbacks: comparison with the heuristics during training."""
from .heuristics import HeuristicComparison

__all__ = ["HeuristicComparison"]
