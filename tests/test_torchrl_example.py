"""scripts/examples/torchrl_queue_ppo.py, tiny: PPO with TorchRL's own Collector, GAE and ClipPPOLoss
on a log the test writes, a queue record that evaluate.py reads, weights moved from their start."""
from __future__ import annotations

import json

import pytest
import torch
from conftest import script_main
from test_queue_env import write_log

from lightning_sched.config import ConfigError
from lightning_sched.queue.policy import QueueNetwork, read_queue_record


def test_the_torchrl_example_trains_saves_and_evaluate_reads_it(tmp_path, capsys):
    log = write_log(tmp_path / "log.swf", jobs=1000, nodes=32)
    out = tmp_path / "mine.ckpt"
    train = script_main("examples/torchrl_queue_ppo")
    # B = 4 rows of 64-job episodes (64 decisions each, backfilling off): every batch of 4 x 64 ends 4
    train(["--trace", str(log), "--iterations", "2", "--batch", "4", "--frames", "256", "--sequence_length", "64",
           "--minibatch", "128", "--epochs", "2", "--lr", "1e-3", "--out", str(out), "--seed", "0", "--threads", "1"])
    printed = capsys.readouterr().out
    assert "training sequences start in jobs [0, 736]" in printed  # 80% of 1,000 jobs, less one sequence
    for iteration in (1, 2):
        assert f"iteration   {iteration}: mean bounded slowdown" in printed and "over   4 episodes" in printed
    assert f"--policy fcfs sjf f1 {out} --threads 1" in printed

    record = read_queue_record(out)
    assert record.log == (str(log),) and record.train_fraction == 0.8 and record.queue.backfill == "off"
    torch.manual_seed(0)  # the script's: its first draws are the network's weights
    start = QueueNetwork().state_dict()
    moved = [float((record.state_dict[k] - v).abs().max()) for k, v in start.items()]
    assert max(moved) > 0 and max(moved) < 0.1, moved  # trained from that start, not another

    evaluate = script_main("evaluate")
    evaluate(["--env", "queue", "--protocol", "heldout", "--trace", str(log), "--sequences", "2",
              "--sequence_length", "64", "--policy", "fcfs", str(out), "--threads", "1", "--json"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [x["policy"] for x in lines] == ["fcfs", str(out)]
    assert all(x["mean_bounded_slowdown"] >= 1 for x in lines)

    with pytest.raises(ConfigError, match="--out .* exists; name another file or pass --overwrite"):
        train(["--trace", str(log), "--out", str(out)])  # refused before any training
    with pytest.raises(ConfigError, match="--frames 250 must be a multiple of --batch 4"):
        train(["--trace", str(log), "--batch", "4", "--frames", "250", "--out", str(tmp_path / "other.ckpt")])
    with pytest.raises(ConfigError, match=r"--out .*log.swf/mine.ckpt: .*log.swf is a file, not a folder"):
        train(["--trace", str(log), "--out", str(log / "mine.ckpt")])  # refused before training, not after
