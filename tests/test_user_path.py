"""The library as a TorchRL or Gymnasium user meets it: every shipped checkpoint drives `ClusterEnv`
through TorchRL's own `rollout` with the config `load_policy` returns, an unbatched env passes
`check_env_specs` and runs docs/library.md's single-episode loop, and a rollout that resets finished
rows keeps each finished episode's metrics apart from the new ones."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torchrl.envs.utils import check_env_specs

from lightning_sched import ClusterConfig, ClusterEnv, ConfigError, DeepRMWorkload
from lightning_sched.deeprm.env import EPISODE_KEYS
from lightning_sched.evaluation import evaluate, make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.policies.checkpoints import load_policy, read_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "checkpoints").glob("*.ckpt"))


def is_queue_policy(path: Path) -> bool:  # a queue network ("queue") or a linear queue rule
    return read_checkpoint(path)["lightning_sched"].get("kind") in ("queue", "queue_linear_rule")


CLUSTER = [p for p in SHIPPED if not is_queue_policy(p)]
QUEUE = [p for p in SHIPPED if is_queue_policy(p)]


@pytest.mark.parametrize("path", CLUSTER, ids=[p.stem for p in CLUSTER])
def test_every_shipped_cluster_checkpoint_drives_torchrl_rollout_with_its_config(path):
    policy, cfg = load_policy(path)
    assert cfg.observation != "none"  # the mode that publishes no "used"/"slot_waited"
    env = ClusterEnv(cfg, DeepRMWorkload(load=0.9, simu_len=10), batch_size=[2], seed=0)
    td = env.rollout(12, policy, break_when_any_done=False)  # TorchRL's rollout, no trust_policy
    assert td.batch_size == torch.Size([2, 12])
    assert torch.isfinite(td["next", "reward"]).all()
    assert td["action"].min() >= 0 and td["action"].max() <= cfg.num_slots
    bare = ClusterEnv(cfg.replace(observation="none"), DeepRMWorkload(load=0.9, simu_len=10), batch_size=[2])
    refusal = r"^a cluster network reads the observation's (used|slot_waited): build the env with ClusterConfig"
    with pytest.raises(ConfigError, match=refusal + r"\(observation='image'\) or 'compact' \(not 'none'\)$"):
        bare.rollout(2, policy, break_when_any_done=False)


@pytest.mark.parametrize("path", QUEUE, ids=[p.stem for p in QUEUE])
def test_a_shipped_queue_checkpoint_is_refused_by_load_policy_naming_its_reader(path):
    with pytest.raises(ConfigError, match="queue policy: scripts/evaluate.py --env queue"):
        load_policy(path)


def test_an_unbatched_env_passes_check_env_specs_and_matches_a_batch_of_one():
    cfg = ClusterConfig(observation="compact")
    jobs = make_jobsets(DeepRMWorkload(load=0.9), 1, seed=5)
    single = ClusterEnv(cfg, jobs, batch_size=[])
    check_env_specs(single)
    assert single.action_spec.shape == torch.Size([]) and single.reset()["slot_duration"].shape == (cfg.num_slots,)
    # TorchRL's rollout on the unbatched env stops at the end of the episode, whose metrics it holds
    tetris = make_heuristic("tetris", cfg)
    rollout = single.rollout(cfg.max_time, tetris)
    last = rollout[-1]["next"]
    assert bool(last["done"]) and not rollout["next", "done"][:-1].any()
    expected = evaluate(make_heuristic("tetris", cfg), cfg, jobs).summary
    assert last["episode", "mean_slowdown"].item() == pytest.approx(expected["mean_slowdown"])
    assert torch.isnan(rollout["next", "episode", "mean_slowdown"][:-1]).all()
    # a finished episode stepped again (no reset) reports nothing new: each episode's metrics appear once
    again = single.step(tetris(last.clone()))
    assert bool(again["next", "done"]) and torch.isnan(again["next", "episode", "mean_slowdown"]).all()
    with pytest.raises(ConfigError, match=r"batch_size must be \[B\] or \[\], got \[2, 3\]"):
        ClusterEnv(cfg, DeepRMWorkload(), batch_size=[2, 3])


def test_a_rollout_keeps_finished_episodes_metrics_apart_from_the_reset_ones():
    cfg = ClusterConfig(observation="compact", max_time=60)
    env = ClusterEnv(cfg, DeepRMWorkload(load=0.7, simu_len=8), batch_size=[3], seed=1)
    td = env.rollout(150, make_heuristic("sjf", cfg), break_when_any_done=False)
    done = td["next", "done"].squeeze(-1)
    assert done.sum() >= 3  # several episodes ended and were reset
    for key in EPISODE_KEYS:
        value = td["next", "episode", key].squeeze(-1)
        assert torch.isnan(value[~done]).all(), key  # only finished episodes' values
    # every finished episode is there (a jobset without jobs has a NaN mean slowdown, not a missing one)
    assert (td["next", "episode", "final_time"].squeeze(-1)[done] > 0).all()
    assert (td["next", "episode", "mean_slowdown"].squeeze(-1)[done].nan_to_num(1.0) >= 1).all()
    # episode_metrics() is the current (reset, unfinished) episodes': not what the rollout finished
    assert not bool(env.episode_metrics()["final_time"].eq(td["next", "episode", "final_time"][:, -1, 0]).all())


@pytest.mark.parametrize("case", ["deeprm/compact", "deeprm/image", "queue/off", "queue/easy"])
def test_partial_resets_merge_as_torchrls_where_does(tmp_path, case):
    from test_queue_env import write_log
    from torchrl.envs import EnvBase

    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.log import read_queue_log

    kind, setting = case.split("/")
    if kind == "deeprm":
        cfg = ClusterConfig(observation=setting, max_time=40)
        env_class, args = ClusterEnv, (cfg, DeepRMWorkload(load=0.9, simu_len=6))
    else:
        log = read_queue_log(write_log(tmp_path / "log.swf"))
        env_class, args = QueueEnv, (log.config(sequence_length=32, window=8, backfill=setting), log)

    class Upstream(env_class):  # TorchRL's own merge: a where over every key by the "_reset" mask
        _reset_proc_data = EnvBase._reset_proc_data

    ours, theirs = env_class(*args, batch_size=[6], seed=2), Upstream(*args, batch_size=[6], seed=2)
    g = torch.Generator().manual_seed(0)
    td_a, td_b = ours.reset(), theirs.reset()
    resets = ended = 0
    for i in range(240):
        mask = td_a["action_mask"]  # a valid action of each row (DeepRM's void included)
        action = torch.multinomial(mask.float() + 1e-9, 1, generator=g).squeeze(1)
        td_a["action"], td_b["action"] = action, action.clone()
        if i % 2 == 0:  # TorchRL's path: done rows start again
            stepped, td_a = ours.step_and_maybe_reset(td_a)
            _, td_b = theirs.step_and_maybe_reset(td_b)
            ended += int(stepped["next", "done"].sum())
        else:  # a reset of some rows, done or not, asked directly
            td_a, td_b = ours.step(td_a)["next"], theirs.step(td_b)["next"]
            rows = torch.rand(6, 1, generator=g) < 0.05
            td_a["_reset"], td_b["_reset"] = rows, rows.clone()
            td_a, td_b = ours.reset(td_a), theirs.reset(td_b)
            resets += int(rows.sum())
        assert set(td_a.keys(True, True)) == set(td_b.keys(True, True))
        for key in td_b.keys(True, True):  # NaN (DeepRM's episode metrics between ends) equal to NaN
            assert torch.equal(td_a[key].nan_to_num(-1), td_b[key].nan_to_num(-1)), (i, key)
    assert resets > 20 and ended > 5  # rows asked to reset, and done rows TorchRL reset


def library_loop() -> str:
    """The python block under docs/library.md's "One episode" heading."""
    text = (ROOT / "docs" / "library.md").read_text()
    section = text[text.index("## One episode"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_single_episode_loop_of_docs_library_runs(capsys):
    exec(compile(library_loop(), "docs/library.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert len(printed) == 2 and int(printed[0]) > 0 and math.isfinite(float(printed[1]))


def test_each_row_reports_its_own_metrics_on_the_step_its_episode_ends():
    cfg = ClusterConfig(observation="none")
    jobs = make_jobsets(DeepRMWorkload(load=0.9, simu_len=20), 6, seed=11)  # rows end at different steps
    env = ClusterEnv(cfg, jobs, batch_size=[6])
    tetris = make_heuristic("tetris", cfg)
    td, reported = env.reset(), {}
    while not bool(td["done"].all()):
        td = env.step(tetris(td))["next"]
        for row in td["episode", "final_time"].squeeze(-1).isfinite().nonzero().squeeze(1).tolist():
            assert row not in reported, f"row {row} reported twice"
            reported[row] = {k: td["episode", k][row].item() for k in ("mean_slowdown", "utilization", "final_time")}
    assert sorted(reported) == list(range(6)) and len({r["final_time"] for r in reported.values()}) > 1
    expected = env.episode_metrics()  # every row done and frozen: the metrics of each finished episode
    for row, got in reported.items():
        for key, value in got.items():
            assert value == pytest.approx(expected[key][row].item()), (row, key)


def test_a_cluster_network_as_a_torchrl_actor_collects_and_trains():
    """make_actor: a network's draws and log-probabilities through TorchRL's collector, on a
    collector's [B, T] batch (as ClipPPOLoss gets it) and unbatched, with gradients to every weight;
    a masked network draws valid actions only."""
    from torchrl.collectors import Collector

    from lightning_sched.policies.acting import make_actor
    from lightning_sched.policies.networks import PolicySpec, make_policy

    torch.manual_seed(0)
    cfg = ClusterConfig(observation="compact")
    for spec in (PolicySpec(kind="slots", masked=True), PolicySpec(kind="image", masked=True)):
        net = make_policy(spec, cfg)
        actor = make_actor(net)
        env = ClusterEnv(cfg, DeepRMWorkload(load=0.7), batch_size=[4], seed=3)
        collector = Collector(env, actor, frames_per_batch=80, total_frames=160)
        batches = list(collector)
        collector.shutdown()
        for batch in batches:
            assert batch.shape == (4, 20) and bool(batch["action_mask"].gather(-1, batch["action"][..., None]).all())
        again = actor(batches[-1].exclude("action", "action_log_prob", "logits"))  # [B, T]
        again["action_log_prob"].sum().backward()
        assert all(p.grad is not None and bool(p.grad.isfinite().all()) for p in net.parameters())
        single = ClusterEnv(cfg, DeepRMWorkload(load=0.7), batch_size=[], seed=3)
        assert single.rollout(5, actor)["action_log_prob"].shape == (5,)
    bare = ClusterEnv(ClusterConfig(observation="none"), DeepRMWorkload(load=0.7), batch_size=[2])
    with pytest.raises(ConfigError, match="reads the observation's used, slot_waited: build the env with"):
        bare.rollout(2, actor)
