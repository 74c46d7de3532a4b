"""lightning_sched: learning cluster schedulers (DeepRM's formulation) with batched TorchRL envs."""
from .config import ClusterConfig, ConfigError
from .deeprm.env import ClusterEnv
from .jobs import JobSet
from .workloads import DeepRMWorkload, WorkloadFamily

__all__ = ["ClusterConfig", "ClusterEnv", "ConfigError", "DeepRMWorkload", "JobSet", "WorkloadFamily"]
