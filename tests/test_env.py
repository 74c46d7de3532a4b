"""`ClusterEnv` against SPEC.md: TorchRL specs, a tiny episode worked out by hand, partial resets,
the heuristics' contract, devices."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from lightning_sched import ClusterConfig, ClusterEnv, ConfigError, DeepRMWorkload, JobSet
from lightning_sched.deeprm.cluster import compiled_step, init_state, step_state
from lightning_sched.deeprm.objectives import episode_metrics
from lightning_sched.deeprm.state import ClusterState, used_now
from lightning_sched.evaluation import make_jobsets
from lightning_sched.heuristics import HEURISTICS, Tetris, make_heuristic

SMALL = ClusterConfig(num_resources=2, resource_units=6, horizon=10, num_slots=4, backlog_size=12, max_job_len=8,
                      max_job_units=6, max_time=120)


def small_workload(cfg: ClusterConfig = SMALL, load: float = 0.9) -> DeepRMWorkload:
    return DeepRMWorkload.for_cluster(cfg, load=load, simu_len=20)


def small_jobs(batch: int, seed: int = 0, cfg: ClusterConfig = SMALL, load: float = 0.9) -> JobSet:
    return small_workload(cfg, load).sample(batch, torch.Generator().manual_seed(seed))


def valid_random_actions(td, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random valid action per row (void included)."""
    weights = td["action_mask"].float()
    return torch.multinomial(weights, 1, generator=generator).squeeze(1)


# ----- TorchRL specs ------------------------------------------------------------------------------
@pytest.mark.parametrize("observation", ["image", "compact", "none"])
@pytest.mark.parametrize("source", ["jobset", "generator"])
def test_check_env_specs(observation, source):
    cfg = SMALL.replace(observation=observation)
    workload = small_jobs(3, cfg=cfg) if source == "jobset" else small_workload(cfg)
    env = ClusterEnv(cfg, workload=workload, batch_size=[3], seed=1)
    check_env_specs(env, return_contiguous=True)
    td = env.reset()
    assert td["action_mask"].shape == (3, cfg.num_slots + 1) and td["action_mask"].dtype == torch.bool
    assert td["time"].shape == (3, 1) and td["time"].dtype == torch.int64
    assert td["job_start"].shape == (3, env.max_jobs) and td["job_start"].dtype == torch.int64
    if observation == "image":
        assert td["observation"].shape == (3, cfg.horizon, cfg.image_width)
        assert td["observation"].dtype == torch.float32
    elif observation == "compact":
        assert td["observation"].shape == (3, cfg.compact_size)
    else:
        assert "observation" not in td.keys() and "used" not in td.keys()
    td["action"] = torch.full((3,), cfg.num_slots)
    nxt = env.step(td)["next"]
    for key in ("reward", "done", "terminated", "truncated"):
        assert nxt[key].shape == (3, 1), key
    assert nxt["reward"].dtype == torch.float32 and nxt["done"].dtype == torch.bool


# ----- a tiny episode, worked out by hand from SPEC.md ---------------------------------------------
# 1 resource of 3 units, horizon 4, 2 slots, backlog_size 5 (backlog block 2 columns wide),
# max_job_units 3, since-new capped at 2.  W = 1 * (3 + 2 * 3) + 2 + 1 = 12 columns:
# 0-2 cluster, 3-5 slot 0, 6-8 slot 1, 9-10 backlog, 11 since-new.
TINY = ClusterConfig(num_resources=1, resource_units=3, horizon=4, num_slots=2, backlog_size=5, max_job_len=3,
                     max_job_units=3, max_time=50, max_track_since_new=2, slo_slowdown=2.0)
# position:       p0 p1 p2 p3 p4 p5 p6 (padding)
TINY_ARRIVAL = [1, 0, 0, 1, 1, 1, 0]
TINY_DURATION = [2, 3, 1, 1, 1, 1, 0]
TINY_DEMAND = [2, 2, 3, 1, 1, 1, 0]
# default deadlines a + floor(2 d): p0 5, p1 6, p2 2, p3 3, p4 3, p5 3

