"""What a queue policy named on a command line is: a rule (fcfs, sjf, f1, ..., RULE+reserve) or a
checkpoint file (a network's `QueuePolicyRecord` or a searched rule's `LinearRuleRecord`), read once,
and the config each runs with on a log (`resolve`). Evaluation, adaptation and the decision
service all turn names into policies here."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from ..config import CHECKPOINT_KEY, QUEUE_RULE_KIND, ConfigError
from ..files import load_torch_file
from .config import QueueConfig
from .heuristics import HEURISTICS, QueueHeuristic
from .linear_rule import LinearRuleRecord, linear_rule_record
from .policy import QueuePolicy, QueuePolicyRecord
from .policy.checkpoints import queue_network, queue_record
from .reservation import SUFFIX, ReservingRule, reserved_rule, reserving_config

QueueCheckpoint = QueuePolicyRecord | LinearRuleRecord


def is_rule(spec: str) -> bool:
    """Whether `spec` names a rule (or RULE+reserve), which `resolve` takes before any file of that name."""
    return spec in HEURISTICS or reserved_rule(spec) is not None


def read_queue_checkpoint(path) -> QueueCheckpoint:
    """The record of a queue checkpoint file, read once (weights_only=True): a network's or a searched
    rule's; a ConfigError names the file when it is neither."""
    data = load_torch_file(path, "queue policy checkpoint", weights_only=True)
    entry = data.get(CHECKPOINT_KEY) if isinstance(data, dict) else None
    if isinstance(entry, dict) and entry.get("kind") == QUEUE_RULE_KIND:
        return linear_rule_record(path, entry)
    return queue_record(data, path)


def policy_record(spec: str) -> QueueCheckpoint | None:
    """The record of policy `spec`: None for a rule's name, a checkpoint's record for a file; a
    ConfigError naming the choices for anything else."""
    if is_rule(spec):
        return None
    if not Path(spec).is_file():
        raise ConfigError(f"--policy {spec!r} is neither a queue rule ({', '.join(HEURISTICS)}; or RULE{SUFFIX}, a "
                          "rule with its own reservation) nor a checkpoint file")
    return read_queue_checkpoint(spec)


def network_config(cfg: QueueConfig, trained: QueueConfig) -> QueueConfig:
    """The config a network runs with on `cfg`'s log: what it was trained to see (`trained`'s
    window, feature scales, extra job features and clock)."""
    return replace(cfg, window=trained.window, max_wait=trained.max_wait, max_requested=trained.max_requested,
                   rule_ranks=trained.rule_ranks, fit_delay=trained.fit_delay, clock=trained.clock)


def heuristic_config(cfg: QueueConfig, reserve: bool = False) -> QueueConfig:
    """The config heuristics run with: a window that shows the whole queue; with `reserve`, also the
    fit delay a rule playing its own reservation reads (reservation.reserving_config)."""
    full = replace(cfg, window=cfg.sequence_length)
    return reserving_config(full) if reserve else full


def resolve(spec: str, cfg: QueueConfig, device="cpu", seed: int = 0,
            record: QueueCheckpoint | None = None) -> tuple[Callable, QueueConfig]:
    """A rule name (or RULE+reserve: queue.reservation) or a queue checkpoint path (a network's or a
    linear rule's; its `record` when already read) -> (policy, the config it runs with on `cfg`'s log:
    a rule with the whole queue visible, a network with the window it was trained with)."""
    if spec in HEURISTICS:
        return QueueHeuristic(spec, torch.Generator().manual_seed(seed)), heuristic_config(cfg)
    if reserved_rule(spec) is not None:  # a rule with its own reservation
        return ReservingRule(reserved_rule(spec)), heuristic_config(cfg, reserve=True)
    record = policy_record(spec) if record is None else record
    if isinstance(record, LinearRuleRecord):  # a searched linear rule ranks the whole queue, as the rules do
        return record.rule, heuristic_config(cfg, record.rule.reserve)
    net = queue_network(record, spec).to(device).eval()
    return QueuePolicy(net), network_config(cfg, record.queue)
