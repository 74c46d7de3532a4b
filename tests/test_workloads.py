"""Workloads: DeepRM's generator reaches the load it is asked for with the job mix it is asked for;
families draw per-row tasks inside their ranges; jobsets survive a file round trip; evaluation sets
are reproducible."""
from __future__ import annotations

import pytest
import torch

from lightning_sched import ClusterConfig, DeepRMWorkload, JobSet, WorkloadFamily
from lightning_sched.evaluation import make_jobsets


def empirical_load(jobs: JobSet, units: int, simu_len: int) -> torch.Tensor:
    """Offered load per resource: sum over jobs of d * q[r] / (U * simu_len), averaged over jobsets. [R]."""
    work = (jobs.duration.unsqueeze(-1) * jobs.demand).sum(1).double()  # [B, R]
    return (work / (units * simu_len)).mean(0)


@pytest.mark.parametrize("arrivals, load", [("bernoulli", 0.3), ("bernoulli", 0.9), ("bernoulli", 1.8),
                                            ("poisson", 0.5), ("poisson", 1.2), ("poisson", 2.5),
                                            ("auto", 1.9)])
def test_empirical_load_matches_the_requested_load(arrivals, load):
    workload = DeepRMWorkload(load=load, arrivals=arrivals)
    jobs = workload.sample(3000, torch.Generator().manual_seed(1))
    got = empirical_load(jobs, workload.resource_units, workload.simu_len)
    assert got.shape == (2,)
    assert torch.allclose(got, torch.full_like(got, load), rtol=0.03), (arrivals, load, got.tolist())
    # the expected number of jobs is rate * simu_len
    jobs_per_set = jobs.num_jobs.double().mean().item()
    assert jobs_per_set == pytest.approx(workload.rate * workload.simu_len, rel=0.03)


def test_empirical_load_of_a_non_default_mix_and_cluster():
    cfg = ClusterConfig(num_resources=3, resource_units=12, horizon=25, max_job_len=20, max_job_units=12)
    workload = DeepRMWorkload.for_cluster(cfg, load=0.8, short_prob=0.5, simu_len=40)
    jobs = workload.sample(3000, torch.Generator().manual_seed(2))
    got = empirical_load(jobs, 12, 40)
    assert torch.allclose(got, torch.full_like(got, 0.8), rtol=0.03), got.tolist()


def test_bernoulli_arrivals_are_one_per_step_at_most_and_inside_simu_len():
    workload = DeepRMWorkload(load=1.8, arrivals="bernoulli", simu_len=30)
    jobs = workload.sample(200, torch.Generator().manual_seed(3))
    assert jobs.max_jobs == 30
    real = jobs.duration > 0
    arrivals = jobs.arrival[real]
    assert arrivals.min() >= 0 and arrivals.max() < 30
    for b in range(200):
        times = jobs.arrival[b][real[b]]
        assert len(times.unique()) == len(times), "two Bernoulli jobs in one step"
    # padding is all-zero
    assert (jobs.demand[~real] == 0).all() and (jobs.arrival[~real] == 0).all()


def test_poisson_arrivals_stay_inside_simu_len_and_can_share_a_step():
    workload = DeepRMWorkload(load=3.0, arrivals="poisson", simu_len=20)
    jobs = workload.sample(200, torch.Generator().manual_seed(4))
    real = jobs.duration > 0
    assert jobs.arrival[real].max() < 20 and jobs.arrival.min() >= 0
    assert jobs.max_jobs == workload.max_jobs > workload.rate * 20
    shared = any(len(jobs.arrival[b][real[b]].unique()) < int(real[b].sum()) for b in range(200))
    assert shared
    # within a jobset, Poisson jobs come in arrival order
    arrival = torch.where(real, jobs.arrival, 10**6)
    assert (arrival[:, 1:] >= arrival[:, :-1]).all()