# (action, time after, job_start after, action_mask after, reward by objective)
S, C, MK, U, D = "slowdown", "completion_time", "makespan", "utilization", "deadline"
TINY_STEPS = [
    # t=0: slots p1 (d3 q2), p2 (d1 q3). p1 fits now.
    (0, 0, [-1, 0, -1, -1, -1, -1, -1], [1, 0, 1], {}),
    # p2 (q3) fits only in row 3, where nothing runs: it starts in the future, at t=3
    (0, 0, [-1, 0, 3, -1, -1, -1, -1], [0, 0, 1], {}),
    # slot 1 is empty: an invalid action advances time. In the system over [0,1): p1, p2.
    (1, 1, [-1, 0, 3, -1, -1, -1, -1], [0, 1, 1], {S: -(1 / 3 + 1), C: -2, MK: -1, U: 2 / 3, D: 0}),
    # t=1: p0, p3, p4, p5 arrived; slots p0 (no 2 free rows), p3; backlog p4, p5.
    # Scheduling the infeasible p0 advances time. [1,2): p1, p2, p0, p3, p4, p5; p2 misses deadline 2.
    (0, 2, [-1, 0, 3, -1, -1, -1, -1], [1, 1, 1], {S: -(1 / 3 + 1 + 1 / 2 + 3), C: -6, MK: -1, U: 2 / 3, D: -1}),
    (1, 2, [-1, 0, 3, 2, -1, -1, -1], [1, 1, 1], {}),  # p3 now; p4 enters slot 1
    (1, 2, [-1, 0, 3, 2, 4, -1, -1], [1, 1, 1], {}),  # p4 at offset 2 (t=4); p5 enters slot 1
    (0, 2, [4, 0, 3, 2, 4, -1, -1], [1, 0, 1], {}),  # p0 at offset 2; p5 in slot 0 fits at offset 3
    # void. [2,3): p1, p2, p3, p0, p4, p5; deadline 3: p4 (f 5) and p5 (unscheduled) miss, p3 (f 3) meets it
    (2, 3, [4, 0, 3, 2, 4, -1, -1], [1, 0, 1], {S: -(1 / 3 + 1 + 1 + 1 / 2 + 1 + 1), C: -6, MK: -1, U: 1.0, D: -2}),
    (0, 3, [4, 0, 3, 2, 4, 5, -1], [0, 0, 1], {}),  # p5 at offset 2 (t=5)
    (2, 4, [4, 0, 3, 2, 4, 5, -1], [0, 0, 1], {S: -(1 + 1 + 1 / 2 + 1), C: -4, MK: -1, U: 1.0, D: 0}),
    (2, 5, [4, 0, 3, 2, 4, 5, -1], [0, 0, 1], {S: -(1 + 1 / 2 + 1), C: -3, MK: -1, U: 1.0, D: -1}),
    (2, 6, [4, 0, 3, 2, 4, 5, -1], [0, 0, 1], {S: -(1 / 2 + 1), C: -2, MK: -1, U: 1.0, D: 0}),  # all finished
    (0, 6, [4, 0, 3, 2, 4, 5, -1], [0, 0, 1], {}),  # absorbing
]
# f: p0 6, p1 3, p2 4, p3 3, p4 5, p5 6. Slowdowns 2.5, 1, 4, 2, 4, 5 (sum 18.5); completion times 5, 3,
# 4, 2, 4, 5 (sum 23); makespan 6; deadlines met by p1 and p3 only.
TINY_RETURNS = {S: -18.5, C: -23.0, MK: -6.0, U: 2 / 3 + 2 / 3 + 4.0, D: -4.0}


def tiny_env(objective="slowdown", observation="image") -> ClusterEnv:
    demand = torch.tensor([TINY_DEMAND]).unsqueeze(-1)
    jobs = JobSet(torch.tensor([TINY_ARRIVAL]), torch.tensor([TINY_DURATION]), demand)
    return ClusterEnv(TINY.replace(objective=objective, observation=observation), workload=jobs, batch_size=[1])


