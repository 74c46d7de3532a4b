"""The rollout lookahead (lightning_sched.queue.lookahead) and the expert-iteration warm start that
imitates it (tasks.queue_ppo, imitate "lookahead"), on small logs the tests write: one candidate is
its rule; with the exact future and a horizon to the episode's end it is never worse than its base
rules (the rollout algorithm's cost improvement); the warm start fits its growing set of picks."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from test_queue_env import swf_line

from lightning_sched.config import ConfigError
from lightning_sched.queue.config import RULES
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.heuristics import QueueHeuristic
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.lookahead import LookaheadPolicy, LookaheadSettings, with_future


def exact_log(path: Path, jobs: int = 200, nodes: int = 8, seed: int = 0) -> Path:
    """A loaded SWF log whose requested times are the run times (field 9 = -1), as the Lublin logs."""
    rng = random.Random(seed)
    lines = ["; Version: 2.2", f"; MaxNodes: {nodes}", f"; MaxProcs: {nodes}", ";"]
    submit = 0
    for j in range(1, jobs + 1):
        submit += int(rng.expovariate(1 / 40))
        procs, run = rng.choice([1, 1, 2, 3, 4, 8]), max(1, int(rng.lognormvariate(5, 1.0)))
        lines.append(swf_line(j, submit, run, procs))
    path.write_text("\n".join(lines) + "\n")
    return path


def play(env: QueueEnv, policy) -> torch.Tensor:
    """Each row's mean bounded slowdown (DoubleTensor[B]) under `policy`."""
    td = env.reset()
    while not bool(td["done"].all()):
        td = env.step(policy(td))["next"]
    return env.episode_metrics()["mean_bounded_slowdown"]


STARTS = torch.tensor([0, 30, 70, 120, 150])


@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_one_candidate_is_its_rule_and_the_exact_whole_episode_lookahead_is_never_worse_than_its_rules(
        tmp_path, backfill):
    log = read_queue_log(exact_log(tmp_path / "exact.swf"))
    cfg = log.config(sequence_length=40, window=40, backfill=backfill)  # the window shows the whole queue
    env = QueueEnv(cfg, log, batch_size=[len(STARTS)], starts=STARTS)
    rules = {rule: play(env, QueueHeuristic(rule)) for rule in RULES}
    assert len({tuple(v.tolist()) for v in rules.values()}) > 1  # the rules differ on these sequences
    one = LookaheadSettings(base="f1", candidates=1, horizon=5, future="known", sim_window=40)
    assert torch.equal(play(env, LookaheadPolicy(env, one)), rules["f1"])
    # every remaining decision in the copies, the log's own arrivals, runs as requested (= actual):
    # a candidate's cost is its rule's true total, and rollout never loses to its base
    exact = dict(horizon=40, future="clairvoyant", sim_window=40)
    f1 = play(env, LookaheadPolicy(env, LookaheadSettings(base="f1", candidates=3, **exact)))
    assert (f1 <= rules["f1"] + 1e-9).all()
    every = play(env, LookaheadPolicy(env, LookaheadSettings(base="rules", **exact)))
    best = torch.stack(list(rules.values())).min(0).values
    assert (every <= best + 1e-9).all() and bool((every < best - 1e-6).any())


def test_bad_lookahead_settings_name_the_field():
    with pytest.raises(ConfigError,
                       match="lookahead.future must be one of known, repeat, daily, clairvoyant, got 'oracle'"):
        LookaheadSettings(future="oracle")
    with pytest.raises(ConfigError, match="lookahead.base must be 'rules' or one of"):
        LookaheadSettings(base="edf")
    with pytest.raises(ConfigError, match="lookahead.horizon must be an integer >= 1, got 0"):
        LookaheadSettings(horizon=0)
    with pytest.raises(ConfigError, match="lookahead.samples must be an integer >= 1, got 0"):
        LookaheadSettings(samples=0)
    with pytest.raises(ConfigError, match="lookahead.samples > 1 needs future 'repeat', got future 'known'"):
        LookaheadSettings(samples=2, future="known")


@pytest.mark.parametrize("back", [0, 7, 25])
def test_a_repeat_forecast_replays_a_block_of_the_history_from_now_with_its_gaps(tmp_path, back):
    log = read_queue_log(exact_log(tmp_path / "exact.swf"))
    env = QueueEnv(log.config(sequence_length=120, window=120), log, batch_size=[1], starts=torch.tensor([10]))
    td = env.reset()
    while int(env.state.next_arrival) < 50:
        td = env.step(QueueHeuristic("fcfs")(td))["next"]
    state, m = env.state, 10
    first, now = int(state.next_arrival), int(state.time)
    sim, _ = with_future(state, "repeat", m, torch.tensor([back]))
    end = first - back  # the block replayed: arrivals end - m .. end - 1
    future, block = torch.arange(first, first + 2 * m), torch.arange(end - m, end).repeat(2)
    for name in ("requested", "processors"):
        assert torch.equal(getattr(sim, name)[0, future], getattr(state, name)[0, block])
    submit, original = sim.submit[0], state.submit[0]
    assert int(submit[first]) == now and torch.equal(submit[:first], original[:first])  # the past is kept
    assert torch.equal(submit[first + 1:first + m] - submit[first:first + m - 1],
                       original[end - m + 1:end] - original[end - m:end - 1])  # gaps kept
    span = (original[end] if back else now) - original[end - m]  # the block repeats every span
    assert int(submit[first + m] - submit[first]) == int(span)
    assert torch.equal(sim.run[0, future], sim.requested[0, future])  # copies run for the requested time


