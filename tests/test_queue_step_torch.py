"""The queue step in torch ops (lightning_sched/queue/step_torch.py) against the spec: episodes worked
by hand (backfilling off and EASY), a job-by-job reading of the spec in plain Python stepped beside it
on random sequences and picks (every field equal after every step, plus the invariants: nobody starts
before it arrives, no more nodes than the cluster's, each job starts once, done rows frozen, a held job
starts at its shadow under EASY with exact estimates), and the visible window against RLScheduler's
alternation loop."""
from __future__ import annotations

import random
from dataclasses import fields

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lightning_sched.config import ConfigError
from lightning_sched.queue.config import QueueConfig
from lightning_sched.queue.state import ENDED, FUTURE, RUNNING, WAITING, init_state
from lightning_sched.queue.step_torch import step_torch, window_torch


def bsld(wait: int, run: int, threshold: float = 10.0) -> float:
    return max(1.0, (wait + run) / max(run, threshold))


def make_state(cfg: QueueConfig, *jobsets: list[tuple[int, int, int, int]]):
    """Rows of (submit, run, requested, processors) jobs -> their state at the first arrival."""
    table = torch.tensor(jobsets, dtype=torch.int64)
    columns = {name: table[..., c] for c, name in enumerate(("submit", "run", "requested", "processors"))}
    return init_state(columns, cfg.nodes, cfg.processors_per_node)


def play_fcfs(state, cfg: QueueConfig) -> list[torch.Tensor]:
    """Pick the first visible job (the oldest waiting one) until every row is done; per-step returns."""
    returns = []
    while not state.done.all():
        returns.append(step_torch(state, window_torch(state, cfg)[:, 0], cfg))
    return returns


# 4 nodes. Job 0 takes half the cluster until 100; job 1 (3 nodes) must wait for it; jobs 2 and 4 are
# short and small enough to run in the hole before 100 under EASY; job 3 takes the whole cluster.
HAND = [(0, 100, 100, 2), (10, 50, 50, 3), (20, 30, 30, 1), (30, 200, 200, 4), (40, 20, 20, 2), (200, 10, 10, 1)]


def test_hand_episode_backfill_off():
    # t=0 job 0 starts (free 2); job 1 arrives at 10, held: arrivals 2, 3, 4 at 20, 30, 40, then job 0 ends
    # at 100 -> job 1 at 100 (free 1), job 2 at 100 (free 0). Job 3 (4 nodes) waits for 2 (130) and 1
    # (150) -> 150. Job 4: job 5 arrives at 200, job 3 ends at 350 -> 350; job 5 fits beside it -> 350.
    cfg = QueueConfig(nodes=4, window=8, sequence_length=6)
    state = make_state(cfg, HAND)
    returns = play_fcfs(state, cfg)
    assert state.start[0].tolist() == [0, 100, 100, 150, 350, 350]
    expected = [bsld(0, 100), bsld(90, 50), bsld(80, 30), bsld(120, 200), bsld(310, 20), bsld(150, 10)]
    assert [r.item() for r in returns] == expected  # one start per step, nothing backfilled
    assert state.bsld_sum.item() == pytest.approx(1 + 2.8 + 110 / 30 + 1.6 + 16.5 + 16)
    assert state.status[0].tolist() == [ENDED, ENDED, ENDED, ENDED, RUNNING, RUNNING]
    assert (state.time.item(), state.free_nodes.item(), state.next_arrival.item()) == (350, 1, 6)


