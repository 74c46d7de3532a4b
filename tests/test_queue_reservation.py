"""Rules that play backfilling off with their own reservation (lightning_sched.queue.reservation):
a filler starts only when it cannot delay the ranking's first job, the fit delays they read are
the exact seconds, and a reserving linear rule round-trips through its checkpoint."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import script_main
from test_queue_env import ROOT, swf_line, write_log

from lightning_sched.config import ConfigError
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.evaluation import evaluate_queue, heuristic_config, resolve
from lightning_sched.queue.heuristics import QueueHeuristic, priority
from lightning_sched.queue.linear_rule import BASIC, F1_WEIGHTS, LinearRule, load_linear_rule, save_linear_rule
from lightning_sched.queue.linear_rule import rule_features as linear_features
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import CHECKPOINT_KEY, QueueNetwork, QueuePolicy, QueuePolicySpec, read_queue_record
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


@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_the_rules_pick_the_same_slot_scoring_only_the_windows_leading_slots(tmp_path, backfill):
    """The rules score the window up to its last slot holding a job in any row (leading_slots): the
    picks equal the argmin over the whole window, reservation and linear rules included."""
    from lightning_sched.queue.reservation import reserve_pick

    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    cfg = reserving_config(heuristic_config(log.config(sequence_length=96, backfill=backfill)))
    env = QueueEnv(cfg, log, batch_size=[6], seed=3)
    td, generator, cut = env.reset(), torch.Generator().manual_seed(0), 0
    weights = torch.tensor(F1_WEIGHTS[:BASIC], dtype=torch.double) + torch.linspace(-1, 1, BASIC)
    while not bool(td["done"].all()):
        filled = td["window_job"] >= 0
        cut += int(not filled[:, -1].any())  # steps whose window the rules cut
        for name in ("fcfs", "sjf", "f1", "wfp3", "unicep"):
            assert torch.equal(QueueHeuristic(name)(td.clone())["action"], priority(name, td).argmin(-1)), name
            whole = reserve_pick(priority(name, td).double(), td)
            assert torch.equal(ReservingRule(name)(td.clone())["action"], whole), name
        full = LinearRule(weights)
        score = (linear_features(td)[0][..., :BASIC] * full.scaled_weights).sum(-1).masked_fill(~filled, torch.inf)
        assert torch.equal(full(td.clone())["action"], score.argmin(-1))
        assert torch.equal(LinearRule(weights, reserve=True)(td.clone())["action"], reserve_pick(score, td))
        td = env.step(td.set("action", torch.multinomial(td["action_mask"].double(), 1, generator=generator)
                             .squeeze(-1)))["next"]
    assert cut > 20


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


def test_an_untrained_network_with_the_f1_prior_and_a_reservation_plays_f1_reserving(tmp_path):
    # the residual starts at zero, so the greedy network ranks the window by F1's rank feature: with
    # the whole queue visible, exactly the rule F1 played with its own reservation
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = log.config(sequence_length=256, backfill="off")
    starts = torch.tensor([0, 300, 900, 1500])
    rule = evaluate_queue(*resolve("f1+reserve", cfg), log, starts).sequences["mean_bounded_slowdown"]
    for spec in (QueuePolicySpec(rule_ranks=("sjf", "f1"), prior="f1", fit_delay=True, reserve=True),
                 QueuePolicySpec(rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True, context=True,
                                 clock=True),  # the window's make-up and the clock feed only the residual
                 QueuePolicySpec(rule_ranks=("sjf", "f1", "wfp3"), prior="f1", prior_mix=True, fit_delay=True,
                                 reserve=True)):  # the rules' weights start at 1 on F1, 0 on the others
        net = QueueNetwork(spec).eval()
        net_cfg = replace(heuristic_config(cfg), **spec.observation())
        network = evaluate_queue(QueuePolicy(net), net_cfg, log, starts).sequences["mean_bounded_slowdown"]
        assert torch.equal(network, rule)
    with torch.no_grad():  # a scorer that departs from the prior plays differently
        net.scorer.mlp.job_in.weight.normal_(generator=torch.Generator().manual_seed(0))
        net.scorer.mlp.rest[-1][-1].weight.fill_(5.0)
    moved = evaluate_queue(QueuePolicy(net), net_cfg, log, starts).sequences["mean_bounded_slowdown"]
    assert not torch.equal(moved, rule)


def test_bad_prior_and_reserve_specs_are_refused_in_one_line():
    for values, message in (({"prior": "f1"}, "prior must be one of rule_ranks \\(none\\), got 'f1'"),
                            ({"rule_ranks": ["f1"], "prior": "f1", "prior_scale": 0},
                             "prior_scale must be a number > 0"),
                            ({"reserve": True}, "reserve needs fit_delay: true"),
                            ({"rule_ranks": ["f1"], "prior_mix": True}, "prior_mix needs a prior"),
                            ({"reserve": "yes", "fit_delay": True}, "reserve must be true or false, got 'yes'")):
        with pytest.raises(ConfigError, match=message):
            QueuePolicySpec.from_dict(values)


def test_ppo_learns_a_reserving_rankings_first_job_and_its_checkpoint_plays_the_reservation(tmp_path):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    path = str(write_log(tmp_path / "log.swf", jobs=600, nodes=32))
    spec = QueuePolicySpec(hidden=(8,), rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True)
    with pytest.raises(ConfigError, match="a reserving policy .* learns its ranking's first job"):
        QueuePPO(path, policy=spec, imitate="f1", imitation_iterations=1, validation=QueueValidation(2, 64))
    torch.manual_seed(0)
    model = QueuePPO(path, window=64, sequence_length=64, batch_size=8, policy=spec,
                     ppo=PPOSettings(epochs=1, minibatch_size=128), validation=QueueValidation(2, 64),
                     iterations_per_epoch=2)
    assert model.loss.tensor_keys.action == "first"  # the probabilities are of the ranking's first job
    trainer = Trainer(max_steps=2, val_check_interval=2, check_val_every_n_epoch=None, logger=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model)
    data, _ = model.rollout()
    assert (data["action"] != data["first"]).any()  # some picks were fillers before a reserved job
    inputs = data.select("job_features", "cluster_features", "action_mask")
    torch.testing.assert_close(model.actor.get_dist(inputs).log_prob(data["first"]), data["action_log_prob"])
    checkpoint = tmp_path / "reserving.ckpt"
    trainer.save_checkpoint(checkpoint)
    policy, cfg = resolve(str(checkpoint), read_queue_log(path).config(sequence_length=128, backfill="off"))
    assert policy.net.spec.reserve and cfg.fit_delay and cfg.rule_ranks == ("f1",)
    result = evaluate_queue(policy, cfg, read_queue_log(path), torch.tensor([0, 200]))
    assert int(result.summary["jobs"]) == 2 * 128 and torch.isfinite(result.sequences["mean_bounded_slowdown"]).all()


def test_the_shipped_reserving_network_plays_its_reservation_and_schedules_every_job(tmp_path):
    path = Path(__file__).resolve().parents[1] / "checkpoints" / "queue_bsld_reserve.ckpt"
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    policy, cfg = resolve(str(path), log.config(sequence_length=256, backfill="off"))
    spec = policy.net.spec
    assert spec.reserve and spec.prior == "f1" and cfg.fit_delay and cfg.rule_ranks == ("f1",)
    result = evaluate_queue(policy, cfg, log, torch.tensor([0, 300, 900, 1500]))
    assert int(result.summary["jobs"]) == 4 * 256
    assert torch.isfinite(result.sequences["mean_bounded_slowdown"]).all()


def test_the_prior_kl_is_zero_at_the_start_grows_with_the_residual_and_needs_a_prior(tmp_path):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    path = str(write_log(tmp_path / "log.swf", jobs=600, nodes=32))
    with pytest.raises(ConfigError, match="ppo.prior_kl 0.5 needs a network with a prior"):
        QueuePPO(path, ppo=PPOSettings(prior_kl=0.5), validation=QueueValidation(2, 64))
    spec = QueuePolicySpec(hidden=(8,), rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True)
    torch.manual_seed(0)
    model = QueuePPO(path, window=64, sequence_length=64, batch_size=8, policy=spec,
                     ppo=PPOSettings(epochs=1, minibatch_size=128, prior_kl=0.5), validation=QueueValidation(2, 64),
                     iterations_per_epoch=1)
    trainer = Trainer(max_steps=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.fit(model)
    assert "train/loss_prior_kl" in trainer.logged_metrics
    data, _ = model.rollout()
    with torch.no_grad():
        model.net.scorer.mlp.rest[-1][-1].weight.zero_()
        model.net.scorer.mlp.rest[-1][-1].bias.zero_()
        assert float(model.prior_kl(data)) == pytest.approx(0.0, abs=1e-6)  # the residual is zero: pi is the prior
        model.net.scorer.mlp.job_in.weight.normal_(generator=torch.Generator().manual_seed(0))
        model.net.scorer.mlp.rest[-1][-1].weight.fill_(5.0)
        assert float(model.prior_kl(data)) > 0.01


def test_adaptation_plays_a_reserving_policy_with_its_reservation(tmp_path):
    # adapt.py --env queue and queue MAML roll a policy out themselves: a reserving network must play
    # its reservation there too, and learn from the probabilities of its ranking's first job
    from lightning_sched.queue.adaptation import adaptation_curve, rollout

    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=2000, nodes=32))
    cfg = log.config(sequence_length=256, backfill="off")
    starts = torch.tensor([1500, 1700])
    spec = QueuePolicySpec(rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True)
    torch.manual_seed(0)
    net = QueueNetwork(spec)
    net_cfg = replace(heuristic_config(cfg), **spec.observation())
    curve, moved = adaptation_curve(net, log, net_cfg, starts, 1, 0.03, 2, 2, 1400, seed=0, train_length=64)
    rule = evaluate_queue(*resolve("f1+reserve", cfg), log, starts).sequences["mean_bounded_slowdown"]
    assert torch.equal(curve[0], rule)  # before any step: the untrained network is f1+reserve
    assert any(not torch.equal(a, b) for a, b in zip(moved.scorer.parameters(), net.scorer.parameters()))
    env = QueueEnv(net_cfg, log, batch_size=[2], starts=starts)
    rollout(env, net.scorer, replace(spec, reserve=False), greedy=True, keys=())
    plain = env.episode_metrics()["mean_bounded_slowdown"]
    assert not torch.equal(plain, rule)  # without its reservation the same network plays F1


def test_adapt_script_saves_the_sequence_length_it_adapted_on(tmp_path):
    log, out = write_log(tmp_path / "log.swf", jobs=6000), tmp_path / "adapted.ckpt"
    script_main("adapt")(["--env", "queue", "--trace", str(log), "--policy", str(ROOT / "checkpoints/queue_bsld.ckpt"),
                          "--steps", "1", "--sequences", "1", "--episodes", "2", "--sequence_length", "64",
                          "--eval_sequences", "2", "--threads", "1", "--out", str(out)])
    assert read_queue_record(str(out)).queue.sequence_length == 64