def spec_image(cfg: ClusterConfig, used: list[int], slots: list[tuple[int, int]], backlog: int,
               since: float) -> torch.Tensor:
    """SPEC's image for one resource, written cell by cell."""
    width = cfg.backlog_width
    image = torch.zeros(cfg.horizon, cfg.image_width)
    for k in range(cfg.horizon):
        for u in range(used[k]):
            image[k, u] = 1.0
    for i, (d, q) in enumerate(slots):
        col = cfg.resource_units + i * cfg.max_job_units
        for k in range(d):
            for u in range(q):
                image[k, col + u] = 1.0
    col = cfg.resource_units + cfg.num_slots * cfg.max_job_units
    for n in range(min(backlog, cfg.backlog_size)):
        image[n // width, col + n % width] = 1.0
    image[:, -1] = since
    return image


@pytest.mark.parametrize("objective", ["slowdown", "completion_time", "makespan", "utilization", "deadline"])
def test_tiny_episode_by_hand(objective):
    env = tiny_env(objective)
    td = env.reset()
    assert td["time"].item() == 0
    assert td["job_start"].tolist() == [[-1] * 7]
    assert td["action_mask"].tolist() == [[True, True, True]]  # slot order: p1 then p2, both fit now
    assert td["slot_duration"].tolist() == [[3, 1]] and td["slot_demand"].tolist() == [[[2], [3]]]
    total = 0.0
    for n, (action, time, start, mask, rewards) in enumerate(TINY_STEPS):
        td["action"] = torch.tensor([action])
        td = env.step(td)["next"]
        assert td["time"].item() == time, f"step {n}"
        assert td["job_start"].tolist() == [start], f"step {n}"
        assert td["action_mask"].tolist() == [[bool(m) for m in mask]], f"step {n}"
        want = rewards.get(objective, 0.0)
        assert td["reward"].item() == pytest.approx(want, abs=1e-6), f"step {n}"
        total += td["reward"].item()
        finished = n >= 11
        assert td["terminated"].item() == finished and td["done"].item() == finished and not td["truncated"].item()
    assert total == pytest.approx(TINY_RETURNS[objective], abs=1e-5)
    m = env.episode_metrics()
    assert m["mean_slowdown"].item() == pytest.approx(18.5 / 6)
    assert m["mean_completion_time"].item() == pytest.approx(23 / 6)
    assert m["makespan"].item() == 6
    assert m["utilization"].item() == pytest.approx((2 / 3 + 2 / 3 + 4) / 6)
    assert m["slo_hit_rate"].item() == pytest.approx(2 / 6)
    assert m["num_jobs"].item() == 6


def test_tiny_episode_images_and_structured_keys():
    env = tiny_env()
    cfg = env.cfg
    assert cfg.image_width == 12 and cfg.backlog_width == 2
    td = env.reset()
    image = td["observation"][0]
    # t=0: empty cluster; slot 0 = p1 (3 rows x 2 units), slot 1 = p2 (1 row x 3 units); since-new 0
    assert torch.equal(image, spec_image(cfg, [0, 0, 0, 0], [(3, 2), (1, 3)], 0, 0.0))
    assert image[:3, 3:5].eq(1).all() and image[3, 3:5].eq(0).all() and image[0, 6:9].eq(1).all()
    states = {}
    for n, (action, *_rest) in enumerate(TINY_STEPS):
        td["action"] = torch.tensor([action])
        td = env.step(td)["next"]
        states[n] = td.clone()
    # after step 0: p1 runs in rows 0-2; slot 0 is p2, slot 1 empty; p2's earliest offset is 3
    td = states[0]
    assert torch.equal(td["observation"][0], spec_image(cfg, [2, 2, 2, 0], [(1, 3)], 0, 0.0))
    assert td["used"].tolist() == [[[2], [2], [2], [0]]]
    assert td["slot_offset"].tolist() == [[3, -1]] and td["slot_duration"].tolist() == [[1, 0]]
    assert td["slot_deadline"][0, 0].item() == 2  # p2: deadline 2, t = 0
    assert td["free_now"].tolist() == [[1]] and td["backlog"].tolist() == [[0]]
    # t=1: p2 booked in row 2 (time 3); slots p0, p3; backlog p4, p5 fills the first backlog row
    td = states[2]
    image = td["observation"][0]
    assert torch.equal(image, spec_image(cfg, [2, 2, 3, 0], [(2, 2), (1, 1)], 2, 0.0))
    assert image[0, 9:11].tolist() == [1.0, 1.0] and image[1:, 9:11].eq(0).all()
    assert td["backlog"].tolist() == [[2]] and td["slot_offset"].tolist() == [[-1, 0]]
    # t=2: one step since the last arrival (cap 2): 0.5
    td = states[3]
    assert torch.equal(td["observation"][0], spec_image(cfg, [2, 3, 0, 0], [(2, 2), (1, 1)], 2, 0.5))
    assert td["since_new"].item() == 0.5
    # t=3: two steps since the last arrival, at the cap: 1.0; slot 0 = p5, fits at offset 2
    td = states[7]
    assert torch.equal(td["observation"][0], spec_image(cfg, [3, 3, 2, 0], [(1, 1)], 0, 1.0))
    assert td["slot_offset"].tolist() == [[2, -1]]
    # finished: the image no longer changes
    assert torch.equal(states[11]["observation"], states[12]["observation"])
    assert torch.equal(states[11]["observation"][0], spec_image(cfg, [0, 0, 0, 0], [], 0, 1.0))


def test_tiny_episode_compact_observation():
    """Compact: free units per (row, resource) / U, per slot (d / max_job_len, q / MU), backlog /
    backlog_size, since-new (observations.compact_vector)."""
    env = tiny_env(observation="compact")
    td = env.reset()
    for action, *_ in TINY_STEPS[:3]:
        td["action"] = torch.tensor([action])
        td = env.step(td)["next"]
    # t=1: used [2, 2, 3, 0]; slots p0 (2, 2), p3 (1, 1); backlog 2
    want = [1 / 3, 1 / 3, 0.0, 1.0, 2 / 3, 2 / 3, 1 / 3, 1 / 3, 2 / 5, 0.0]
    assert td["observation"][0].tolist() == pytest.approx(want)


def test_since_new_is_one_before_the_first_arrival():
    cfg = TINY.replace(max_track_since_new=4)
    jobs = JobSet(torch.tensor([[3, 0]]), torch.tensor([[1, 0]]), torch.tensor([[[1], [0]]]))  # one job at t=3
    env = ClusterEnv(cfg, workload=jobs, batch_size=[1])
    td = env.reset()
    seen = [td["observation"][0, :, -1].tolist()]
    for _ in range(5):
        td["action"] = torch.tensor([cfg.num_slots])
        td = env.step(td)["next"]
        seen.append(td["observation"][0, :, -1].tolist())
    want = [1.0, 1.0, 1.0, 0.0, 0.25, 0.5]  # t = 0..5, arrival at 3, cap 4
    assert seen == [[w] * cfg.horizon for w in want]


def test_backlog_is_unbounded_and_the_image_caps_it():
    """Jobs beyond the slots and the image's backlog_size are kept (no job is dropped)."""
    cfg = TINY.replace(backlog_size=3, num_slots=1)  # backlog block 1 column wide
    n = 8
    jobs = JobSet(torch.zeros(1, n, dtype=torch.long), torch.ones(1, n, dtype=torch.long),
                  torch.ones(1, n, 1, dtype=torch.long))
    env = ClusterEnv(cfg, workload=jobs, batch_size=[1])
    td = env.reset()
    assert td["backlog"].item() == n - 1
    backlog_block = td["observation"][0, :, cfg.resource_units + cfg.max_job_units]
    assert backlog_block.tolist() == [1.0, 1.0, 1.0, 0.0]  # min(7, 3) ones, row-major in one column
    steps = 0
    while not td["done"].item():
        td["action"] = torch.tensor([0])  # schedule slot 0 when it fits, else (invalid) advance
        td = env.step(td)["next"]
        steps += 1
        assert steps < 100
    assert td["terminated"].item() and (td["job_start"] >= 0).all()


def test_time_frozen_until_void_or_invalid_action():
    env = ClusterEnv(SMALL, workload=small_jobs(1, seed=3), batch_size=[1])
    td = env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        t = td["time"].item()
        mask = td["action_mask"][0]
        action = valid_random_actions(td, g)
        td["action"] = action
        td = env.step(td)["next"]
        valid_slot = action.item() < SMALL.num_slots and mask[action.item()].item()
        assert td["time"].item() == t + (0 if valid_slot else 1)
        if td["done"].item():
            break


def test_out_of_range_actions_act_as_void():
    """Any invalid action advances time, including an empty slot and (hot path) numbers outside 0..M."""
    from lightning_sched.deeprm.cluster import init_state, step_state

    jobs = JobSet(torch.tensor([[0, 0]] * 3), torch.tensor([[2, 2]] * 3), torch.tensor([[[1], [1]]] * 3))
    state = init_state(jobs, TINY)
    reward = step_state(state, torch.tensor([-1, 7, 2]), TINY)
    assert state.time.tolist() == [1, 1, 1] and (state.start == -1).all()
    assert reward.tolist() == pytest.approx([-1.0, -1.0, -1.0])  # two jobs of length 2 waiting


# ----- partial reset ------------------------------------------------------------------------------
def test_a_serial_env_of_cluster_envs_runs_the_heuristics_and_random_draws_from_its_mask():
    """A SerialEnv resets its envs with "_reset" alone (the rows not reset must come back as they
    stand, not zeroed) and hands policies a [workers, B] batch."""
    from functools import partial

    from torchrl.envs import ActionMask, SerialEnv, TransformedEnv

    make = partial(ClusterEnv, SMALL, workload=small_workload(), batch_size=[3])
    serial = SerialEnv(2, [partial(make, seed=1), partial(make, seed=2)])
    for name in HEURISTICS:
        rollout = serial.rollout(60, make_heuristic(name, SMALL), break_when_any_done=False)
        assert rollout.batch_size[:2] == (2, 3) and bool(rollout["next", "done"].any()), name
    torch.manual_seed(0)
    masked = TransformedEnv(SerialEnv(2, [partial(make, seed=1), partial(make, seed=2)]), ActionMask())
    rollout = masked.rollout(60, break_when_any_done=False)  # zeroed rows: "invalid multinomial distribution"
    assert bool(rollout["next", "done"].any())


@pytest.mark.parametrize("source", ["jobset", "generator"])
def test_partial_reset_resets_only_those_rows(source):
    b = 4
    jobs = small_jobs(b, seed=5)
    workload = jobs if source == "jobset" else small_workload()
    env = ClusterEnv(SMALL, workload=workload, batch_size=[b], seed=11)
    twin = ClusterEnv(SMALL, workload=workload, batch_size=[b], seed=11)
    td, td_twin = env.reset(), twin.reset()
    assert torch.equal(td["observation"], td_twin["observation"])
    g = torch.Generator().manual_seed(2)
    for _ in range(12):
        action = valid_random_actions(td, g)
        td["action"], td_twin["action"] = action, action.clone()
        td, td_twin = env.step(td)["next"], twin.step(td_twin)["next"]
    assert (td["time"] > 0).all(), "the episodes should have advanced before the reset"
    before_arrival = env.state.arrival.clone()
    td["_reset"] = torch.zeros(b, 1, dtype=torch.bool)  # a mask of no rows resets nothing
    td = env.reset(td)
    assert torch.equal(env.state.arrival, before_arrival) and (td["time"] > 0).all()
    rows = torch.tensor([True, False, True, False])
    td["_reset"] = rows.unsqueeze(-1)
    td = env.reset(td)
    kept = ~rows
    # reset rows: a fresh episode at time 0, nothing scheduled
    assert td["time"][rows].eq(0).all() and td["job_start"][rows].eq(-1).all()
    assert not td["done"][rows].any()
    if source == "jobset":  # replays the same jobsets: the same first observation as at the start
        fresh = ClusterEnv(SMALL, workload=jobs, batch_size=[b]).reset()
        assert torch.equal(td["observation"][rows], fresh["observation"][rows])
        assert torch.equal(env.state.arrival, before_arrival)
    else:  # fresh jobsets for the reset rows only
        assert not torch.equal(env.state.arrival[rows], before_arrival[rows])
        assert torch.equal(env.state.arrival[kept], before_arrival[kept])
    # other rows: exactly where they were, and they go on exactly as the twin that was not reset
    for key in ("observation", "time", "job_start", "action_mask", "done"):
        assert torch.equal(td[key][kept], td_twin[key][kept]), key
    for _ in range(30):
        action = valid_random_actions(td_twin, g)
        td["action"], td_twin["action"] = action, action.clone()
        td, td_twin = env.step(td)["next"], twin.step(td_twin)["next"]
        for key in ("observation", "time", "job_start", "reward", "done"):
            assert torch.equal(td[key][kept], td_twin[key][kept]), key


# ----- heuristics ---------------------------------------------------------------------------------
def spec_scores(name: str, td, cfg: ClusterConfig, short_weight: float | None = None) -> torch.Tensor:
    """SPEC's scores [B, M], from `used` (not the structured free_now the heuristics read)."""
    d = td["slot_duration"].double()
    if name == "sjf":
        return 1.0 / d.clamp(min=1)
    free = (cfg.resource_units - td["used"][:, 0, :]).double()  # [B, R]
    packing = (free.unsqueeze(1) * td["slot_demand"].double()).sum(-1)
    if name == "packer":
        return packing
    if name == "tetris":
        return packing / (cfg.num_resources * cfg.resource_units * cfg.max_job_units) + short_weight / d.clamp(min=1)
    if name == "edf":
        return -td["slot_deadline"].double()
    raise ValueError(name)


def fits_now(td, cfg: ClusterConfig) -> torch.Tensor:
    """Slot jobs that fit at offset 0, from `used` and the slot jobs: BoolTensor[B, M]."""
    used = td["used"]  # [B, T, R]
    d, q = td["slot_duration"], td["slot_demand"]  # [B, M], [B, M, R]
    rows = torch.arange(cfg.horizon) < d.unsqueeze(-1)  # [B, M, T]
    over = (used.unsqueeze(1) + q.unsqueeze(2)) > cfg.resource_units  # [B, M, T, R]
    return (d > 0) & ~(over.any(-1) & rows).any(-1)


@pytest.mark.parametrize("name", ["sjf", "packer", "tetris", "edf"])
def test_heuristics_are_work_conserving_argmax_with_lowest_slot_ties(name):
    cfg = SMALL
    jobs = small_jobs(16, seed=7, load=1.2)
    env = ClusterEnv(cfg, workload=jobs, batch_size=[16])
    policy = make_heuristic(name, cfg)
    short_weight = getattr(policy, "short_weight", None)
    td = env.reset()
    m, decisions, ties = cfg.num_slots, 0, 0
    while not td["done"].all():
        action = policy(td.clone())["action"]
        assert action.shape == (16,) and action.dtype == torch.int64
        assert ((action >= 0) & (action <= m)).all()
        fit = fits_now(td, cfg)
        assert torch.equal(fit, td["slot_offset"] == 0)
        live = ~td["done"].squeeze(-1)
        # void exactly when nothing fits now
        assert torch.equal((action == m)[live], (~fit.any(-1))[live])
        score = torch.where(fit, spec_scores(name, td, cfg, short_weight), float("-inf"))
        best = score.max(-1, keepdim=True).values
        first_best = (score == best).long().argmax(-1)  # lowest slot among the maxima
        chosen = fit.any(-1) & live
        assert torch.equal(action[chosen], first_best[chosen])
        ties += int(((score == best) & fit).sum(-1).gt(1)[chosen].sum())
        decisions += int(chosen.sum())
        td["action"] = action
        td = env.step(td)["next"]
    assert decisions > 100 and ties > 0, (decisions, ties)  # the check saw real choices and real ties


def test_heuristic_ties_go_to_the_lowest_slot():
    """Three identical jobs waiting: every heuristic schedules slot 0."""
    cfg = ClusterConfig(num_resources=2, resource_units=4, horizon=6, num_slots=3, max_job_len=3, max_job_units=4)
    n = 3
    jobs = JobSet(torch.zeros(1, n, dtype=torch.long), torch.full((1, n), 2), torch.full((1, n, 2), 1))
    env = ClusterEnv(cfg, workload=jobs, batch_size=[1])
    for name in ("sjf", "packer", "tetris", "edf"):
        td = env.reset()
        assert make_heuristic(name, cfg)(td)["action"].item() == 0, name


def test_heuristic_choices_on_a_hand_made_state():
    """Slots: a long job, a short big one, a short small one. SJF takes the first short one, Packer
    the biggest demand (both slot 1); once the long job runs only the small one fits now."""
    cfg = ClusterConfig(num_resources=1, resource_units=4, horizon=6, num_slots=3, max_job_len=5, max_job_units=4)
    jobs = JobSet(torch.tensor([[0, 0, 0, 0]]), torch.tensor([[5, 1, 1, 2]]), torch.tensor([[[2], [3], [1], [4]]]))
    env = ClusterEnv(cfg, workload=jobs, batch_size=[1])
    td = env.reset()  # slots (d, q): (5,2), (1,3), (1,1); backlog (2,4)
    assert make_heuristic("sjf", cfg)(td.clone())["action"].item() == 1
    assert make_heuristic("packer", cfg)(td.clone())["action"].item() == 1
    td["action"] = torch.tensor([0])  # the long job: 2 units free in rows 0-4
    td = env.step(td)["next"]  # slots: (1,3) no longer fits now, (1,1), (2,4) does not fit at all
    assert td["slot_offset"].tolist() == [[5, 0, -1]]
    for name in ("sjf", "packer", "tetris", "edf"):
        assert make_heuristic(name, cfg)(td.clone())["action"].item() == 1, name
    td["action"] = torch.tensor([1])
    td = env.step(td)["next"]  # slots (1,3) at offset 5, (2,4): nothing fits now -> void
    for name in ("sjf", "packer", "tetris", "edf"):
        assert make_heuristic(name, cfg)(td.clone())["action"].item() == cfg.num_slots, name


def test_tetris_knob_spans_packer_and_sjf():
    cfg = SMALL
    env = ClusterEnv(cfg, workload=small_jobs(8, seed=9, load=1.2), batch_size=[8])
    td = env.reset()
    packer, tetris0 = make_heuristic("packer", cfg), Tetris(cfg, short_weight=0.0)
    for _ in range(40):
        a = packer(td.clone())["action"]
        assert torch.equal(tetris0(td.clone())["action"], a)
        td["action"] = a
        td = env.step(td)["next"]
    with pytest.raises(Exception, match="short_weight"):
        Tetris(cfg, short_weight=-1.0)


def test_random_heuristic_covers_all_actions():
    cfg = SMALL
    env = ClusterEnv(cfg, workload=small_jobs(64), batch_size=[64])
    td = env.reset()
    policy = make_heuristic("random", cfg, generator=torch.Generator().manual_seed(0))
    actions = torch.cat([policy(td.clone())["action"] for _ in range(10)])
    assert ((actions >= 0) & (actions <= cfg.num_slots)).all()
    assert set(actions.tolist()) == set(range(cfg.num_slots + 1))


def test_unknown_heuristic_is_refused():
    with pytest.raises(Exception, match="'fifo'"):
        make_heuristic("fifo", SMALL)


# ----- devices --------------------------------------------------------------------------------------
def same_device(a: torch.device, b: torch.device) -> bool:
    """Equal devices, "cuda" and "cuda:0" alike."""
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def assert_state_on(state: ClusterState, device: torch.device) -> None:
    for name, value in vars(state).items():
        if isinstance(value, torch.Tensor):
            assert same_device(value.device, device), f"state.{name} on {value.device}, env on {device}"


def run_fixed_actions(device: str, steps: int = 60):
    jobs = small_jobs(6, seed=4)
    env = ClusterEnv(SMALL, workload=jobs, batch_size=[6], device=device)
    td = env.reset()
    outputs = []
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        action = valid_random_actions(td.cpu(), g)
        td["action"] = action.to(device)
        td = env.step(td)["next"]
        outputs.append(td.clone().cpu())  # a snapshot: the next step writes into td
    return env, outputs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    env_gpu, gpu = run_fixed_actions("cuda")
    assert_state_on(env_gpu.state, env_gpu.device)
    _, cpu = run_fixed_actions("cpu")
    for step, (a, b) in enumerate(zip(cpu, gpu)):
        for key in a.keys(include_nested=True, leaves_only=True):  # every observation and reward, bit for bit
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, equal_nan=True, msg=f"step {step}: {key}")
    m = {k: v.cpu() for k, v in episode_metrics(env_gpu.state).items()}
    assert torch.isfinite(m["utilization"]).all()