def test_hand_episode_backfill_easy():
    # Row 0 = HAND. Job 1 held at t=10 with shadow 100 (job 0's estimated end, 2 + 2 free >= 3). Passes:
    # t=20 job 2 (20 + 30 < 100) starts; t=50 (job 2 ended) job 4 (50 + 20 < 100) starts; job 0 ends
    # at 100 -> job 1. Job 3: shadow 150, starts at 150; job 5 arrives at 200, held until 350.
    # Row 1 = HAND with job 2 running 80 s: 20 + 80 == 100 is not < 100, so job 2 is not backfilled;
    # job 4 is, at 40 (ends 60). Jobs 1 and 2 start at 100; job 3 waits for both: shadow 180.
    longer = list(HAND)
    longer[2] = (20, 80, 80, 1)
    cfg = QueueConfig(nodes=4, window=8, sequence_length=6, backfill="easy")
    state = make_state(cfg, HAND, longer)
    returns = play_fcfs(state, cfg)
    assert state.start.tolist() == [[0, 100, 20, 150, 50, 350], [0, 100, 100, 180, 40, 380]]
    # the step that picks job 1 pays for the jobs backfilled around it, in start order
    assert returns[1][0].item() == bsld(0, 30) + bsld(10, 20) + bsld(90, 50)
    assert returns[1][1].item() == bsld(0, 20) + bsld(90, 50)
    assert returns[2][1].item() == bsld(80, 80)  # row 1 picks job 2 itself
    assert state.bsld_sum[0].item() == pytest.approx(1 + 2.8 + 1 + 1.6 + 1.5 + 16)
    assert state.bsld_sum[1].item() == pytest.approx(1 + 2.8 + 2 + 1.75 + 1 + 19)
    assert state.done.all()


def test_empty_cluster_waits_for_the_next_arrival():
    # job 0 ends at 10 with the queue empty: the clock goes to job 1's arrival at 100, not beyond
    cfg = QueueConfig(nodes=2, window=4, sequence_length=2)
    state = make_state(cfg, [(0, 10, 10, 1), (100, 5, 50, 2)])
    step_torch(state, torch.tensor([0]), cfg)
    assert (state.time.item(), state.free_nodes.item(), state.status[0].tolist()) == (100, 2, [ENDED, WAITING])
    assert step_torch(state, torch.tensor([1]), cfg).item() == 1.0
    assert state.done.item() and state.start[0].tolist() == [0, 100]


def test_bad_input_is_refused_naming_the_field():
    cfg = QueueConfig(nodes=4, processors_per_node=2, window=4, sequence_length=2)
    with pytest.raises(ConfigError, match="^processors: .* 9 processors, the cluster has 8"):
        make_state(cfg, [(0, 1, 1, 1), (0, 1, 1, 9)])
    with pytest.raises(ConfigError, match="^submit: "):
        make_state(cfg, [(5, 1, 1, 1), (3, 1, 1, 1)])
    state = make_state(cfg, [(0, 1, 1, 1), (9, 1, 1, 1)], [(0, 1, 1, 1), (0, 1, 1, 1)])
    with pytest.raises(ValueError, match="row 1 picked job 1, which is not waiting"):
        step_torch(state, torch.tensor([0, 1]), cfg)
    with pytest.raises(ValueError, match="row 0 picked job 7, which is not waiting"):
        step_torch(state, torch.tensor([7, 0]), cfg)


@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_an_inconsistent_state_is_refused_not_stepped(backfill):
    # nodes that no running job will ever free: the held job could never fit
    cfg = QueueConfig(nodes=4, window=4, sequence_length=2, backfill=backfill)
    state = make_state(cfg, [(0, 10, 10, 2), (5, 10, 10, 2)])
    state.free_nodes -= 3  # 1 node free, nothing running
    with pytest.raises(RuntimeError, match="inconsistent"):
        step_torch(state, torch.tensor([0]), cfg)


def test_no_decision_leaves_a_row_unchanged():
    cfg = QueueConfig(nodes=4, window=4, sequence_length=2)
    state = make_state(cfg, [(0, 1, 1, 1), (9, 1, 1, 1)], [(0, 1, 1, 1), (0, 1, 1, 1)])
    before = state.clone()
    added = step_torch(state, torch.tensor([-1, 0]), cfg)
    assert added.tolist() == [0.0, 1.0]
    assert all(torch.equal(getattr(before, f.name)[0], getattr(state, f.name)[0]) for f in fields(state))
    assert state.start_rank[1].tolist() == [0, -1] and state.status[1].tolist() == [RUNNING, WAITING]


