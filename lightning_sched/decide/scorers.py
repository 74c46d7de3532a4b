"""Policies as decide() calls them (`decision.Scorer`): a queue-policy checkpoint run by torch, or its
ONNX export run by onnxruntime (a graph, not code: no torch and no project code needed to run it).
`load_scorer` gives the rules, searched rules and networks reading rule ranks or fit delays as
policies.ObservingPolicy (torch and the queue env) instead.

The exported graph is the policy's per-job scorer:

    inputs   job_features float32 [N, 4], cluster_features float32 [1, 2]
    output   scores float32 [N]
    metadata "lightning_sched": JSON {"kind": "queue", "queue": the QueueConfig fields, "source": file name}
"""
from __future__ import annotations

import contextlib
import json
import logging
import warnings
from pathlib import Path

import numpy as np

from ..config import CHECKPOINT_KEY, QUEUE_POLICY_KIND, ConfigError, is_finite  # torch-free: .onnx runs without torch
from ..queue.config import BACKFILL, JOB_FEATURES
from .snapshot import SnapshotError


class TorchScorer:
    """A queue-policy checkpoint (tasks.queue_ppo's, or a QueuePolicyRecord file) as a Scorer; its
    network runs exactly as in the environment (the window's jobs as one row); `threads` sets
    torch's threads for the process when given (a hook shares its machine)."""

    def __init__(self, path, threads: int | None = None, record=None):
        """`record`: the file's QueuePolicyRecord when already read (queue.specs.policy_record)."""
        import torch

        from ..queue.policy import queue_network, read_queue_record

        self.torch = torch
        if threads is not None:
            torch.set_num_threads(threads)
        record = read_queue_record(path) if record is None else record
        self.net, cfg = queue_network(record, path).eval(), record.queue
        if cfg.job_features > JOB_FEATURES or cfg.clock:  # the service's features are the four and two of a snapshot
            raise SnapshotError(f"{path}: a policy reading rule ranks, fit delays or the clock decides through the "
                                "environment's observation: load_scorer gives it as policies.ObservingPolicy")
        self.config = cfg.to_dict()

    def __call__(self, job_features: np.ndarray, cluster_features: np.ndarray) -> np.ndarray:
        torch = self.torch
        jobs = torch.from_numpy(job_features).unsqueeze(0)
        with torch.no_grad():
            logits = self.net.scorer(jobs, torch.from_numpy(cluster_features).unsqueeze(0),
                                     torch.ones(jobs.shape[:2], dtype=torch.bool))
        return logits[0].numpy()


class OnnxScorer:
    """An exported policy (`export_onnx`) as a Scorer, run by onnxruntime on `threads` threads."""

    def __init__(self, path, threads: int = 1):
        try:
            import onnxruntime
        except ImportError:
            raise SnapshotError(f"{path}: an .onnx policy runs on onnxruntime (pip install onnxruntime)") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime's own exception types: a missing, damaged or foreign file
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
            raise SnapshotError(f"{path}: not an ONNX policy ({first})") from None
        meta = self.session.get_modelmeta().custom_metadata_map.get(CHECKPOINT_KEY)
        try:
            entry = json.loads(meta) if meta else {}
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or entry.get("kind") != QUEUE_POLICY_KIND:
            raise SnapshotError(f"{path}: an ONNX graph without lightning_sched's queue-policy metadata")
        self.config = checked_settings(entry.get("queue"), path)

    def __call__(self, job_features: np.ndarray, cluster_features: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"job_features": job_features,
                                       "cluster_features": cluster_features.reshape(1, 2)})[0]


def checked_settings(queue, path) -> dict:
    """The queue settings an exported policy's metadata carries, checked where decide() reads them
    (window, feature scales, backfilling); SnapshotError naming the file and the field."""
    if not isinstance(queue, dict):
        raise SnapshotError(f"{path}: its metadata's queue settings are a {type(queue).__name__}, not a mapping")
    for name in ("window", "max_wait", "max_requested"):
        value = queue.get(name)
        if not is_finite(value) or value <= 0 or (name == "window" and not isinstance(value, int)):
            raise SnapshotError(f"{path}: its metadata's queue.{name} must be a positive "
                                f"{'integer' if name == 'window' else 'number'}, got {value!r}")
    if queue.get("backfill", "off") not in BACKFILL:
        raise SnapshotError(f"{path}: its metadata's queue.backfill must be off or easy, got {queue['backfill']!r}")
    return queue


