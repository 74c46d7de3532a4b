"""`evaluation.compare`: several policies on the same jobsets give what `evaluate` gives each of them
alone, and the comparison's best policy and paired differences read those results."""
from __future__ import annotations

import pytest
import torch

from lightning_sched import ClusterConfig, DeepRMWorkload, JobSet
from lightning_sched.evaluation import compare, evaluate, make_jobsets, mean_ci95, paired_difference, t95
from lightning_sched.heuristics import make_heuristic


@pytest.fixture(scope="module")
def setup():
    cfg = ClusterConfig(observation="none")
    jobs = make_jobsets(DeepRMWorkload(load=1.1, simu_len=20), 5, 3)
    return cfg, jobs


def test_compare_matches_evaluating_each_policy(setup):
    cfg, jobs = setup
    case = compare({"tetris": make_heuristic("tetris", cfg), "sjf": make_heuristic("sjf", cfg)}, cfg, jobs)
    assert list(case.results) == ["tetris", "sjf"]
    for name in ("tetris", "sjf"):
        alone = evaluate(make_heuristic(name, cfg), cfg, jobs)
        assert case.results[name].summary == alone.summary
        assert torch.equal(case.results[name].job_slowdown.nan_to_num(-1), alone.job_slowdown.nan_to_num(-1))
        s = alone.summary
        assert case.mean_ci(name, "slo_hit_rate") == (s["slo_hit_rate"], s["slo_hit_rate_ci95"])
    assert case.minus("sjf", "tetris") == paired_difference(case.results["sjf"], case.results["tetris"])
    diff, _ = case.minus("sjf", "tetris", "slo_hit_rate")
    assert diff == pytest.approx(case.mean_ci("sjf", "slo_hit_rate")[0] - case.mean_ci("tetris", "slo_hit_rate")[0])


def test_best_is_the_lowest_slowdown_and_the_highest_slo_hit_rate(setup):
    cfg, jobs = setup
    policies = {h: make_heuristic(h, cfg, **({"generator": torch.Generator().manual_seed(0)} if h == "random" else {}))
                for h in ("random", "tetris", "edf")}
    case = compare(policies, cfg, jobs)
    slowdown = {name: case.mean_ci(name)[0] for name in policies}
    slo = {name: case.mean_ci(name, "slo_hit_rate")[0] for name in policies}
    assert case.best() == min(slowdown, key=slowdown.get) != "random"
    assert case.best(metric="slo_hit_rate") == max(slo, key=slo.get)
    assert case.best(["random"]) == "random"


def test_a_sampled_policy_goes_on_from_where_it_left_off(setup):
    """compare keeps a policy's state: the same generator twice gives other actions the second time,
    a fresh one the same numbers."""
    cfg, jobs = setup

    def random(seed=0):
        return make_heuristic("random", cfg, generator=torch.Generator().manual_seed(seed))

    shared = {"random": random()}
    first, second = compare(shared, cfg, jobs), compare(shared, cfg, jobs)
    again = compare({"random": random()}, cfg, jobs)
    assert again.results["random"].summary == first.results["random"].summary
    assert second.results["random"].summary != first.results["random"].summary


def test_the_t_quantiles_are_students_beyond_the_table():
    # two-sided 95% quantiles of Student's t (R: qt(0.975, df)); the normal 1.96 beyond 30 samples made
    # the intervals of 31-100 samples 1-4% too narrow
    exact = {1: 12.706205, 30: 2.042272, 31: 2.039513, 49: 2.009575, 99: 1.984217, 1999: 1.961151}
    for df, quantile in exact.items():  # the table to its 3 decimals, the series to 6
        assert abs(t95(df + 1) - quantile) < (5e-4 if df <= 30 else 2e-6), df
    _, half = mean_ci95(torch.arange(40, dtype=torch.float64))
    assert half == pytest.approx(2.022691 * torch.arange(40.0).std().item() / 40 ** 0.5, rel=1e-6)


def test_a_job_that_never_arrived_is_not_also_counted_unfinished():
    cfg = ClusterConfig(observation="none", max_time=10)
    # job 0 runs 2 steps from 0; job 1 arrives at 12, after max_time; job 2 (3 steps from 9) is cut off
    jobs = JobSet(torch.tensor([[0, 12, 9]]), torch.tensor([[2, 2, 3]]), torch.ones(1, 3, 2, dtype=torch.long))
    s = evaluate(make_heuristic("sjf", cfg), cfg, jobs, episodes=2).summary
    assert (s["num_jobs"], s["jobs_not_arrived"], s["unfinished_jobs"]) == (3, 1, 1)


def test_a_jobset_without_jobs_has_no_metrics_not_a_utilization_of_zero():
    cfg = ClusterConfig(observation="none", max_time=10)
    empty = JobSet(torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long),
                   torch.zeros(2, 0, 2, dtype=torch.long))
    episodes = evaluate(make_heuristic("sjf", cfg), cfg, empty).episodes
    assert all(bool(torch.isnan(episodes[m]).all()) for m in ("mean_slowdown", "utilization", "makespan"))