class Reference:
    """One episode, job by job, exactly as /work/notes/queue_semantics.md reads (plain Python)."""

    def __init__(self, submit, run, requested, nodes, cfg: QueueConfig):
        self.submit, self.run, self.requested, self.nodes, self.cfg = submit, run, requested, nodes, cfg
        self.length = len(submit)
        self.status = [WAITING] + [FUTURE] * (self.length - 1)
        self.start, self.start_rank = [-1] * self.length, [-1] * self.length
        self.time, self.free_nodes, self.next_arrival, self.done, self.bsld_sum = submit[0], cfg.nodes, 1, False, 0.0

    def running(self) -> list[int]:
        return [k for k in range(self.length) if self.status[k] == RUNNING]

    def event(self) -> None:
        running = self.running()
        ending = min(running, key=lambda k: (self.start[k] + self.run[k], self.start_rank[k]), default=None)
        min_end = float("inf") if ending is None else self.start[ending] + self.run[ending]
        if self.next_arrival < self.length and self.submit[self.next_arrival] <= min_end:
            self.time = max(self.time, self.submit[self.next_arrival])
            self.status[self.next_arrival] = WAITING
            self.next_arrival += 1
        else:
            self.time = max(self.time, min_end)
            self.status[ending] = ENDED
            self.free_nodes += self.nodes[ending]

    def begin(self, k: int) -> float:
        value = bsld(self.time - self.submit[k], self.run[k], self.cfg.bsld_threshold)
        self.start_rank[k] = sum(s in (RUNNING, ENDED) for s in self.status)
        self.status[k], self.start[k] = RUNNING, self.time
        self.free_nodes -= self.nodes[k]
        return value

    def shadow(self, need: int) -> int:
        free = self.free_nodes
        for k in sorted(self.running(), key=lambda k: self.start[k] + self.requested[k]):
            free += self.nodes[k]
            if free >= need:
                return self.start[k] + self.requested[k]
        raise AssertionError("a job wider than the cluster")

    def step(self, j: int) -> float:
        if self.done:
            return 0.0
        added = 0.0
        if self.nodes[j] > self.free_nodes:
            shadow = self.shadow(self.nodes[j]) if self.cfg.backfill == "easy" else None
            while self.nodes[j] > self.free_nodes:
                if shadow is not None:
                    for k in [k for k in range(self.length) if self.status[k] == WAITING]:
                        if self.nodes[k] <= self.free_nodes and self.time + self.requested[k] < shadow:
                            added += self.begin(k)
                self.event()
        added += self.begin(j)
        self.bsld_sum += added  # the step's sum, added once (as the kernel does)
        if WAITING in self.status:
            return added
        if self.next_arrival == self.length:
            self.done = True
            return added
        while True:
            arrival = self.next_arrival
            self.event()
            if self.next_arrival > arrival:
                return added


def pick(ref: Reference, rng: random.Random) -> int:
    """A waiting job: any, or the widest (often held: backfilling's case)."""
    waiting = [k for k in range(ref.length) if ref.status[k] == WAITING]
    return rng.choice([rng.choice(waiting), max(waiting, key=lambda k: ref.nodes[k])])


@given(seed=st.integers(0, 2**31 - 1), backfill=st.sampled_from(["off", "easy"]),
       estimates=st.sampled_from(["exact", "over", "any"]))