@pytest.mark.parametrize("short_prob", [0.8, 0.3])
def test_job_mix_is_respected(short_prob):
    workload = DeepRMWorkload(load=1.0, short_prob=short_prob, short_len=(1, 3), long_len=(10, 15),
                              dominant_units=(5, 10), other_units=(1, 2))
    jobs = workload.sample(2000, torch.Generator().manual_seed(5))
    real = jobs.duration > 0
    d = jobs.duration[real]
    q = jobs.demand[real]  # [N, R]
    short = d <= 3
    assert ((d >= 1) & (d <= 3) | (d >= 10) & (d <= 15)).all(), "a duration outside both ranges"
    assert short.double().mean().item() == pytest.approx(short_prob, abs=0.01)
    assert set(d[short].tolist()) == {1, 2, 3} and set(d[~short].tolist()) == set(range(10, 16))
    # one dominant resource per job, uniform over resources; the others in other_units
    dominant = q >= 5
    assert (dominant.sum(-1) == 1).all()
    assert set(q[dominant].tolist()) == set(range(5, 11))
    assert set(q[~dominant].tolist()) == {1, 2}
    share = dominant.double().mean(0)
    assert torch.allclose(share, torch.full_like(share, 0.5), atol=0.01)
    # uniform inside the ranges
    counts = torch.bincount(d[short], minlength=4)[1:].double()
    assert (counts / counts.sum() - 1 / 3).abs().max() < 0.025


def test_for_cluster_scales_the_ranges():
    cfg = ClusterConfig(num_resources=1, resource_units=6, horizon=8, max_job_len=8, max_job_units=5)
    workload = DeepRMWorkload.for_cluster(cfg, load=0.5)
    assert workload.num_resources == 1 and workload.resource_units == 6
    assert workload.long_len[1] <= 8 and workload.dominant_units[1] <= 5
    workload.validate(cfg)
    jobs = workload.sample(100, torch.Generator().manual_seed(0))
    jobs.validate(cfg)


def test_sample_on_a_device_and_with_the_default_generator():
    jobs = DeepRMWorkload().sample(4, device="cpu")
    assert jobs.arrival.device.type == "cpu" and jobs.arrival.dtype == torch.int64
    assert jobs.demand.shape == (4, jobs.max_jobs, 2)


# ----- WorkloadFamily ------------------------------------------------------------------------------
FAMILY = WorkloadFamily(load=(0.3, 1.5), short_prob=(0.6, 0.9), short_len=((1, 1), (2, 4)),
                        long_len=((8, 10), (12, 15)), dominant_units=((3, 5), (7, 10)), other_units=((0, 1), (1, 3)))


def test_family_draws_parameters_inside_the_ranges():
    tasks = FAMILY.draw(300, torch.Generator().manual_seed(6))
    assert len(tasks) == 300
    loads = [t.load for t in tasks]
    assert all(0.3 <= x <= 1.5 for x in loads) and max(loads) - min(loads) > 1.0
    assert all(0.6 <= t.short_prob <= 0.9 for t in tasks)
    for name in ("short_len", "long_len", "dominant_units", "other_units"):
        (lo_lo, lo_hi), (hi_lo, hi_hi) = getattr(FAMILY, name)
        for t in tasks:
            lo, hi = getattr(t, name)
            assert lo_lo <= lo <= lo_hi and lo <= hi <= max(lo, hi_hi), (name, lo, hi)
        assert len({getattr(t, name) for t in tasks}) > 1, f"{name} never varies"


def test_family_sample_rows_follow_their_own_task():
    """sample() draws the tasks first from the same generator: row b is a jobset of task b."""
    seed, batch = 7, 64
    tasks = FAMILY.draw(batch, torch.Generator().manual_seed(seed))
    jobs = FAMILY.sample(batch, torch.Generator().manual_seed(seed))
    assert jobs.max_jobs == FAMILY.max_jobs, "a fixed number of job columns"
    assert FAMILY.max_jobs >= FAMILY.simu_len
    for b, task in enumerate(tasks):
        real = jobs.duration[b] > 0
        d, q = jobs.duration[b][real], jobs.demand[b][real]
        (s_lo, s_hi), (l_lo, l_hi) = task.short_len, task.long_len
        assert (((d >= s_lo) & (d <= s_hi)) | ((d >= l_lo) & (d <= l_hi))).all(), b
        top = q.max(-1).values
        assert ((top >= task.dominant_units[0]) & (top <= max(task.dominant_units[1], task.other_units[1]))).all(), b
        assert (jobs.arrival[b][real] < FAMILY.simu_len).all()
    # the number of jobs follows each row's load: more load, more jobs (on average)
    rate = torch.tensor([t.rate for t in tasks])
    n = jobs.num_jobs.double()
    assert torch.corrcoef(torch.stack([rate, n]))[0, 1] > 0.8


