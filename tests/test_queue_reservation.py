"""Rules that play backfilling off with their own reservation (lightning_sched.queue.reservation):
a filler starts only when it cannot delay the ranking's first job, the fit delays they read are
the exact seconds, and a reserving linear rule round-trips through its checkpoint."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_queue_env import swf_line, write_log

from lightning_sched.config import ConfigError
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.evaluation import evaluate_queue, heuristic_config, resolve
from lightning_sched.queue.heuristics import QueueHeuristic, priority
from lightning_sched.queue.linear_rule import BASIC, F1_WEIGHTS, LinearRule, load_linear_rule, save_linear_rule
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import CHECKPOINT_KEY
from lightning_sched.queue.reservation import ReservingRule, fit_delay_seconds, reserving_config
from lightning_sched.queue.state import RUNNING


def starts_of(policy, path, length):
    log = read_queue_log(path)
    cfg = reserving_config(heuristic_config(log.config(sequence_length=length, backfill="off")))
    env = QueueEnv(cfg, log, batch_size=[1], starts=[0])
    td = env.reset()
    while not bool(td["done"].all()):
        td = env.step(policy(td))["next"]
    return env.state.start[0].tolist()


def test_a_short_job_fills_the_gap_before_the_first_jobs_reservation(tmp_path):
    # 4 nodes. Job 1 fills them until t=100 and job 2 (1 node, 1000 s) is held until then, while jobs 3-5
    # arrive. At t=100 FCFS puts job 3 (4 nodes) first: it fits when job 2 ends, at 1100. Job 4 (1 node, 50 s)
    # ends before that and fills the gap; job 5 (2000 s) would delay job 3 and waits.
    path = tmp_path / "gap.swf"
    path.write_text("\n".join(["; MaxNodes: 4", "; MaxProcs: 4", swf_line(1, 0, 100, 4), swf_line(2, 1, 1000, 1),
                               swf_line(3, 2, 500, 4), swf_line(4, 3, 50, 1), swf_line(5, 4, 2000, 1)]) + "\n")
    assert starts_of(ReservingRule("fcfs"), path, 5) == [0, 100, 1100, 100, 1600]
    assert starts_of(QueueHeuristic("fcfs"), path, 5) == [0, 100, 1100, 1600, 1600]  # held: nothing else starts


def exact_fit_delays(state, window_job):
    """Seconds until each slot's job fits if nothing else starts, by all pairs of running jobs."""
    running = state.status == RUNNING
    end = torch.where(running, state.start + state.requested, torch.iinfo(torch.int64).max)
    # nodes free once every running job ending by end_l has ended, [B, L]
    ended_by = end[:, None, :] <= end[:, :, None]  # [B, l, k]: job k has ended once job l has
    freed = state.free_nodes[:, None] + (ended_by * (state.nodes * running)[:, None, :]).sum(2)
    need = state.nodes.gather(1, window_job.clamp(min=0).long())
    enough = freed[:, None, :] >= need[:, :, None]  # [B, W, L]
    when = torch.where(enough & running[:, None, :], end[:, None, :], torch.iinfo(torch.int64).max).min(2).values
    delay = torch.where(need <= state.free_nodes[:, None], 0, when - state.time[:, None])
    return torch.where(window_job >= 0, delay, 0)