def test_random_episodes_follow_the_spec(seed: int, backfill: str, estimates: str):
    rng = random.Random(seed)
    nodes = rng.randint(1, 8)
    cfg = QueueConfig(nodes=nodes, processors_per_node=rng.choice([1, 2]), window=rng.randint(1, 5),
                      sequence_length=8, backfill=backfill, bsld_threshold=rng.choice([1.0, 10.0]))
    rows, length = rng.randint(1, 4), rng.randint(1, 14)
    jobsets = []
    for _ in range(rows):
        submit, jobs = 0, []
        for _ in range(length):
            # equal submit times, run times on a grid (jobs ending in the same second), many small jobs
            submit += rng.choice([0, 0, 0, 5, 10, rng.randint(1, 30)])
            run = rng.choice([10, 20, rng.randint(1, 40)])
            requested = {"exact": run, "over": run + rng.randint(0, 30), "any": rng.randint(1, 60)}[estimates]
            jobs.append((submit, run, requested, rng.choice([1, rng.randint(1, cfg.processors)])))
        jobsets.append(jobs)
    state = make_state(cfg, *jobsets)
    refs = [Reference(*(state_column[b].tolist() for state_column in
                        (state.submit, state.run, state.requested, state.nodes)), cfg) for b in range(rows)]
    for _ in range(2 * length + 2):
        before = state.clone()
        picks = [pick(ref, rng) if not ref.done else rng.choice([-5, 0, length + 3])  # done rows: ignored
                 for ref in refs]
        shadows = [ref.shadow(ref.nodes[j]) if not ref.done and ref.nodes[j] > ref.free_nodes else None
                   for ref, j in zip(refs, picks)]
        added = step_torch(state, torch.tensor(picks), cfg)
        for b, (ref, j) in enumerate(zip(refs, picks)):
            assert added[b].item() == ref.step(j)
            assert state.status[b].tolist() == ref.status and state.start[b].tolist() == ref.start
            assert state.start_rank[b].tolist() == ref.start_rank
            assert (state.time[b].item(), state.free_nodes[b].item(), state.next_arrival[b].item(),
                    state.done[b].item(), state.bsld_sum[b].item()) == (
                    ref.time, ref.free_nodes, ref.next_arrival, ref.done, ref.bsld_sum)
            if before.done[b]:
                assert added[b].item() == 0.0
                assert all(torch.equal(getattr(before, f.name)[b], getattr(state, f.name)[b]) for f in fields(state))
            elif backfill == "easy" and estimates == "exact" and shadows[b] is not None:
                # backfilled jobs end before the shadow and the jobs it counted end at it: no delay
                assert state.start[b, j].item() == shadows[b]
        started = state.start >= 0
        running = state.status == RUNNING
        assert torch.equal(started, (state.status == RUNNING) | (state.status == ENDED))
        assert (state.start[started] >= state.submit[started]).all()  # nobody starts before it arrives
        assert (state.start[before.start >= 0] == before.start[before.start >= 0]).all()  # nor twice
        assert (state.free_nodes >= 0).all()
        assert torch.equal((state.nodes * running).sum(dim=1) + state.free_nodes,
                           torch.full_like(state.free_nodes, nodes))
        assert (state.time >= before.time).all()
        assert ((state.start + state.run)[running] >= state.time[running.nonzero()[:, 0]]).all()
        assert (state.start[state.status == ENDED] + state.run[state.status == ENDED] <=
                state.time[(state.status == ENDED).nonzero()[:, 0]]).all()
        if state.done.all():
            break
    assert state.done.all() and (state.start >= 0).all()  # every job started, exactly once (above)
    wait = (state.start - state.submit).double()
    expected = torch.maximum((wait + state.run) / state.run.double().clamp(min=cfg.bsld_threshold),
                             torch.tensor(1.0, dtype=torch.float64)).sum(dim=1)
    torch.testing.assert_close(state.bsld_sum, expected)