def test_a_daily_forecast_replays_the_last_day_of_arrivals_a_day_later(tmp_path):
    path = tmp_path / "hourly.swf"  # one arrival an hour, each job its own run time and size
    path.write_text("\n".join(["; MaxNodes: 8", "; MaxProcs: 8"]
                              + [swf_line(k + 1, 1 + 3600 * k, 100 + k, 1 + k % 3) for k in range(60)]) + "\n")
    log = read_queue_log(path)
    env = QueueEnv(log.config(sequence_length=60, window=60), log, batch_size=[1], starts=torch.tensor([0]))
    td = env.reset()
    while int(env.state.next_arrival) < 40:
        td = env.step(QueueHeuristic("fcfs")(td))["next"]
    state = env.state
    first, now = int(state.next_arrival), int(state.time)
    sim, counted = with_future(state, "daily", repeat=1)
    day = [k for k in range(first) if int(state.submit[0, k]) >= now - 86400]  # the last 24 hours' arrivals
    future = torch.arange(first, min(first + 2 * len(day), 60))
    source = torch.tensor(day * 2)[:len(future)]
    for name in ("requested", "processors"):
        assert torch.equal(getattr(sim, name)[0, future], getattr(state, name)[0, source])
    laps = torch.arange(len(future)) // len(day) + 1
    assert torch.equal(sim.submit[0, future], (state.submit[0, source] + 86400 * laps).clamp(min=now))
    assert torch.equal(sim.submit[0, :first], state.submit[0, :first]) and bool(counted.all())


def test_sampled_forecasts_equal_the_last_block_when_the_history_holds_only_it(tmp_path):
    log = read_queue_log(exact_log(tmp_path / "exact.swf"))
    cfg = log.config(sequence_length=40, window=40)
    env = QueueEnv(cfg, log, batch_size=[len(STARTS)], starts=STARTS)
    last = dict(base="rules", horizon=6, future="repeat", repeat=40, sim_window=40)  # m = all arrived so far
    one = play(env, LookaheadPolicy(env, LookaheadSettings(**last)))
    assert torch.equal(play(env, LookaheadPolicy(env, LookaheadSettings(samples=3, **last))), one)
    short = dict(last, repeat=4)  # earlier blocks exist: other futures, other picks on some sequence
    assert not torch.equal(play(env, LookaheadPolicy(env, LookaheadSettings(samples=3, **short))),
                           play(env, LookaheadPolicy(env, LookaheadSettings(**short))))


@pytest.mark.parametrize("dagger", [False, True])
def test_expert_iteration_fits_every_pick_of_the_lookahead_so_far(tmp_path, dagger):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    torch.manual_seed(0)
    log = str(exact_log(tmp_path / "exact.swf"))
    model = QueuePPO(log, window=16, sequence_length=32, batch_size=4, imitate="lookahead", imitation_iterations=2,
                     imitation_aggregate=True, dagger=dagger, lookahead=LookaheadSettings(horizon=8, sim_window=16),
                     ppo=PPOSettings(epochs=1, minibatch_size=10_000),
                     validation=QueueValidation(sequences=2, sequence_length=32), iterations_per_epoch=3)
    fitted, original = [], model.imitation
    labels, rollout = [], model.rollout

    def spy(data):
        fitted.append(data.shape[0])
        return original(data)

    def spy_rollout(policy=None, labeler=None):
        data, metrics = rollout(policy, labeler)
        labels.append(None if labeler is None else bool((data["label"] != data["action"]).any()))
        return data, metrics

    model.imitation, model.rollout = spy, spy_rollout
    trainer = Trainer(max_steps=3, val_check_interval=3, check_val_every_n_epoch=None, logger=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model)
    assert len(fitted) == 2 and fitted[1] > fitted[0] > 0  # one minibatch an iteration: the second holds both's
    assert model.imitation_data is None and trainer.global_step == 3  # then PPO, without the set
    # DAgger: the teacher acts first; then the network acts, and the teacher's picks in its states differ
    assert labels == ([None, True, None] if dagger else [None, None, None])
    with pytest.raises(ConfigError, match="QueuePPO.imitate must be 'lookahead' or one of fcfs, .*, got 'edf'"):
        QueuePPO(log, imitate="edf", imitation_iterations=1)