def nearest_float32(value: Fraction) -> float:
    """The float32 nearest to `value` (never a tie for the ratios here)."""
    guess = np.float32(float(value))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    distances = sorted((abs(Fraction(float(c)) - value), float(c)) for c in candidates)
    assert distances[0][0] != distances[1][0], f"{value} is a tie"
    return distances[0][1]


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("observation", ["image", "compact"])
def test_normalised_observations_and_rewards_are_the_nearest_float32_of_their_ratio(monkeypatch, native, observation):
    """What makes the CPU and a GPU agree bit for bit (test_cuda_matches_cpu): every normalised value
    is the float32 nearest to its exact ratio of integers (a multiplication by a rounded reciprocal,
    as CUDA divides by a number, gives 9/10 one ulp above it), here with denominators 7, 6, 8 and 12
    whose reciprocals are all inexact but 8's."""
    monkeypatch.setenv("LIGHTNING_SCHED_NATIVE", native)
    cfg = SMALL.replace(max_track_since_new=7, objective="utilization", observation=observation)
    env = ClusterEnv(cfg, workload=small_jobs(6, seed=4, cfg=cfg), batch_size=[6])
    td, g = env.reset(), torch.Generator().manual_seed(3)
    u, cap = cfg.resource_units, cfg.max_track_since_new
    for _ in range(40):
        used0 = used_now(env.state, cfg)  # [B, R], before the step: the interval's reward reads it
        td["action"] = valid_random_actions(td, g)
        advance = (td["action"] == cfg.num_slots) & ~td["done"].view(-1)  # the time moves: a reward is paid
        td = env.step(td)["next"]
        s = env.state
        for b in range(6):
            arrived = int(s.num_arrived[b])
            since = min(int(s.time[b]) - int(s.arrival[b, arrived - 1]), cap) if arrived else cap
            assert float(td["since_new"][b, 0]) == nearest_float32(Fraction(since, cap))
            paid = Fraction(int(used0[b].sum()), cfg.num_resources * u) if advance[b] else Fraction(0)
            assert float(td["reward"][b, 0]) == nearest_float32(paid)
            row = td["observation"][b]
            if observation == "image":
                assert torch.equal(row[:, -1], row[:1, -1].expand(cfg.horizon))
                assert float(row[0, -1]) == float(td["since_new"][b, 0])
            else:
                free = u - td["used"][b].reshape(-1)
                want = [nearest_float32(Fraction(int(f), u)) for f in free]
                assert row[: free.numel()].tolist() == want
                slots = [Fraction(int(d), cfg.max_job_len) for d in td["slot_duration"][b]]
                slots = [[d, *(Fraction(int(q), cfg.max_job_units) for q in td["slot_demand"][b, m])]
                         for m, d in enumerate(slots)]
                assert row[free.numel(): -2].tolist() == [nearest_float32(x) for xs in slots for x in xs]
                assert float(row[-2]) == nearest_float32(Fraction(int(td["backlog"][b, 0]), cfg.backlog_size))
                assert float(row[-1]) == float(td["since_new"][b, 0])