def test_every_pick_keeps_the_first_jobs_reservation(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = reserving_config(heuristic_config(log.config(sequence_length=256, backfill="off")))
    env = QueueEnv(cfg, log, batch_size=[4], starts=[0, 300, 900, 1500])
    policy, td, fillers = ReservingRule("f1"), env.reset(), 0
    while not bool(td["done"].all()):
        active = ~td["done"].squeeze(-1)
        delay = fit_delay_seconds(td)
        assert torch.equal(delay, exact_fit_delays(env.state, td["window_job"]))
        first = priority("f1", td).argmin(-1)
        pick = policy(td)["action"]
        requested = td["job_requested"].gather(1, td["window_job"].clamp(min=0).long())
        filler = active & (pick != first)
        fits_first = delay.gather(1, first[:, None]).squeeze(1) == 0
        assert not (filler & fits_first).any()  # the first job is picked whenever it fits
        ends = delay.gather(1, pick[:, None]) + requested.gather(1, pick[:, None])
        assert (ends.squeeze(1) < delay.gather(1, first[:, None]).squeeze(1))[filler].all()
        fillers += int(filler.sum())
        job, now = td["window_job"].gather(1, pick[:, None]).squeeze(1).long(), td["time"].squeeze(1)
        td = env.step(td)["next"]
        started = env.state.start.gather(1, job[:, None]).squeeze(1)
        # a filler is held at most until its fit delay: it starts before the first job's reservation
        assert (started[filler] <= (now + delay.gather(1, pick[:, None]).squeeze(1))[filler]).all()
    assert fillers > 0


def test_a_reserving_linear_rule_round_trips_and_f1_weights_make_f1_reserving(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = log.config(sequence_length=256, backfill="off")
    starts = torch.tensor([0, 300, 900, 1500])
    f1_policy, f1_cfg = resolve("f1+reserve", cfg)
    assert f1_cfg.fit_delay and f1_cfg.window == 256
    f1 = evaluate_queue(f1_policy, f1_cfg, log, starts).sequences["mean_bounded_slowdown"]
    plain = evaluate_queue(*resolve("f1", cfg), log, starts).sequences["mean_bounded_slowdown"]
    assert not torch.equal(f1, plain)
    path = save_linear_rule(tmp_path / "rule.ckpt", list(F1_WEIGHTS[:BASIC]), {"seed": 0}, reserve=True)
    policy, run_cfg = resolve(str(path), cfg)
    assert isinstance(policy, LinearRule) and policy.reserve and run_cfg == f1_cfg
    assert torch.equal(evaluate_queue(policy, run_cfg, log, starts).sequences["mean_bounded_slowdown"], f1)
    entry = torch.load(path, weights_only=True)
    for key, value, plays in (("reserve", None, False), ("reserve", "yes", None)):  # absent: an older file
        changed = {k: v for k, v in entry[CHECKPOINT_KEY].items() if k != key}
        if value is not None:
            changed[key] = value
        torch.save({CHECKPOINT_KEY: changed}, tmp_path / "changed.ckpt")
        if plays is None:
            with pytest.raises(ConfigError, match="reserve must be true or false, got 'yes'"):
                load_linear_rule(tmp_path / "changed.ckpt")
        else:
            assert load_linear_rule(tmp_path / "changed.ckpt")[0].reserve is plays


def test_bad_reserving_specs_and_observations_are_refused_in_one_line(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=600, nodes=32))
    cfg = log.config(sequence_length=256, backfill="off")
    with pytest.raises(ConfigError, match=r"'lifo\+reserve' is neither a queue rule"):
        resolve("lifo+reserve", cfg)
    env = QueueEnv(heuristic_config(cfg), log, batch_size=[1], starts=[0])  # no fit-delay feature
    with pytest.raises(ConfigError, match="QueueConfig.fit_delay true"):
        ReservingRule("f1")(env.reset())


def test_the_shipped_reserving_rule_loads_and_schedules_every_job(tmp_path):
    path = Path(__file__).resolve().parents[1] / "checkpoints" / "queue_bsld_rule.ckpt"
    rule, provenance = load_linear_rule(path)
    assert rule.reserve and provenance["backfill"] == "off" and provenance["train_fraction"] <= 0.8
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    policy, cfg = resolve(str(path), log.config(sequence_length=256, backfill="off"))
    result = evaluate_queue(policy, cfg, log, torch.tensor([0, 300, 900, 1500]))
    assert int(result.summary["jobs"]) == 4 * 256
    assert torch.isfinite(result.sequences["mean_bounded_slowdown"]).all()
