"""Policy networks: the image-free first layer equals the image one (outputs and gradients), the
action head's mask, and the policy-gradient pieces (returns, DeepRM's baseline)."""
from __future__ import annotations

import pytest
import torch

from lightning_sched import ClusterConfig, DeepRMWorkload
from lightning_sched.deeprm.cluster import init_state, step_state
from lightning_sched.deeprm.observations import observe
from lightning_sched.deeprm.rollout import collect
from lightning_sched.evaluation import make_jobsets
from lightning_sched.learning.baselines import TimeIndexedBaseline
from lightning_sched.learning.policy_gradient import discounted_returns, policy_gradient
from lightning_sched.policies.acting import Acting, NetworkPolicy, sample_actions
from lightning_sched.policies.networks import PolicySpec, make_policy


def states_along_episodes(cfg, rows=48, steps=25, seed=0):
    """Observations of varied states: busy clusters, full slots, backlogs (Tetris decisions, voids)."""
    from lightning_sched.heuristics import make_heuristic

    jobs = make_jobsets(DeepRMWorkload(load=1.5, simu_len=30), rows, seed)
    state = init_state(jobs, cfg)
    policy = make_heuristic("tetris", cfg)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        obs = observe(state, cfg)
        action = policy(obs)["action"]
        action = torch.where(torch.rand(rows, generator=g) < 0.3, cfg.num_slots, action)  # let backlogs grow
        step_state(state, action, cfg)
    return observe(state, cfg, job_start=False)


@pytest.mark.parametrize("hidden,deadline_inputs", [((20,), False), ((16, 8), False), ((20,), True)])
def test_image_free_first_layer_matches_the_rendered_image(hidden, deadline_inputs):
    cfg = ClusterConfig(observation="none")
    torch.manual_seed(1)
    net = make_policy(PolicySpec(hidden=hidden, deadline_inputs=deadline_inputs), cfg).double()
    if deadline_inputs:
        torch.nn.init.normal_(net.deadline.weight)  # starts at zero; make it count
    obs = states_along_episodes(cfg)
    assert int(obs["backlog"].max()) > 0 and int(obs["used"].max()) > 0  # non-trivial states
    image = net.render(obs).double()
    weights = torch.randn(obs["used"].shape[0], cfg.num_actions, dtype=torch.float64)

    features = net.encode(obs)
    doubled = {k: v.double() for k, v in features.items() if k in ("since", "slack")}
    fast = net({**features, **doubled})
    (fast * weights).sum().backward()
    fast_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    slow = net.logits_from_image(image, obs["action_mask"], doubled.get("slack"))
    (slow * weights).sum().backward()
    assert torch.allclose(fast, slow, atol=1e-10, rtol=1e-10)
    for g_fast, p in zip(fast_grads, net.parameters()):
        assert torch.allclose(g_fast, p.grad, atol=1e-9, rtol=1e-9)


def test_render_matches_the_envs_image():
    cfg = ClusterConfig(observation="image")
    net = make_policy(PolicySpec(), cfg)
    obs = states_along_episodes(cfg, rows=16)
    assert torch.equal(net.render(obs), obs["observation"])


def test_masked_head_never_samples_invalid_actions_and_unmasked_does():
    cfg = ClusterConfig(observation="none")
    obs = states_along_episodes(cfg, rows=64)
    g = torch.Generator().manual_seed(0)
    for masked in (True, False):
        net = make_policy(PolicySpec(masked=masked), cfg)
        f = net.encode(obs)
        picks = torch.stack([sample_actions(net(f), greedy=False, generator=g) for _ in range(50)])
        valid = f["mask"].gather(1, picks.T).T
        assert bool(valid.all()) == masked


def test_sampling_follows_the_softmax():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]])).expand(20000, 3)
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(sample_actions(logits, greedy=False, generator=g), minlength=3).double() / 20000
    assert torch.allclose(counts, torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64), atol=0.015)


def test_discounted_returns():
    reward = torch.tensor([[1.0], [2.0], [3.0]])
    assert discounted_returns(reward, 1.0).flatten().tolist() == [6.0, 5.0, 3.0]
    assert discounted_returns(reward, 0.5).flatten().tolist() == [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]


