"""A job-level batch queue (HPC logs replayed job by job in seconds, RLScheduler's formulation),
beside DeepRM's cluster: config, state, the step, the env, heuristics and the per-job policy."""
from importlib import import_module

# loaded on first use, so that lightning_sched.decide reads queue.config's constants without torch
_EXPORTS = {"QueueConfig": ".config", "QueueState": ".state"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
