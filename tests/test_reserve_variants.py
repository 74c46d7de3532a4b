"""scripts/experiments/queue_reserve_variants.py's relaxed reservations (docs/hpc_queue_rounds.md,
fifteenth round): a vanishing slack plays `RULE+reserve` exactly, a fixed one keeps each row's target
while the same job stays first, and a relaxed filler never starts after the first job's shadow."""
from __future__ import annotations

import pytest
import torch
from conftest import script_module
from test_queue_env import write_log

from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.evaluation import heuristic_config
from lightning_sched.queue.heuristics import priority
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.reservation import fit_delay_seconds
from lightning_sched.queue.rollout import collect


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    log = read_queue_log(write_log(tmp_path_factory.mktemp("log") / "log.swf", jobs=600, nodes=32))
    cfg = heuristic_config(log.config(sequence_length=128, backfill="off"), reserve=True)
    return log, cfg, torch.tensor([0, 100, 200, 300, 400])


def play(policy, setting, watch=None):
    """Each sequence's mean bounded slowdown under `policy` ((td, env) -> td), `watch(td, env)` called
    after each decision."""
    log, cfg, starts = setting
    env = QueueEnv(cfg, log, batch_size=[len(starts)], starts=starts)

    def act(td):
        td = policy(td, env)
        if watch is not None:
            watch(td)
        return td

    with torch.no_grad():
        collect(env, act)
    return env.episode_metrics()["mean_bounded_slowdown"]


def test_a_vanishing_slack_plays_the_reservation_exactly(setting):
    variants = script_module("experiments/queue_reserve_variants")
    reserve = play(variants.reserving_policy("f1", False, False), setting)
    for fixed in (False, True):
        relaxed = play(variants.reserving_policy("f1", False, False, slack=1e-9, fixed=fixed), setting)
        assert torch.equal(relaxed, reserve)
    loose = play(variants.reserving_policy("f1", False, False, slack=1.0, fixed=True), setting)
    assert not torch.equal(loose, reserve)  # and a real slack plays differently on this log


def test_a_fixed_target_is_kept_while_its_job_stays_first_and_fillers_start_before_the_shadow(setting):
    variants = script_module("experiments/queue_reserve_variants")
    policy = variants.reserving_policy("f1", False, False, slack=1.0, fixed=True)
    seen, late = [], []

    def watch(td):
        kept = policy.remembered
        seen.append((kept["job"].clone(), kept["target"].clone()))
        # a pick that is not the first job must fit before the first job's shadow (no late start)
        score = priority("f1", td).double()
        first = score.argmin(-1, keepdim=True)
        delay = fit_delay_seconds(td)
        shadow = delay.gather(1, first).squeeze(1)
        pick_delay = delay.gather(1, td["action"].view(-1, 1)).squeeze(1)
        other = (td["action"] != first.squeeze(1)) & (shadow > 0) & ~td["done"].view(-1)
        late.append(bool((other & (pick_delay >= shadow)).any()))

    play(policy, setting, watch)
    held = 0
    for (job, target), (next_job, next_target) in zip(seen, seen[1:]):
        same = (job >= 0) & (job == next_job)
        assert torch.equal(target[same], next_target[same])
        held += int(same.sum())
    assert held > 0  # the log holds first jobs over several decisions
    assert not any(late)