def alternation(jobs: list[tuple[int, int, int]], waiting: list[int], width: int) -> list[int]:
    """RLScheduler's window loop (HPCSimPickJobs.build_observation) over (requested, processors, submit)
    jobs, with this project's tie order (..., submit, index)."""
    if len(waiting) <= width:
        return waiting + [-1] * (width - len(waiting))
    sjf = sorted(waiting, key=lambda k: (jobs[k][0], jobs[k][2], k))[:width]
    small = sorted(waiting, key=lambda k: (jobs[k][1], jobs[k][2], k))[:width]
    visible, index = [], 0
    while index < width:
        if sjf[index] not in visible:
            visible.append(sjf[index])
        if len(visible) >= width:
            break
        if small[index] not in visible:
            visible.append(small[index])
        if len(visible) >= width:
            break
        index += 1
    return visible


def test_window_shows_the_queue_in_index_order_when_it_fits():
    cfg = QueueConfig(nodes=4, window=6, sequence_length=4)
    state = make_state(cfg, [(0, 5, 5, 1)] * 4, [(0, 5, 5, 1)] * 4)
    state.status[0] = torch.tensor([ENDED, WAITING, RUNNING, WAITING], dtype=torch.int8)
    state.status[1] = torch.tensor([WAITING] * 4, dtype=torch.int8)
    assert window_torch(state, cfg).tolist() == [[1, 3, -1, -1, -1, -1], [0, 1, 2, 3, -1, -1]]


@pytest.mark.parametrize("seed", range(6))
def test_window_alternates_sjf_and_smallest_beyond_its_width(seed: int):
    rng = random.Random(seed)
    rows, length = 5, 24
    cfg = QueueConfig(nodes=8, window=rng.randint(1, 7), sequence_length=length)
    jobsets, submit = [], 0
    for _ in range(rows):
        jobs = []
        for _ in range(length):
            submit += rng.choice([0, 0, 1])  # equal submit times: the index decides
            jobs.append((submit, 1, rng.randint(1, 5), rng.randint(1, 8)))  # equal keys: ties everywhere
        jobsets.append(jobs)
    state = make_state(cfg, *jobsets)
    state.status.copy_(torch.tensor([[rng.choice([FUTURE, WAITING, WAITING, WAITING, RUNNING, ENDED])
                                      for _ in range(length)] for _ in range(rows)], dtype=torch.int8))
    window = window_torch(state, cfg)
    for b in range(rows):
        waiting = [k for k in range(length) if state.status[b, k] == WAITING]
        jobs = [(state.requested[b, k].item(), state.processors[b, k].item(), state.submit[b, k].item())
                for k in range(length)]
        assert window[b].tolist() == alternation(jobs, waiting, cfg.window)


@pytest.mark.gpu
@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_cuda_steps_as_the_cpu_does(backfill: str):
    rng = random.Random(3)
    cfg = QueueConfig(nodes=32, window=8, sequence_length=64, backfill=backfill)
    jobsets, submit = [], 0
    for _ in range(48):
        jobs = []
        for _ in range(64):
            submit += rng.choice([0, 0, 7, rng.randint(1, 60)])
            run = rng.choice([30, rng.randint(1, 400)])
            jobs.append((submit, run, run + rng.choice([0, rng.randint(0, 100)]), rng.randint(1, 32)))
        jobsets.append(jobs)
    cpu = make_state(cfg, *jobsets)
    gpu = type(cpu)(**{f.name: getattr(cpu, f.name).cuda() for f in fields(cpu)})
    while not cpu.done.all():
        window = window_torch(cpu, cfg)
        assert torch.equal(window_torch(gpu, cfg).cpu(), window)
        slots = [rng.choice((row >= 0).nonzero()[:, 0].tolist() or [0]) for row in window]
        job = window[torch.arange(len(slots)), torch.tensor(slots)]
        assert torch.equal(step_torch(gpu, job.cuda(), cfg).cpu(), step_torch(cpu, job, cfg))
        assert all(torch.equal(getattr(gpu, f.name).cpu(), getattr(cpu, f.name)) for f in fields(cpu))
