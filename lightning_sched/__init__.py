"""lightning_sched: learning cluster schedulers (DeepRM's formulation) with batched TorchRL envs.

The names below load on first use, so that a part needing no torch (lightning_sched.decide with an
ONNX policy) imports without it."""
from importlib import import_module

_EXPORTS = {"ClusterConfig": ".config", "ConfigError": ".config", "ClusterEnv": ".deeprm.env", "JobSet": ".jobs",
            "DeepRMWorkload": ".workloads", "WorkloadFamily": ".workloads"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
