"""The upgraded training recipe's switches: each one's defining property, and a real
LightningCLI run with all of them on."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lightning_sched import ClusterConfig, ConfigError, DeepRMWorkload, WorkloadFamily
from lightning_sched.deeprm.cluster import init_state, step_state
from lightning_sched.deeprm.objectives import interval_reward
from lightning_sched.deeprm.observations import observe
from lightning_sched.deeprm.rollout import collect
from lightning_sched.evaluation import make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.learning.baselines import ClusterTimeBaseline, TimeIndexedBaseline
from lightning_sched.learning.policy_gradient import (
    clipped_surrogate,
    discounted_returns,
    imitation_loss,
    policy_gradient,
)
from lightning_sched.policies.networks import PolicySpec, make_policy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from test_fit import fit  # noqa: E402

CFG = ClusterConfig(observation="none")


def rollout(episodes=4, jobsets=3, load=0.9, seed=0, spec=PolicySpec(masked=True)):
    net = make_policy(spec, CFG)
    jobs = make_jobsets(DeepRMWorkload(load=load, simu_len=20), jobsets, seed).repeat_interleave(episodes)
    return net, collect(net, CFG, jobs, generator=torch.Generator().manual_seed(seed))


def test_cluster_time_baseline_matches_its_definition_decision_by_decision():
    episodes = 4
    _, traj = rollout(episodes)
    returns = discounted_returns(traj.reward, 1.0)
    advantage = ClusterTimeBaseline().advantages(returns, traj.active, traj.time, episodes)
    s, b = returns.shape
    for row in range(b):
        group = range(row // episodes * episodes, row // episodes * episodes + episodes)
        for step in range(s):
            if not traj.active[step, row]:
                assert advantage[step, row] == 0
                continue
            t = int(traj.time[step, row])
            at_t = []
            for other in group:  # each episode's return from its first decision at time >= t, 0 if it ended
                later = [k for k in range(s) if traj.active[k, other] and traj.time[k, other] >= t]
                at_t.append(float(returns[later[0], other]) if later else 0.0)
            want = float(returns[step, row]) - sum(at_t) / episodes
            assert abs(float(advantage[step, row]) - want) < 1e-4, (step, row)


def test_baselines_give_zero_advantage_when_every_episode_is_the_same():
    _, traj = rollout(episodes=1, jobsets=3)
    # the same episode four times over
    rep = lambda x: x.repeat_interleave(4, dim=1)  # noqa: E731
    returns = discounted_returns(rep(traj.reward), 1.0)
    for baseline in (TimeIndexedBaseline(), ClusterTimeBaseline()):
        advantage = baseline.advantages(returns, rep(traj.active), rep(traj.time), 4)
        assert advantage.abs().max() < 1e-5, baseline


def test_jobset_normalisation_gives_every_jobset_unit_spread():
    from lightning_sched.learning.policy_gradient import jobset_std

    net, traj = rollout(episodes=4, jobsets=3)
    returns = discounted_returns(traj.reward, 1.0)
    advantage = TimeIndexedBaseline().advantages(returns, traj.active, traj.time, 4)
    scaled = advantage / jobset_std(advantage, traj.active, 4)
    for j in range(3):
        rows = slice(4 * j, 4 * j + 4)
        values = scaled[:, rows][traj.active[:, rows]]
        assert abs(float(values.std(unbiased=False)) - 1.0) < 1e-4
    pg = policy_gradient(net, traj, TimeIndexedBaseline(), 4, normalize_advantage="jobset")
    assert torch.allclose(pg.advantage, scaled[traj.active])


def test_clipped_surrogate_first_step_is_the_policy_gradient_and_clips_later():
    net, traj = rollout()
    pg = policy_gradient(net, traj, TimeIndexedBaseline(), 4)
    grad_pg = torch.autograd.grad(pg.loss, list(net.parameters()))
    grad_ppo = torch.autograd.grad(clipped_surrogate(net, pg, 0.2), list(net.parameters()))
    for a, b in zip(grad_pg, grad_ppo):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    # move the policy far along the surrogate: every decision ends up outside the clip range on
    # the side its advantage pushes towards, and then the loss has no gradient left
    optimizer = torch.optim.SGD(net.parameters(), lr=50.0)
    for _ in range(30):
        optimizer.zero_grad()
        clipped_surrogate(net, pg, 0.2).backward()
        optimizer.step()
    loss = clipped_surrogate(net, pg, 0.2)
    moved = torch.autograd.grad(loss, list(net.parameters()))
    assert sum(float(g.abs().sum()) for g in moved) < sum(float(g.abs().sum()) for g in grad_ppo)


def test_imitation_learns_the_teachers_actions():
    net = make_policy(PolicySpec(masked=True), CFG)
    teacher = make_heuristic("tetris", CFG)
    jobs = make_jobsets(DeepRMWorkload(load=0.9, simu_len=20), 8, 1)
    traj = collect(net, CFG, jobs, teacher=teacher)
    # the recorded actions are the teacher's: replaying them reproduces its episodes
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    before = imitation_loss(net, traj).item()
    for _ in range(30):
        optimizer.zero_grad()
        imitation_loss(net, traj).backward()
        optimizer.step()
    after = imitation_loss(net, traj).item()
    assert after < 0.5 * before
    with torch.no_grad():
        features = {k: v[traj.active] for k, v in traj.features.items()}
        agree = (net(features).argmax(-1) == traj.action[traj.active]).double().mean()
    assert agree > 0.8


def test_fast_deadline_reward_equals_counting_every_job():
    cfg = ClusterConfig(observation="none", objective="deadline", slo_slowdown=1.5)
    jobs = make_jobsets(DeepRMWorkload(load=1.3, simu_len=30), 16, 3)
    state = init_state(jobs, cfg)
    random = make_heuristic("random", cfg, generator=torch.Generator().manual_seed(0))
    slow = state.rows(slice(None))
    slow.pending_due = slow.pending_due[:, :0]  # a state without the count: every job is looked at
    total = 0.0
    for _ in range(2000):
        fast_reward, slow_reward = interval_reward(state, cfg), interval_reward(slow, cfg)
        assert torch.equal(fast_reward, slow_reward)
        action = random(observe(state, cfg, job_start=False))["action"]
        total += float(step_state(state, action, cfg).sum())
        slow = state.rows(slice(None))
        slow.pending_due = slow.pending_due[:, :0]
        if bool(state.done.all()):
            break
    assert total < 0  # random scheduling at load 1.3 misses deadlines: the test saw some


def test_curriculum_and_schedule_settings():
    family = WorkloadFamily(load=(0.5, 1.5))
    assert family.with_load_upto(0.5).load == (0.5, 1.0)
    assert family.with_load_upto(1.0).load == (0.5, 1.5)
    with pytest.raises(ConfigError, match="fraction"):
        family.with_load_upto(0.0)
    from tasks.reinforce import EntropyBonus, Imitation, PPOReuse, Reinforce

    with pytest.raises(ConfigError, match="curriculum_iterations=10 needs a WorkloadFamily"):
        Reinforce(curriculum_iterations=10)
    with pytest.raises(ConfigError, match="teacher='tetris' and iterations=0"):
        Imitation(teacher="tetris")
    with pytest.raises(ConfigError, match="entropy.end=0.0 needs decay_iterations"):
        EntropyBonus(weight=0.1, end=0.0)
    with pytest.raises(ConfigError, match="ppo.clip"):
        PPOReuse(clip=1.5)
    entropy = EntropyBonus(weight=0.1, end=0.0, decay_iterations=10)
    assert entropy.at(0) == pytest.approx(0.1)


def test_fit_with_every_upgrade_counts_iterations_and_steps(tmp_path):
    """A real LightningCLI run with all switches: global_step counts iterations (max_steps), and
    RMSprop took ppo_epochs steps on each policy-gradient iteration and one on each imitation one."""
    config = tmp_path / "upgrades.yaml"
    config.write_text("""
