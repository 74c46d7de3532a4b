"""The linear queue rule (lightning_sched.queue.linear_rule): F1 is one of its points, its
checkpoint round-trips through evaluate's resolve, bad files are refused naming the field."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_queue_env import write_log

from lightning_sched.config import QUEUE_RULE_KIND, ConfigError
from lightning_sched.queue.evaluation import evaluate_queue, heuristic_config, resolve
from lightning_sched.queue.heuristics import QueueHeuristic
from lightning_sched.queue.linear_rule import (
    BASIC,
    F1_WEIGHTS,
    RULE_FEATURES,
    LinearRule,
    load_linear_rule,
    save_linear_rule,
)
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import CHECKPOINT_KEY

SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "queue_bsld_easy_rule.ckpt"


def sequences(tmp_path, backfill, length=256):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = heuristic_config(log.config(sequence_length=length, backfill=backfill))
    return log, cfg, torch.tensor([0, 300, 900, 1500])


@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_f1_weights_make_the_f1_rule(tmp_path, backfill):
    log, cfg, starts = sequences(tmp_path, backfill)
    f1 = evaluate_queue(QueueHeuristic("f1"), cfg, log, starts).sequences["mean_bounded_slowdown"]
    for k in (BASIC, len(RULE_FEATURES)):
        same = evaluate_queue(LinearRule(torch.tensor(F1_WEIGHTS[:k])), cfg, log, starts)
        assert torch.equal(same.sequences["mean_bounded_slowdown"], f1)
    # a rule that prefers the jobs that do not fit now (reserving them) schedules differently
    other = torch.tensor(F1_WEIGHTS[:BASIC]).index_put_((torch.tensor(5),), torch.tensor(1.0))
    moved = evaluate_queue(LinearRule(other), cfg, log, starts).sequences["mean_bounded_slowdown"]
    assert not torch.equal(moved, f1)


def test_a_population_runs_one_rule_a_row(tmp_path):
    log, cfg, starts = sequences(tmp_path, "easy")
    weights = torch.stack([torch.tensor(F1_WEIGHTS[:BASIC]), torch.tensor([1.0, 0.5, 0.6, -0.3, 0.7, 0.9, -0.6])])
    both = evaluate_queue(LinearRule(weights.repeat_interleave(len(starts), 0)), cfg, log, starts.repeat(2))
    for i in range(2):
        alone = evaluate_queue(LinearRule(weights[i]), cfg, log, starts)
        assert torch.equal(both.sequences["mean_bounded_slowdown"][i * len(starts):(i + 1) * len(starts)],
                           alone.sequences["mean_bounded_slowdown"])


def test_checkpoint_round_trip_and_resolve(tmp_path):
    log, cfg, starts = sequences(tmp_path, "easy")
    weights = [1.0, 0.5, 0.6, -0.3, 0.7, 0.9, -0.6]
    path = save_linear_rule(tmp_path / "rule.ckpt", weights, {"seed": 1, "backfill": "easy"})
    rule, provenance = load_linear_rule(path)
    assert provenance == {"seed": 1, "backfill": "easy"}
    policy, run_cfg = resolve(str(path), cfg)
    assert isinstance(policy, LinearRule) and run_cfg.window == cfg.sequence_length  # the whole queue
    assert torch.equal(evaluate_queue(policy, run_cfg, log, starts).sequences["mean_bounded_slowdown"],
                       evaluate_queue(LinearRule(torch.tensor(weights)), cfg, log, starts)
                       .sequences["mean_bounded_slowdown"])
    with pytest.raises(ConfigError, match="rule.ckpt"):  # never overwritten unless asked
        save_linear_rule(path, weights, {})


def test_bad_rule_files_are_refused_naming_the_field(tmp_path):
    def saved(entry):
        path = tmp_path / "bad.ckpt"
        torch.save({CHECKPOINT_KEY: entry}, path)
        return path

    good = {"kind": QUEUE_RULE_KIND, "features": [n for n, _ in RULE_FEATURES[:BASIC]], "weights": [1.0] * BASIC}
    with pytest.raises(ConfigError, match="weights must be 7 finite numbers"):
        load_linear_rule(saved({**good, "weights": [1.0] * 3}))
    with pytest.raises(ConfigError, match="weights must be 7 finite numbers"):
        load_linear_rule(saved({**good, "weights": [float("nan")] * BASIC}))
    with pytest.raises(ConfigError, match="features must be"):
        load_linear_rule(saved({**good, "features": ["area"] * BASIC}))
    with pytest.raises(ConfigError, match="not a linear queue rule"):
        load_linear_rule(saved({"kind": "queue"}))
    with pytest.raises(ConfigError, match="weights must be finite"):
        save_linear_rule(tmp_path / "nan.ckpt", [float("inf")] * BASIC, {})
    assert not (tmp_path / "nan.ckpt").exists()
    with pytest.raises(ConfigError, match="7 or 9 numbers"):
        LinearRule(torch.ones(4))


def test_shipped_rule_loads_and_schedules(tmp_path):
    rule, provenance = load_linear_rule(SHIPPED)
    assert provenance["backfill"] == "easy" and provenance["train_fraction"] <= 0.8
    log, cfg, starts = sequences(tmp_path, "easy")
    result = evaluate_queue(rule, cfg, log, starts)
    assert int(result.summary["jobs"]) == len(starts) * cfg.sequence_length
    assert torch.isfinite(result.sequences["mean_bounded_slowdown"]).all()
