"""A job-level batch queue (HPC logs replayed job by job in seconds, RLScheduler's formulation),
beside DeepRM's cluster: config, state, the step, the env, heuristics and the per-job policy."""
from .config import QueueConfig
from .state import QueueState

__all__ = ["QueueConfig", "QueueState"]
