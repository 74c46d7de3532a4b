"""A linear priority rule for the queue env, searched by the cross-entropy method on mean bounded
slowdown itself (lightning_sched.queue.rule_search; results: docs/hpc_queue_rounds.md).

One training step is one generation: a population of rules runs on the same sequences of the first
60% of each log, and the search's mean moves to the elite. Validation runs the current mean on the
`recent` sequences (60-80% of each log) beside the five rules, so the best checkpoint is chosen on
jobs the search never ran and the held-out test (80-100%) never sees. A checkpoint holds the rule
as `queue.linear_rule` writes it (read with weights_only=True by evaluate.py --env queue --policy);
the search's spread and generator are its optimizer's state (queue.rule_search.CrossEntropyMethod),
so Lightning counts generations as steps and resumes a run as any other.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lightning_sched.cli import log_reading_args
from lightning_sched.config import ConfigError, is_int
from lightning_sched.queue.evaluation import (
    EVAL_LENGTH,
    TRAIN_FRACTION,
    compare_queue,
    evaluate_queue,
    heuristic_config,
    heuristic_policies,
    protocol_starts,
)
from lightning_sched.queue.heuristics import RULES
from lightning_sched.queue.linear_rule import RULE_FEATURES, LinearRule, linear_rule_entry
from lightning_sched.queue.log import read_queue_logs, reading_report
from lightning_sched.queue.policy import CHECKPOINT_KEY
from lightning_sched.queue.rule_search import (
    SEARCH_TRAIN_FRACTION,
    CrossEntropyMethod,
    SearchSettings,
    f1_start,
    relative_scores,
    training_starts,
)

from .base import IterationTask, require_at_least


class QueueRuleSearch(IterationTask):
    """The cross-entropy method over a LinearRule's weights, one generation a step.

    log: one SWF log or several of one cluster size, searched jointly (each weighs the same).
    backfill: "off" or "easy". reserve: the rule plays with its own reservation (queue.reservation).
    train_sequences: sequences of `sequence_length` jobs a log (RLScheduler's 1024), drawn once from
    its first 60% (common to all generations). start: the first mean's weights (default F1's).
    validation_sequences: `recent` sequences a log. nodes, processors_per_node, oversize, load: how
    the logs are read, as QueuePPO's (a short log needs a shorter sequence_length)."""

    def __init__(self, log: str | list[str], backfill: str = "off", reserve: bool = False, train_sequences: int = 32,
                 search: SearchSettings = SearchSettings(), seed: int = 0, start: list[float] | None = None,
                 validation_sequences: int = 20, sequence_length: int = EVAL_LENGTH, nodes: int | None = None,
                 processors_per_node: int | None = None, oversize: str = "refuse", load: float | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False  # no gradient: the search moves its own state
        if not is_int(train_sequences, 1):
            raise ConfigError(f"QueueRuleSearch.train_sequences must be an integer >= 1, got {train_sequences!r}")
        if not isinstance(reserve, bool):
            raise ConfigError(f"QueueRuleSearch.reserve must be true or false, got {reserve!r}")
        if isinstance(search, dict):
            search = SearchSettings(**search)
        self.paths = [log] if isinstance(log, str) else list(log)
        require_at_least("QueueRuleSearch", 2, sequence_length=sequence_length)
        self.logs = read_queue_logs(self.paths, nodes, processors_per_node, oversize, load, "QueueRuleSearch.")
        self.cfgs = [heuristic_config(one.config(sequence_length=sequence_length, backfill=backfill), reserve)
                     for one in self.logs]
        self.reserve, self.settings, self.seed = reserve, search, seed
        self.train_starts = training_starts(self.logs, train_sequences, seed, sequence_length)
        self.val_starts = [protocol_starts(one, "recent", validation_sequences, sequence_length) for one in self.logs]
        first = f1_start(search)
        if start is not None:
            if len(start) != len(first):
                raise ConfigError(f"QueueRuleSearch.start must be {len(first)} weights (search.context "
                                  f"{search.context}), got {len(start)}")
            first = torch.tensor(start, dtype=torch.double)
        self.weights = nn.Parameter(first, requires_grad=False)  # the search's mean rule
        self.iterations_per_epoch = 1000  # pacing only: trainer.max_steps is the number of generations
        self._best_rules: list[tuple[str, torch.Tensor]] | None = None

    def configure_optimizers(self):
        return CrossEntropyMethod([self.weights], self.settings, self.seed)

    def training_step(self, batch, batch_idx):
        best = self.optimizers().step(score=lambda weights: relative_scores(weights, self.logs, self.cfgs,
                                                                            self.train_starts, self.reserve))
        self.log("train/best_relative_bounded_slowdown", best, on_step=True, batch_size=1)
        for (name, _), weight in zip(RULE_FEATURES, self.weights.tolist()):
            self.log(f"train/weight_{name}", weight, on_step=True, batch_size=1)

    # ----- validation: the mean rule beside the five rules on `recent` ------------------------------
    def best_rules(self) -> list[tuple[str, torch.Tensor]]:
        """Per log, the best of the five rules on its validation sequences (name, per-sequence bsld)."""
        if self._best_rules is None:
            self._best_rules = []
            for log, cfg, starts in zip(self.logs, self.cfgs, self.val_starts):
                results = compare_queue(heuristic_policies(RULES, cfg), log, starts)
                name = min(RULES, key=lambda n: results[n].summary["mean_bounded_slowdown"])
                self._best_rules.append((name, results[name].sequences["mean_bounded_slowdown"]))
        return self._best_rules

    def validation_metrics(self) -> set[str]:
        return {"eval/relative_to_best_rule", "eval/mean_bounded_slowdown"}

    def validation_step(self, batch, batch_idx):
        rule, relative, bsld = LinearRule(self.weights.detach(), self.reserve), [], []
        for (name, best), log, cfg, starts in zip(self.best_rules(), self.logs, self.cfgs, self.val_starts):
            mine = evaluate_queue(rule, cfg, log, starts).sequences["mean_bounded_slowdown"]
            relative.append(float(mine.mean() / best.mean()))
            bsld.append(float(mine.mean()))
        self.log("eval/relative_to_best_rule", sum(relative) / len(relative), on_epoch=True, batch_size=1,
                 prog_bar=True)
        self.log("eval/mean_bounded_slowdown", sum(bsld) / len(bsld), on_epoch=True, batch_size=1)

    def evaluation_command(self, checkpoint: str) -> tuple[str, list[str]]:
        """(the script, its arguments) that measure `checkpoint` beside the rules on the held-out protocol."""
        hp = self.hparams
        reading = log_reading_args(hp.nodes, hp.processors_per_node, hp.oversize, hp.load)
        if hp.sequence_length != EVAL_LENGTH:
            reading.append(f"--sequence_length={hp.sequence_length}")
        return "evaluate", ["--env", "queue", "--protocol", "heldout", "--trace", *self.paths, *reading,
                            "--backfill", self.cfgs[0].backfill, "--policy", *RULES, checkpoint]

    def data_report(self) -> list[str]:
        """What fit.py prints at the start: what reading did to each log, and a light load (`reading_report`)."""
        return reading_report(self.logs)

    # ----- checkpoints: the rule, readable without this module ---------------------------------------
    def rule_entry(self) -> dict:
        provenance = {"logs": [Path(one.path).name for one in self.logs], "backfill": self.cfgs[0].backfill,
                      "train_fraction": SEARCH_TRAIN_FRACTION, "search": "cross-entropy method",
                      # its validation (which chooses the best checkpoint) reads `recent`, up to TRAIN_FRACTION
                      "read_fraction": TRAIN_FRACTION,
                      "train_sequences": self.hparams.train_sequences, "generations": int(self.global_step),
                      "population": self.settings.population, "elite": self.settings.elite,
                      "sigma": self.settings.sigma, "seed": self.seed, "start": self.hparams.start or "f1",
                      **({"sequence_length": self.hparams.sequence_length}
                         if self.hparams.sequence_length != EVAL_LENGTH else {}),
                      **({"load": self.hparams.load} if self.hparams.load is not None else {})}
        return linear_rule_entry(self.weights.tolist(), provenance, self.reserve)

    def on_save_checkpoint(self, checkpoint):
        checkpoint[CHECKPOINT_KEY] = self.rule_entry()
        super().on_save_checkpoint(checkpoint)  # plain hyperparameters: SearchSettings as a dict
