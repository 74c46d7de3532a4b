"""An ensemble of queue policies (QueuePolicySpec.ensemble, scripts/ensemble.py): its logits are the
mean of its members', with a shared prior it plays the prior's rule where the members' residuals
cancel, it evaluates like any checkpoint, and members of different recipes are refused in one line."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import script_main
from test_queue_env import write_log

from lightning_sched.config import ConfigError
from lightning_sched.files import OutputExists
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.evaluation import evaluate_queue, resolve
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import (
    CHECKPOINT_KEY,
    QueueNetwork,
    QueuePolicyRecord,
    QueuePolicySpec,
    load_queue_policy,
)

SPEC = QueuePolicySpec(hidden=(8,), context=True, rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True)


def member(path, cfg, seed: int, spec: QueuePolicySpec = SPEC, residual: float = 1.0):
    """A network of `spec` with a seeded residual of size `residual` (0: the prior alone), saved at `path`."""
    torch.manual_seed(seed)
    net = QueueNetwork(spec)
    with torch.no_grad():
        net.scorer.mlp.rest[-1][-1].weight.normal_().mul_(residual)
    torch.save({CHECKPOINT_KEY: QueuePolicyRecord.of(net, cfg, log="log.swf", train_fraction=0.8).to_dict()}, path)
    return str(path)


@pytest.fixture
def setting(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = replace(log.config(sequence_length=256, backfill="off", window=64), **SPEC.observation())
    return log, cfg


def test_the_ensembles_logits_are_its_members_mean_and_it_schedules_every_job(tmp_path, setting):
    log, cfg = setting
    paths = [member(tmp_path / f"m{i}.ckpt", cfg, seed=i) for i in range(3)]
    out = tmp_path / "ensemble.ckpt"
    script_main("ensemble")(["--policy", *paths, "--out", str(out)])
    ensemble, saved = load_queue_policy(out)  # weights_only=True
    assert ensemble.spec.ensemble == 3 and saved == cfg
    td = QueueEnv(cfg, log, batch_size=[4], starts=[0, 300, 900, 1500]).reset()
    inputs = (td["job_features"], td["cluster_features"], td["action_mask"])
    with torch.no_grad():
        mean = torch.stack([load_queue_policy(p)[0](*inputs) for p in paths]).mean(0)
        torch.testing.assert_close(ensemble(*inputs), mean)
    policy, run_cfg = resolve(str(out), log.config(sequence_length=256, backfill="off"))
    result = evaluate_queue(policy, run_cfg, log, torch.tensor([0, 300, 900, 1500]))
    assert int(result.summary["jobs"]) == 4 * 256
    assert torch.isfinite(result.sequences["mean_bounded_slowdown"]).all()


def test_residuals_that_cancel_leave_the_prior_rule_played_with_its_reservation(tmp_path, setting):
    log, cfg = setting
    a = member(tmp_path / "a.ckpt", cfg, seed=0)
    record = torch.load(a, weights_only=True)
    last = ("scorer.mlp.rest.1.0.weight", "scorer.mlp.rest.1.0.bias")  # hidden (8,): the scorer's last layer
    assert set(last) <= set(record[CHECKPOINT_KEY]["state_dict"])
    record[CHECKPOINT_KEY]["state_dict"] = {k: -v if k in last else v
                                            for k, v in record[CHECKPOINT_KEY]["state_dict"].items()}
    torch.save(record, tmp_path / "minus_a.ckpt")
    out = tmp_path / "cancel.ckpt"
    script_main("ensemble")(["--policy", a, str(tmp_path / "minus_a.ckpt"), "--out", str(out)])
    starts = torch.tensor([0, 300, 900, 1500])
    plain = log.config(sequence_length=256, backfill="off")
    cancelled = evaluate_queue(*resolve(str(out), plain), log, starts).sequences["mean_bounded_slowdown"]
    member_a = evaluate_queue(*resolve(a, plain), log, starts).sequences["mean_bounded_slowdown"]
    # the same window (64) as the ensemble: a zero residual ranks by F1's rank among the visible jobs
    rule = evaluate_queue(*resolve(member(tmp_path / "zero.ckpt", cfg, 0, residual=0.0), plain), log,
                          starts).sequences["mean_bounded_slowdown"]
    assert torch.equal(cancelled, rule) and not torch.equal(member_a, rule)


def test_members_of_different_recipes_and_bad_outputs_are_refused_in_one_line(tmp_path, setting):
    log, cfg = setting
    a, b = member(tmp_path / "a.ckpt", cfg, 0), member(tmp_path / "b.ckpt", cfg, 1)
    other = member(tmp_path / "plain.ckpt", cfg, 2, spec=replace(SPEC, context=False))
    wide = member(tmp_path / "wide.ckpt", replace(cfg, window=128), 3)
    run = script_main("ensemble")
    for args, message in ((["--policy", a, other], "plain.ckpt: policy.context is False, .*a.ckpt has True"),
                          (["--policy", a, wide], "wide.ckpt: queue.window is 128, .*a.ckpt has 64"),
                          (["--policy", a], "an ensemble needs two policies at least, got 1"),
                          (["--policy", a, b, "--out", a], "one of the script's inputs")):
        with pytest.raises(ConfigError, match=message):
            run([*args, *(["--out", str(tmp_path / "e.ckpt")] if "--out" not in args else [])])
    out = tmp_path / "e.ckpt"
    run(["--policy", a, b, "--out", str(out)])
    with pytest.raises(OutputExists):
        run(["--policy", a, b, "--out", str(out)])
    with pytest.raises(ConfigError, match="already an ensemble"):
        run(["--policy", str(out), a, "--out", str(tmp_path / "f.ckpt")])
    with pytest.raises(ConfigError, match="ensemble must be an integer >= 1, got 0"):
        replace(SPEC, ensemble=0)