def test_time_indexed_baseline_zero_pads_short_episodes():
    # one jobset, two episodes: returns [-3, -2, -1] (3 decisions) and [-4] (1 decision)
    returns = torch.tensor([[-3.0, -4.0], [-2.0, 0.0], [-1.0, 0.0]])
    active = torch.tensor([[True, True], [True, False], [True, False]])
    adv = TimeIndexedBaseline().advantages(returns, active, torch.zeros_like(returns, dtype=torch.long), episodes=2)
    # b_0 = -3.5, b_1 = (-2 + 0) / 2 = -1, b_2 = -0.5 (DeepRM pads the short episode with zeros)
    assert adv[:, 0].tolist() == [0.5, -1.0, -0.5]
    assert adv[0, 1].item() == -0.5


def test_collect_records_every_decision_of_every_episode():
    cfg = ClusterConfig(observation="none")
    net = make_policy(PolicySpec(), cfg)
    jobs = make_jobsets(DeepRMWorkload(load=0.7, simu_len=20), 6, 0).repeat_interleave(3)
    traj = collect(net, cfg, jobs, generator=torch.Generator().manual_seed(0))
    assert bool(traj.state.terminated.all())
    # the return of each episode is the episode's reward sum: -(sum of slowdowns) (SPEC identity)
    from lightning_sched.deeprm.objectives import episode_metrics

    m = episode_metrics(traj.state)
    total = traj.reward.double().sum(0)
    assert torch.allclose(total, -(m["mean_slowdown"] * m["num_jobs"]), rtol=1e-5)
    # no reward and no decision recorded after a row is done
    assert bool((traj.reward[~traj.active] == 0).all())
    # each active step is a real decision: scheduled jobs + time advances
    scheduled = (traj.state.start[:, :-1] >= 0).sum(1)
    assert torch.equal(traj.active.sum(0), scheduled + traj.state.time)


def test_policy_gradient_step_moves_the_policy_towards_better_actions():
    """One update on a fixed batch raises the log-probability of actions with positive advantage."""
    cfg = ClusterConfig(observation="none")
    torch.manual_seed(0)
    net = make_policy(PolicySpec(), cfg)
    jobs = make_jobsets(DeepRMWorkload(load=0.9, simu_len=20), 8, 1).repeat_interleave(8)
    traj = collect(net, cfg, jobs, generator=torch.Generator().manual_seed(0))
    baseline = TimeIndexedBaseline()
    pg = policy_gradient(net, traj, baseline, episodes=8)
    assert pg.decisions == int(traj.active.sum()) and torch.isfinite(pg.loss)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    opt.zero_grad()
    pg.loss.backward()
    opt.step()
    after = policy_gradient(net, traj, baseline, episodes=8)
    assert after.loss < pg.loss  # the surrogate objective improved on the same data


def test_network_policy_runs_in_evaluation():
    from lightning_sched.evaluation import evaluate

    cfg = ClusterConfig(observation="none")
    net = make_policy(PolicySpec(masked=True), cfg)
    result = evaluate(NetworkPolicy(net, Acting(greedy=True)), cfg, make_jobsets(DeepRMWorkload(simu_len=15), 5, 0))
    assert result.summary["unfinished_jobs"] == 0 and result.summary["mean_slowdown"] >= 1


def test_an_image_network_on_another_clusters_observation_is_refused_naming_the_sizes():
    from lightning_sched.config import ConfigError

    cfg = ClusterConfig()
    net = make_policy(PolicySpec(), cfg)
    obs = observe(init_state(make_jobsets(DeepRMWorkload(load=0.9), 2, seed=0).validate(cfg), cfg), cfg)
    net.encode(obs)  # its own cluster: read
    other = ClusterConfig(num_slots=20)
    wider = observe(init_state(make_jobsets(DeepRMWorkload(load=0.9), 2, seed=0).validate(other), other), other)
    with pytest.raises(ConfigError, match=r"image network reads its own cluster's image .* 10 slots\); this "
                                          r"observation has used \[20, 2\], slot_demand \[20, 2\]"):
        net.encode(wider)
    more_units = {**obs, "used": obs["used"] + cfg.resource_units + 1}  # the same shapes, a larger cluster's units
    with pytest.raises(ConfigError, match=r"and up to \d+ units used"):
        net.encode(more_units)
