"""A linear priority rule for the queue env, and its checkpoint (results: docs/hpc_queue_rounds.md).

The rules of the literature are fixed formulas over a job's requested time, processors and wait
(F1 itself was fitted by regression on simulations, Carastan-Santos & de Camargo, SC'17). A linear
rule weighs the same kind of features,

    score = sum_k weight_k * scale_k * feature_k      (the lowest score goes first),

so F1 is one point of the family (area 1, log submit 1, the rest 0), and a search on the objective
itself (scripts/experiments/queue_rule_search.py: the cross-entropy method on mean bounded
slowdown) can move from there. Like the rules it ranks the whole queue. Its checkpoint holds the
feature names and the weights only (plain lists, read with weights_only=True).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..batched import acts_on_any_batch
from ..config import CHECKPOINT_KEY, QUEUE_RULE_KIND, ConfigError
from ..files import load_torch_file, write_torch
from .heuristics import leading_slots, window_columns
from .reservation import reserve_pick

# (name, scale): a unit of weight moves a job about as far in the order for every feature
RULE_FEATURES = (("area", 1.0),              # log10(requested) * processors, F1's first term
                 ("log_submit", 870.0),      # log10(submit), F1's second term
                 ("log_requested", 50.0),
                 ("processors", 5.0),
                 ("log_wait", 200.0),        # log10(wait + 10 s)
                 ("fits_now", 500.0),        # 1 when the job's processors are free now
                 ("log_wait_per_requested", 200.0),  # log10((wait + 10 s) / requested), UNICEP-like
                 # what else waits: q = log10(1 + queue length)
                 ("fits_now_x_queue", 300.0),
                 ("area_x_queue", 0.5))
BASIC = 7  # the features without the queue length's
F1_WEIGHTS = (1.0, 1.0) + (0.0,) * (len(RULE_FEATURES) - 2)


def rule_features(td) -> tuple[torch.Tensor, torch.Tensor]:
    """All RULE_FEATURES of every window slot, DoubleTensor[B, W, len(RULE_FEATURES)], and which slots hold a
    job, BoolTensor[B, W]; `td` holds the keys the rules read (heuristics.priority), and the env's
    "job_features" (fits now) and "queue_length". Requested times are taken as at least 1 s (a read
    log's are), where F1_WEIGHTS give heuristics' F1 exactly."""
    filled, submit, requested, processors = window_columns(td)
    wait = (td["time"].double() - submit).clamp(min=0)
    log_requested, log_wait = torch.log10(requested.clamp(min=1)), torch.log10(wait + 10)
    fits, area = td["job_features"][..., 3].double(), log_requested * processors  # the env's "fits now"
    queue = torch.log10(1 + td["queue_length"].double())
    feats = torch.stack([area, torch.log10(submit.clamp(min=0.1)), log_requested, processors, log_wait, fits,
                         log_wait - log_requested, fits * queue, area * queue], -1)
    return feats, filled


class LinearRule:
    """A queue-env policy (td -> td with "action"): the job with the lowest weights . (scale *
    features) goes first, over the first K RULE_FEATURES. `weights`: DoubleTensor[K], or [B, K] for a
    different rule in each row (a search runs a population at once). `reserve`: play the ranking
    with its own reservation (queue.reservation; run it with reservation.reserving_config)."""

    def __init__(self, weights: torch.Tensor, reserve: bool = False):
        weights = torch.as_tensor(weights, dtype=torch.double)
        k = weights.shape[-1]
        if k not in (BASIC, len(RULE_FEATURES)):
            raise ConfigError(f"LinearRule weights must be {BASIC} or {len(RULE_FEATURES)} numbers (RULE_FEATURES), "
                              f"got {k}")
        self.scaled_weights = weights * torch.tensor([s for _, s in RULE_FEATURES[:k]], dtype=torch.double)
        self.reserve = reserve

    @acts_on_any_batch
    def __call__(self, td):
        view = leading_slots(td)
        score = self.ranking(view)
        td["action"] = reserve_pick(score, view) if self.reserve else score.argmin(-1)
        return td

    def ranking(self, td) -> torch.Tensor:
        """The rule's score of the window's leading slots (`leading_slots`), DoubleTensor[B, n], lower first."""
        feats, filled = rule_features(leading_slots(td))
        weights = self.scaled_weights.to(feats.device)
        weights = weights if weights.dim() == 2 else weights.expand(feats.shape[0], -1)
        score = (feats[..., :weights.shape[-1]] * weights[:, None, :]).sum(-1)
        return torch.where(filled, score, torch.inf)


def linear_rule_entry(weights, provenance: dict, reserve: bool = False) -> dict:
    """The checkpoint entry of the rule `weights` (K finite numbers): plain values only."""
    weights = [float(w) for w in weights]
    if not all(math.isfinite(w) for w in weights):
        raise ConfigError(f"weights must be finite numbers, got {weights}")
    LinearRule(torch.tensor(weights))  # the length check
    return {"kind": QUEUE_RULE_KIND, "features": [name for name, _ in RULE_FEATURES[:len(weights)]], "weights": weights,
            "reserve": bool(reserve), "provenance": dict(provenance), "version": 1}


def save_linear_rule(path, weights, provenance: dict, overwrite: bool = False, reserve: bool = False):
    """Write the rule `weights` (K numbers), whether it plays with its own reservation (`reserve`)
    and `provenance` (how it was found: plain values) as a checkpoint that `load_linear_rule` reads;
    written whole or not at all (files.write_torch)."""
    try:
        entry = linear_rule_entry(weights, provenance, reserve)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}; nothing written") from None
    return write_torch({CHECKPOINT_KEY: entry}, path, overwrite=overwrite)


def rule_entry(path) -> dict | None:
    """The linear rule entry of checkpoint `path`, or None when the file is another kind of checkpoint."""
    data = load_torch_file(path, "queue policy checkpoint", weights_only=True)
    entry = data.get(CHECKPOINT_KEY) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) and entry.get("kind") == QUEUE_RULE_KIND else None


@dataclass(frozen=True)
class LinearRuleRecord:
    """A searched rule's checkpoint, read (`linear_rule_record`): the rule, and how it was found."""

    rule: LinearRule
    provenance: dict
    """Plain values: the logs it was searched on ("logs"), the share of each it read ("read_fraction"),
    its backfilling ("backfill"), the search's settings."""

    def trained_on(self) -> tuple[list, float, str | None]:
        """(the logs its search read, the share of each, its backfilling or None), as recorded (checked
        by the reader of the provenance)."""
        known = self.provenance
        return (known.get("logs", known.get("log")) or [],
                known.get("read_fraction", known.get("train_fraction", 1.0)), known.get("backfill"))


def linear_rule_record(path, entry: dict) -> LinearRuleRecord:
    """The record of a linear rule checkpoint entry (`rule_entry`) read from `path`; a ConfigError names
    the file and the field when its features or weights do not fit."""
    names, weights = entry.get("features"), entry.get("weights")
    known = [name for name, _ in RULE_FEATURES]
    if not isinstance(names, list) or names not in (known[:BASIC], known):
        raise ConfigError(f"{path}: features must be {known[:BASIC]} or {known}, got {names!r}")
    if not isinstance(weights, list) or len(weights) != len(names) or \
            not all(isinstance(w, (int, float)) and math.isfinite(w) for w in weights):
        raise ConfigError(f"{path}: weights must be {len(names)} finite numbers, got {weights!r}")
    reserve = entry.get("reserve", False)  # a rule recorded without the key plays without reservation
    if not isinstance(reserve, bool):
        raise ConfigError(f"{path}: reserve must be true or false, got {reserve!r}")
    provenance = entry.get("provenance", {})
    if not isinstance(provenance, dict):
        raise ConfigError(f"{path}: provenance must be a mapping, got {type(provenance).__name__}")
    return LinearRuleRecord(LinearRule(torch.tensor(weights, dtype=torch.double), reserve), dict(provenance))


def load_linear_rule(path) -> tuple[LinearRule, dict]:
    """(the LinearRule, its provenance) of a checkpoint written by `save_linear_rule`; a ConfigError
    names the file and the field when it is another kind, or its features or weights do not fit."""
    entry = rule_entry(path)
    if entry is None:
        raise ConfigError(f"{path}: not a linear queue rule (no '{CHECKPOINT_KEY}' entry of kind '{QUEUE_RULE_KIND}')")
    record = linear_rule_record(path, entry)
    return record.rule, record.provenance