def test_a_state_that_would_not_fit_in_memory_is_refused_before_allocating(monkeypatch):
    """The estimate names the sizes it grows with; the same env at a small batch is built."""
    cfg = ClusterConfig(observation="none")
    workload = DeepRMWorkload(load=0.7, simu_len=50)
    jobs = make_jobsets(workload, 4096, seed=0)
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(8 << 20))
    with pytest.raises(ConfigError, match=r"environment's state would need about .*batch=4096, jobs per jobset="):
        ClusterEnv(cfg, workload, batch_size=[4096])
    with pytest.raises(ConfigError, match=r"batch=4096"):
        init_state(jobs, cfg)
    ClusterEnv(cfg, workload, batch_size=[16]).reset()


def test_an_image_too_large_to_mean_anything_is_refused():
    with pytest.raises(ConfigError, match=r"observation='image' .*resource_units=1024.*use observation='none'"):
        ClusterConfig(resource_units=1024, max_job_units=1024)
    ClusterConfig(resource_units=1024, max_job_units=1024, observation="none")  # the structured state is fine


def test_compiled_step_falls_back_to_the_eager_step(monkeypatch):
    """Where torch.compile fails, compiled_step warns and returns step_state, the state untouched."""
    def no_compiler(fn, **options):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler")
        return fail

    monkeypatch.setattr(torch, "compile", no_compiler)
    state = init_state(small_jobs(3), SMALL)
    with pytest.warns(UserWarning, match="stepping eagerly"):
        assert compiled_step(state, SMALL) is step_state
    assert int(state.time.max()) == 0
    env = ClusterEnv(SMALL, workload=small_jobs(3), batch_size=[3], compile_step=True)
    with pytest.warns(UserWarning, match="stepping eagerly"):
        td = env.reset()
    td["action"] = torch.full((3,), SMALL.num_slots)
    assert env.step(td)["next", "time"].flatten().tolist() == [1, 1, 1]


