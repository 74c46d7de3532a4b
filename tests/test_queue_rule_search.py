"""The cross-entropy search of a linear queue rule (lightning_sched.queue.rule_search) and its fit.py
task (tasks.queue_rule_search): the optimizer resumes exactly from its state, moves toward better
rules, and a real LightningCLI run writes rule checkpoints that evaluate.py reads."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import run_in_process
from test_queue_env import write_log

from lightning_sched.config import ConfigError
from lightning_sched.queue.evaluation import resolve
from lightning_sched.queue.linear_rule import BASIC, F1_WEIGHTS, LinearRule
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.rule_search import CrossEntropyMethod, SearchSettings, f1_start

ROOT = Path(__file__).resolve().parent.parent


def quadratic(target):
    return lambda weights: ((weights - target) ** 2).sum(1)


def test_the_search_moves_toward_a_better_rule_and_resumes_from_its_state():
    settings = SearchSettings(population=16, elite=4, sigma=0.5)
    target = torch.tensor([1.0, 0.2, -0.5, 0.3, 0.0, 0.8, -0.2], dtype=torch.double)
    weights = f1_start(settings)
    assert weights.tolist() == list(F1_WEIGHTS[:BASIC])
    cem = CrossEntropyMethod([weights], settings, seed=3)
    seen = []
    score = quadratic(target)
    for _ in range(3):
        before = weights.clone()
        cem.step(score=lambda w: seen.append(w.clone()) or score(w))
        assert torch.equal(seen[-1][0], before)  # row 0 is the current rule
    assert all(w[:, 0].eq(1.0).all() for w in seen)  # the area weight never moves
    assert float(score(weights[None])) < float(score(f1_start(settings)[None]))
    # a copy of the state resumes exactly: the same draws and the same next mean
    state = cem.state_dict()
    again = weights.clone()
    twin = CrossEntropyMethod([again], settings, seed=99)
    twin.load_state_dict(state)
    cem.step(score=score)
    twin.step(score=score)
    assert torch.equal(weights, again)


def test_search_settings_and_steps_refuse_bad_values_naming_the_field():
    with pytest.raises(ConfigError, match="search.elite must be below search.population"):
        SearchSettings(population=4, elite=4)
    with pytest.raises(ConfigError, match="search.sigma must be a number > 0, got 0"):
        SearchSettings(sigma=0)
    with pytest.raises(ConfigError, match="score=fn"):
        CrossEntropyMethod([f1_start(SearchSettings())], SearchSettings(), 0).step()


def test_fit_searches_a_rule_and_writes_checkpoints_evaluate_reads(tmp_path):
    logs = [write_log(tmp_path / f"log{i}.swf", jobs=5400, nodes=32, seed=i) for i in (1, 2)]
    env = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WANDB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = run_in_process(ROOT / "scripts" / "fit.py", [
        "fit", "--config", ROOT / "configs" / "base" / "queue_rule.yaml", "--threads", "1",
        "--trainer.logger", "false", "--model.init_args.log", f"[{logs[0]}, {logs[1]}]",
        "--model.init_args.train_sequences", "2", "--model.init_args.search.population", "4",
        "--model.init_args.search.elite", "2", "--model.init_args.validation_sequences", "2",
        "--trainer.max_steps", "2", "--trainer.val_check_interval", "1"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "queue_rule"
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "eval/relative_to_best_rule" in header and "train/weight_fits_now" in header
    last = run / "checkpoints" / "last.ckpt"
    data = torch.load(last, map_location="cpu", weights_only=True)  # the whole file: plain values and tensors
    assert data["global_step"] == 2  # one generation a step
    log = read_queue_log(logs[0])
    policy, cfg = resolve(str(last), log.config(sequence_length=1024, backfill="off"))
    assert isinstance(policy, LinearRule) and policy.reserve and cfg.fit_delay
    entry = data["lightning_sched"]
    assert entry["provenance"]["generations"] == 2 and entry["reserve"] is True
    # chosen on `recent` (60-80%): an evaluation there names the sequences as read
    from lightning_sched.queue.evaluation import protocol_starts, training_notes
    starts = protocol_starts(log, "recent", 10, 1024)
    assert training_notes(str(last), log, starts, "off").read == len(starts)
    assert entry["weights"] == data["state_dict"]["weights"].tolist()
    assert entry["weights"] != list(F1_WEIGHTS[:BASIC])  # two generations moved it
    assert list((run / "checkpoints").glob("best-*.ckpt"))


def test_a_search_reads_a_short_log_as_training_does_and_prints_an_evaluation_that_runs(tmp_path):
    import shlex

    log = write_log(tmp_path / "short.swf", jobs=1500, nodes=32, seed=4)
    env = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WANDB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = run_in_process(ROOT / "scripts" / "fit.py", [
        "fit", "--config", ROOT / "configs" / "base" / "queue_rule.yaml", "--threads", "1",
        "--trainer.logger", "false", "--model.init_args.log", str(log), "--model.init_args.sequence_length", "128",
        "--model.init_args.load", "1.2", "--model.init_args.nodes", "1024", "--model.init_args.train_sequences", "2",
        "--model.init_args.search.population", "4", "--model.init_args.search.elite", "2",
        "--model.init_args.validation_sequences", "2", "--trainer.max_steps", "1", "--trainer.val_check_interval", "1"],
        tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(line.startswith("short.swf: ") and "offered load 1.20" in line for line in proc.stdout.splitlines())
    evaluate = next(line for line in proc.stdout.splitlines() if line.startswith("evaluate it"))
    assert "--load=1.2" in evaluate and "--sequence_length=128" in evaluate and "--nodes=1024" in evaluate
    script, *arguments = shlex.split(evaluate.split(": ", 1)[1])[1:]
    done = run_in_process(tmp_path / script, [*arguments, "--sequences", "4", "--threads", "1", "--json"], tmp_path,
                          env)
    assert done.returncode == 0, done.stderr[-2000:]
    last = tmp_path / "runs" / "queue_rule" / "checkpoints" / "last.ckpt"
    provenance = torch.load(last, map_location="cpu", weights_only=True)["lightning_sched"]["provenance"]
    assert (provenance["sequence_length"], provenance["load"]) == (128, 1.2)


def test_a_search_on_a_lightly_loaded_log_says_so_and_names_the_key_that_compresses_it(tmp_path):
    from tasks.queue_rule_search import QueueRuleSearch

    log = write_log(tmp_path / "short.swf", jobs=1500, nodes=32, seed=4)
    settings = {"sequence_length": 128, "train_sequences": 2, "validation_sequences": 2}
    light = QueueRuleSearch(log=str(log), nodes=1024, **settings).data_report()  # the log's load / 32
    assert light[0].startswith("short.swf: ") and light[-1].startswith("note: short.swf's offered load is 0.")
    assert "--model.init_args.load 1.0 compresses its arrivals" in light[-1]
    assert not QueueRuleSearch(log=str(log), nodes=1024, load=1.2, **settings).data_report()[-1].startswith("note")
