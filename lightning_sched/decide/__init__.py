"""A trained queue policy as a decision service (docs/deploy.md): a snapshot of a real queue in, the
policy's decision out. Reading snapshots and the decision rules need numpy only; a checkpoint runs
on torch, an exported .onnx policy on onnxruntime alone; a rule, a searched rule or a network reading
rule ranks or fit delays on torch and the queue env (policies.py)."""
from .decision import Window, decide
from .scorers import OnnxScorer, TorchScorer, export_onnx, load_scorer, require_clock_start
from .snapshot import MAX_JOBS, Snapshot, SnapshotError, read_snapshot

__all__ = ["MAX_JOBS", "OnnxScorer", "Snapshot", "SnapshotError", "TorchScorer", "decide", "export_onnx",
           "load_scorer", "read_snapshot", "require_clock_start", "Window"]