@pytest.mark.parametrize("native", ["1", "0"])
def test_an_observation_held_is_never_written_again_and_one_let_go_is_reused(monkeypatch, native):
    """The env keeps the images' memory (allocator.Buffers): a step draws into a buffer nobody
    holds any more, never into one a user keeps, views or fed to a network whose graph is alive."""
    monkeypatch.setenv("LIGHTNING_SCHED_NATIVE", native)
    env = ClusterEnv(SMALL, workload=small_jobs(4, seed=1), batch_size=[4])
    td, g = env.reset(), torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(SMALL.image_width, 1)
    held, copies, pointers = {"tensor": td["observation"]}, {"tensor": td["observation"].clone()}, []
    for i in range(12):
        td["action"] = valid_random_actions(td, g)
        td = env.step(td)["next"]
        pointers.append(td["observation"].data_ptr())
        if i == 2:
            held["view"], copies["view"] = td["observation"][1], td["observation"][1].clone()
        if i == 4:  # the graph keeps the layer's input for the backward pass: the only reference to it
            output, copies["graph"] = layer(td["observation"]).sum(), td["observation"].clone()
    for key in ("tensor", "view"):
        assert torch.equal(held[key], copies[key]), key
    assert pointers[4] not in pointers[5:] and pointers[2] not in pointers[3:]
    output.backward()  # the graph still reads the observation it saw
    assert torch.allclose(layer.weight.grad, copies["graph"].sum((0, 1)).unsqueeze(0))
    assert len(set(pointers[5:])) == 2  # the others, let go, came back in turn


def test_a_rollout_that_would_not_fit_is_refused_before_it_allocates(monkeypatch):
    env = ClusterEnv(SMALL, workload=small_jobs(4, seed=1), batch_size=[4])
    step = env.step_bytes()
    assert step > 4 * SMALL.horizon * SMALL.image_width * 4  # the image's bytes and the rest
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(100 * step))
    with pytest.raises(ConfigError, match=r"ClusterEnv.rollout\(200\) would need .*max_steps=200, batch_size=4, "
                                          r"observation=image"):
        env.rollout(200)
    assert env.rollout(5).shape == (4, 5)


def test_a_step_before_reset_and_a_one_hot_action_are_one_line_each():
    env = ClusterEnv(SMALL, workload=small_jobs(4, seed=1), batch_size=[4])
    with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\): call env.reset\(\) first"):
        env.step(env.fake_tensordict())
    td = env.reset()
    td["action"] = torch.nn.functional.one_hot(torch.zeros(4, dtype=torch.long), SMALL.num_slots + 1)
    with pytest.raises(ConfigError, match=rf'"action" must be one slot index a row, 4 in all, got shape '
                                          rf'\[4, {SMALL.num_slots + 1}\] \(a one-hot action\? its argmax'):
        env.step(td)