model:
  class_path: tasks.reinforce.Reinforce
  init_args:
    workload:
      class_path: lightning_sched.WorkloadFamily
      init_args:
        load: [0.3, 1.2]
        short_prob: [0.8, 0.8]
        short_len: [[1, 1], [3, 3]]
        long_len: [[10, 10], [15, 15]]
        dominant_units: [[5, 5], [10, 10]]
        other_units: [[1, 1], [2, 2]]
        simu_len: 10
    policy: {hidden: [16, 16], masked: true}
    baseline: {class_path: lightning_sched.learning.baselines.ClusterTimeBaseline}
    normalize_advantage: true
    entropy:
      weight: 0.01
      end: 0.0
      decay_iterations: 3
    ppo:
      epochs: 3
    curriculum_iterations: 3
    imitation:
      teacher: sjf
      iterations: 2
    num_jobsets: 4
    episodes_per_jobset: 4
    iterations_per_epoch: 5
    evaluation:
      val_jobsets: 4
      test_jobsets: 4
trainer:
  max_steps: 5
  val_check_interval: 5
  logger: false
""")
    fit("fit", "--config", str(config), "--checkpoint.dirpath", str(tmp_path / "ckpt"), tmp_path=tmp_path)
    data = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=True)
    assert data["global_step"] == 5
    rmsprop_steps = {int(s["step"]) for s in data["optimizer_states"][0]["state"].values()}
    assert rmsprop_steps == {2 * 1 + 3 * 3}  # 2 imitation iterations, 3 policy-gradient ones
    assert data["hyper_parameters"]["imitation"]["teacher"] == "sjf"


def test_deadline_inputs_read_each_slots_slack_and_warm_start_keeps_the_policy(tmp_path):
    net = make_policy(PolicySpec(masked=True, deadline_inputs=True), CFG)
    jobs = make_jobsets(DeepRMWorkload(load=1.5, simu_len=20), 4, 2)
    state = init_state(jobs, CFG)
    for _ in range(6):  # let time pass with nothing scheduled: slack shrinks, some jobs turn late
        step_state(state, torch.full((4,), CFG.num_slots), CFG)
    obs = observe(state, CFG, job_start=False)
    slack = net.encode(obs)["slack"]
    m, t = CFG.num_slots, CFG.horizon
    present = obs["slot_duration"] > 0
    left = obs["slot_deadline"] - obs["slot_duration"]
    assert torch.equal(slack[:, m:] == 1, present & (left < 0))
    assert torch.allclose(slack[:, :m], torch.where(present, left.clamp(0, t) / t, 0.0).float())
    assert bool((slack[:, m:] == 1).any()) and bool((slack[:, :m] > 0).any())
    # a warm start from a network without these inputs acts exactly as it did
    from tasks.reinforce import Reinforce

    plain = make_policy(PolicySpec(masked=True), CFG)
    torch.nn.init.normal_(plain.first.weight, std=0.01)
    path = tmp_path / "plain.ckpt"
    from lightning_sched.policies.checkpoints import PolicyRecord

    PolicyRecord.of(plain).save(path)
    module = Reinforce(policy=PolicySpec(masked=True, deadline_inputs=True), init_from=str(path))
    with torch.no_grad():
        assert torch.allclose(module.net(module.net.encode(obs)), plain(plain.encode(obs)))
    with pytest.raises(ConfigError, match="is not this run's"):
        Reinforce(policy=PolicySpec(masked=False, deadline_inputs=True), init_from=str(path))