def test_family_has_fixed_columns_across_seeds_and_batches():
    shapes = {FAMILY.sample(b, torch.Generator().manual_seed(s)).arrival.shape[1] for b in (1, 5) for s in range(4)}
    assert shapes == {FAMILY.max_jobs}


# ----- files and evaluation sets ----------------------------------------------------------------------
@pytest.mark.parametrize("with_deadline", [False, True])
def test_jobset_save_load_round_trip(tmp_path, with_deadline):
    jobs = DeepRMWorkload(load=0.8).sample(5, torch.Generator().manual_seed(8))
    if with_deadline:
        jobs.deadline = jobs.arrival + 3 * jobs.duration
    path = tmp_path / "eval.pt"
    jobs.save(path, workload=DeepRMWorkload(load=0.8).to_dict(), seed=8)
    back = JobSet.load(path)
    for field in ("arrival", "duration", "demand"):
        a, b = getattr(jobs, field), getattr(back, field)
        assert torch.equal(a, b) and a.dtype == b.dtype, field
    if with_deadline:
        assert torch.equal(back.deadline, jobs.deadline)
    else:
        assert back.deadline is None
    meta = torch.load(path, weights_only=True)["meta"]
    assert meta["seed"] == 8 and meta["workload"]["load"] == 0.8


def test_make_jobsets_same_seed_same_jobsets():
    workload = DeepRMWorkload(load=0.9)
    a, b = make_jobsets(workload, 20, seed=11), make_jobsets(workload, 20, seed=11)
    c = make_jobsets(workload, 20, seed=12)
    for field in ("arrival", "duration", "demand"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert not torch.equal(a.duration, c.duration)
    assert a.arrival.device.type == "cpu"
    # the global RNG plays no part
    torch.manual_seed(123)
    d = make_jobsets(workload, 20, seed=11)
    assert torch.equal(a.demand, d.demand)


def test_jobset_helpers():
    jobs = DeepRMWorkload(load=0.5, simu_len=10).sample(3, torch.Generator().manual_seed(9))
    twice = jobs.repeat_interleave(2)
    assert twice.batch_size == 6
    assert torch.equal(twice.arrival[2], jobs.arrival[1]) and torch.equal(twice.arrival[3], jobs.arrival[1])
    short = JobSet(jobs.arrival[:, :4], jobs.duration[:, :4], jobs.demand[:, :4])
    both = JobSet.cat([jobs, short])
    assert both.batch_size == 6 and both.max_jobs == jobs.max_jobs
    assert (both.duration[3:, 4:] == 0).all() and torch.equal(both.num_jobs[3:], short.num_jobs)
    # default deadlines: a + floor(slo * d)
    assert torch.equal(jobs.deadlines(1.5), jobs.arrival + (3 * jobs.duration) // 2)


def test_a_family_checks_both_ends_of_its_ranges_on_its_own_sizes():
    from lightning_sched import ConfigError

    # a small cluster's family: its own unit ranges, not DeepRM's defaults, bound the check
    small = WorkloadFamily(resource_units=5, dominant_units=((2, 3), (4, 5)), other_units=((0, 1), (1, 2)))
    assert small.draw(3, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match=r"WorkloadFamily\(load=\(-0.5, 1.5\).*load must be a finite number > 0, "
                                          r"got -0.5"):
        WorkloadFamily(load=(-0.5, 1.5))