def is_onnx(path) -> bool:
    """Whether `path` names an ONNX export (decide tells one from a checkpoint by its suffix, in any case)."""
    return Path(path).suffix.lower() == ".onnx"


def load_scorer(path, threads: int | None = None):
    """The Scorer of a policy: .onnx -> OnnxScorer (on `threads` threads, default 1); a rule name, a
    searched rule's checkpoint or a network reading more than a snapshot's features ->
    policies.ObservingPolicy; another checkpoint -> TorchScorer (torch's threads set to `threads`
    when given, else left)."""
    if is_onnx(path):
        return OnnxScorer(path, 1 if threads is None else threads)
    from ..queue.specs import policy_record
    from .policies import ObservingPolicy, observes

    record = policy_record(str(path))  # the file read once
    return ObservingPolicy(str(path), threads, record) if observes(record) else TorchScorer(path, threads, record)


def clock_start_flag_error(value: float | None) -> str | None:
    """The refusal of a --clock_start flag that is not a finite number of seconds >= 0 (None: fine)."""
    if value is not None and not 0 <= value < float("inf"):
        return f"--clock_start must be a finite number of seconds >= 0, got {value:g}"
    return None


def require_clock_start(scorer, clock_start: float | None) -> None:
    """ConfigError (one line) when `scorer` reads submit times or the time of day and `clock_start`
    is None: a service checks it once at its start, not at the first snapshot with waiting jobs."""
    reason = getattr(scorer, "clock_reason", None)  # only policies.ObservingPolicy has one
    if reason and clock_start is None:
        from .policies import needs_clock_start

        raise ConfigError(needs_clock_start(scorer.spec, reason))


def export_onnx(checkpoint, out, overwrite: bool = False) -> Path:
    """Write the queue policy of `checkpoint` as one ONNX file `out` (refused when it exists, unless
    `overwrite`); written whole or not at all (files.write_file). Returns `out`."""
    import onnx
    import torch
    from torch import nn

    from ..files import write_file
    from ..queue.policy import load_queue_policy

    if not is_onnx(out):  # load_scorer tells an export from a checkpoint by the name
        raise ConfigError(f"--export: the file's name must end in .onnx, got {out}")
    if is_onnx(checkpoint):
        raise ConfigError(f"--export: {checkpoint} is an export already (it reads a queue checkpoint, .ckpt)")
    from ..queue.specs import is_rule

    if is_rule(str(checkpoint)):
        raise ConfigError(f"--export: {checkpoint} is a rule: only a network's checkpoint exports to ONNX (decide.py "
                          "runs the rule itself)")
    net, cfg = load_queue_policy(checkpoint)
    if net.spec.context or net.spec.extra_inputs or net.spec.clock:  # inputs the graph does not take yet
        raise ConfigError(f"{checkpoint}: a policy with QueuePolicySpec.context, rule_ranks, fit_delay or clock "
                          "cannot be exported to ONNX yet")
    if net.spec.ensemble > 1:
        raise ConfigError(f"{checkpoint}: an ensemble (QueuePolicySpec.ensemble) cannot be exported to ONNX yet")
    slot_mlp = net.scorer.mlp

    class JobScores(nn.Module):
        """The scorer's layers on N jobs of one queue (JobMLP without the window's mask)."""

        def __init__(self):
            super().__init__()
            self.slot_mlp = slot_mlp

        def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor) -> torch.Tensor:
            return self.slot_mlp.jobs(job_features, cluster_features).squeeze(-1)

    jobs = torch.export.Dim("jobs", min=1)
    with warnings.catch_warnings(), _quiet("torch.onnx"):  # the exporter's progress lines and notes
        warnings.simplefilter("ignore")
        program = torch.onnx.export(JobScores().eval(), (torch.zeros(3, 4), torch.zeros(1, 2)), dynamo=True,
                                    input_names=["job_features", "cluster_features"], output_names=["scores"],
                                    dynamic_shapes=({0: jobs}, None), verbose=False)
    model = program.model_proto
    entry = {"kind": QUEUE_POLICY_KIND, "queue": cfg.to_dict(), "source": Path(checkpoint).name}
    onnx.helper.set_model_props(model, {CHECKPOINT_KEY: json.dumps(entry)})
    graph = model.SerializeToString()
    return write_file(out, lambda file: file.write(graph), overwrite)


@contextlib.contextmanager
def _quiet(logger: str):
    """`logger` (and its children) silenced below errors for the block."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
