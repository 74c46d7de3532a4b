"""Input outside SPEC.md's ranges is refused with a `ConfigError` that names the field and the
offending value; nothing is clipped silently."""
from __future__ import annotations

import re

import pytest
import torch

from lightning_sched import ClusterConfig, ClusterEnv, ConfigError, DeepRMWorkload, JobSet, WorkloadFamily

CFG = ClusterConfig(num_resources=2, resource_units=10, horizon=20, num_slots=5, max_job_len=15, max_job_units=10)


def both(field: str, value) -> str:
    """A regex matching a message that names `field` and, after it, `value`."""
    return rf"{re.escape(field)}.*{re.escape(str(value))}"


# ----- ClusterConfig ---------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, field, value", [
    ({"max_job_len": 21}, "max_job_len", 21),
    ({"max_job_units": 11}, "max_job_units", 11),
    ({"objective": "throughput"}, "objective", "'throughput'"),
    ({"observation": "pixels"}, "observation", "'pixels'"),
    ({"slo_slowdown": 0.5}, "slo_slowdown", 0.5),
    ({"slo_slowdown": float("nan")}, "slo_slowdown", "nan"),
    ({"slo_slowdown": True}, "slo_slowdown", True),
    ({"tardiness_weight": -0.1}, "tardiness_weight", -0.1),
    ({"tardiness_weight": float("inf")}, "tardiness_weight", "inf"),
    ({"num_slots": 2.5}, "num_slots", 2.5),
    ({"resource_units": "10"}, "resource_units", "'10'"),
    ({"num_resources": True}, "num_resources", True),
    ({"num_resources": 0}, "num_resources", 0),
    ({"horizon": 0, "max_job_len": 1}, "horizon", 0),
    ({"backlog_size": -3}, "backlog_size", -3),
    ({"max_time": 0}, "max_time", 0),
    ({"max_track_since_new": 0}, "max_track_since_new", 0),
    ({"max_time": 10**30}, "max_time", 10**30),  # an int past a float's range, and past the state's "never"
    ({"max_track_since_new": 1 << 40}, "max_track_since_new", 1 << 40),
])
def test_bad_cluster_config(changes, field, value):
    with pytest.raises(ConfigError, match=both(field, value)):
        CFG.replace(**changes)


def test_cluster_config_limits_are_inclusive():
    CFG.replace(max_job_len=20, max_job_units=10, slo_slowdown=1.0)
    ClusterConfig(horizon=62, max_job_len=62)
    CFG.replace(max_time=(1 << 40) - 1)  # the largest time the state tells from "never"


def test_a_huge_slo_slowdown_gives_deadlines_no_episode_reaches():
    # slo x duration beyond int64 wrapped to a deadline in the past: every job missed it
    jobs = JobSet(torch.tensor([[0, 3]]), torch.tensor([[2, 15]]), torch.ones(1, 2, 2, dtype=torch.long))
    for slo in (1e19, 1e300):
        deadlines = jobs.deadlines(slo)
        assert bool((deadlines > CFG.max_time).all()) and deadlines.tolist() == [[1 << 40, 3 + (1 << 40)]]
    assert jobs.deadlines(2.0).tolist() == [[4, 33]]


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ----- JobSet ------------------------------------------------------------------------------------------
def jobset(b=2, length=3, r=2, **override) -> JobSet:
    parts = {
        "arrival": torch.zeros(b, length, dtype=torch.long),
        "duration": torch.ones(b, length, dtype=torch.long),
        "demand": torch.ones(b, length, r, dtype=torch.long),
        "deadline": None,
    }
    parts.update(override)
    return JobSet(**parts)


def set_entry(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("make, field, value", [
    (lambda: jobset(arrival=set_entry(torch.zeros(2, 3, dtype=torch.long), (1, 2), -1)), "arrival", -1),
    (lambda: jobset(duration=set_entry(torch.ones(2, 3, dtype=torch.long), (0, 1), 16)), "duration", 16),
    (lambda: jobset(duration=set_entry(torch.ones(2, 3, dtype=torch.long), (0, 1), -2)), "duration", -2),
    (lambda: jobset(demand=set_entry(torch.ones(2, 3, 2, dtype=torch.long), (1, 0, 1), 11)), "demand", 11),
    (lambda: jobset(demand=set_entry(torch.ones(2, 3, 2, dtype=torch.long), (1, 0, 0), -1)), "demand", -1),
    (lambda: jobset(arrival=torch.full((2, 3), 4), duration=torch.full((2, 3), 3),
                    deadline=set_entry(torch.full((2, 3), 7), (1, 1), 6)), "deadline", 6),
])
def test_bad_jobset_values(make, field, value):
    jobs = make()
    with pytest.raises(ConfigError, match=both(f"JobSet.{field}", value)):
        jobs.validate(CFG)
    with pytest.raises(ConfigError, match=both(f"JobSet.{field}", value)):  # the env validates too
        ClusterEnv(CFG, workload=jobs, batch_size=[2])


def test_bad_jobset_value_message_names_the_position():
    jobs = jobset(duration=set_entry(torch.ones(2, 3, dtype=torch.long), (1, 2), 99))
    with pytest.raises(ConfigError, match=re.escape("JobSet.duration[1, 2] = 99")):
        jobs.validate(CFG)


def test_padding_jobs_may_have_any_demand_and_deadline_equal_to_finish_is_fine():
    jobs = jobset(duration=torch.tensor([[0, 2, 1], [1, 1, 1]]),
                  demand=set_entry(torch.ones(2, 3, 2, dtype=torch.long), (0, 0, 1), 50),  # padding job 0
                  deadline=torch.tensor([[0, 2, 1], [1, 1, 1]]))  # deadline = arrival + duration
    jobs.validate(CFG)


@pytest.mark.parametrize("make, field, shape", [
    (lambda: jobset(duration=torch.ones(2, 4, dtype=torch.long)), "duration", (2, 4)),
    (lambda: jobset(demand=torch.ones(2, 3, 3, dtype=torch.long)), "demand", (2, 3, 3)),
    (lambda: jobset(demand=torch.ones(2, 3, dtype=torch.long)), "demand", (2, 3)),
    (lambda: jobset(deadline=torch.ones(3, 3, dtype=torch.long)), "deadline", (3, 3)),
    (lambda: jobset(arrival=torch.zeros(6, dtype=torch.long)), "arrival", (6,)),
])
def test_bad_jobset_shapes(make, field, shape):
    with pytest.raises(ConfigError, match=both(f"JobSet.{field}", shape)):
        make().validate(CFG)


@pytest.mark.parametrize("field, dtype", [("arrival", torch.float32), ("duration", torch.float64),
                                          ("demand", torch.float32), ("deadline", torch.float32),
                                          ("duration", torch.bool)])
def test_bad_jobset_dtypes(field, dtype):
    good = jobset(deadline=torch.full((2, 3), 5, dtype=torch.long))
    setattr(good, field, getattr(good, field).to(dtype))
    with pytest.raises(ConfigError, match=both(f"JobSet.{field}", dtype)):
        good.validate(CFG)


def test_env_refuses_a_jobset_of_another_batch_size():
    with pytest.raises(ConfigError, match=r"2 jobsets.*batch_size is 3"):
        ClusterEnv(CFG, workload=jobset(b=2), batch_size=[3])


def test_env_refuses_a_non_workload():
    with pytest.raises(ConfigError, match="workload.*dict"):
        ClusterEnv(CFG, workload={"arrival": 1}, batch_size=[1])


def test_env_refuses_a_new_workload_with_other_job_columns():
    env = ClusterEnv(CFG, workload=jobset(b=2, length=3), batch_size=[2])
    with pytest.raises(ConfigError, match=r"4 job columns.*3"):
        env.set_workload(jobset(b=2, length=4))


def test_jobset_file_that_is_not_one(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"arrival": torch.zeros(1, 1)}, path)
    with pytest.raises(ConfigError, match=r"missing \['demand', 'duration'\]"):
        JobSet.load(path)


# ----- workloads -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("params, match", [
    ({"load": 1.9, "arrivals": "bernoulli"}, both("load", 1.9)),
    ({"load": 1.85, "arrivals": "bernoulli"}, both("load", 1.85)),  # just above 1.845
    ({"load": 0.0}, both("load", 0.0)),
    ({"load": -0.5}, both("load", -0.5)),
    ({"load": float("inf")}, both("load", "inf")),
    ({"arrivals": "uniform"}, both("arrivals", "'uniform'")),
    ({"short_len": (3, 1)}, both("short_len", "(3, 1)")),
    ({"long_len": (15, 10)}, both("long_len", "(15, 10)")),
    ({"dominant_units": (7, 5)}, both("dominant_units", "(7, 5)")),
    ({"other_units": (2, 1)}, both("other_units", "(2, 1)")),
    ({"short_len": (0, 3)}, both("short_len", "(0, 3)")),
    ({"dominant_units": (5, 11)}, both("dominant_units", "(5, 11)")),
    ({"short_len": 3}, both("short_len", 3)),
    ({"short_prob": 1.5}, both("short_prob", 1.5)),
    ({"simu_len": 0}, both("simu_len", 0)),
    ({"dominant_units": (0, 0), "other_units": (0, 0)}, both("dominant_units", "(0, 0)")),
])
def test_bad_deeprm_workload(params, match):
    with pytest.raises(ConfigError, match=match):
        DeepRMWorkload(**params)


def test_bernoulli_reaches_its_bound_and_auto_switches_to_poisson():
    assert DeepRMWorkload().max_bernoulli_load == pytest.approx(1.845)
    assert DeepRMWorkload(load=1.84, arrivals="bernoulli").process == "bernoulli"
    assert DeepRMWorkload(load=1.9).process == "poisson"  # 'auto'
    assert DeepRMWorkload(load=0.3, arrivals="poisson").process == "poisson"


@pytest.mark.parametrize("cfg_changes, params, match", [
    ({"max_job_len": 12}, {}, both("job length up to", 15) + r".*max_job_len=12"),
    ({"max_job_units": 8}, {}, both("demand up to", 10) + r".*max_job_units=8"),
    ({"num_resources": 3}, {}, r"num_resources=2.*3"),
])
def test_workload_must_fit_the_cluster(cfg_changes, params, match):
    cfg = CFG.replace(**cfg_changes)
    with pytest.raises(ConfigError, match=match):
        ClusterEnv(cfg, workload=DeepRMWorkload(**params), batch_size=[1])
    with pytest.raises(ConfigError, match=match.replace("job length", "WorkloadFamily job length")
                       .replace("demand up to", "WorkloadFamily demand up to")):
        ClusterEnv(cfg, workload=WorkloadFamily(long_len=((10, 10), (15, 15)), dominant_units=((5, 5), (10, 10))),
                   batch_size=[1])


@pytest.mark.parametrize("params, match", [
    ({"load": (1.0, 0.5)}, both("load", "(1.0, 0.5)")),
    ({"short_len": ((1, 1), (4, 2))}, both("short_len[1]", "(4, 2)")),
    ({"long_len": (10, 15)}, both("long_len[0]", 10)),
    ({"load": (0.5, 1.9), "arrivals": "bernoulli"}, both("load", 1.9)),
])
def test_bad_workload_family(params, match):
    with pytest.raises(ConfigError, match=match):
        WorkloadFamily(**params)


def test_simu_len_beyond_max_time_is_refused_naming_both():
    """Arrivals fall in 0..simu_len-1 and an episode ends at max_time: a later arrival would give a
    negative slowdown. simu_len = max_time is the largest that fits."""
    cfg = CFG.replace(max_time=40)
    for workload in (DeepRMWorkload(simu_len=41), WorkloadFamily(simu_len=41)):
        with pytest.raises(ConfigError, match=r"simu_len=41.*max_time=40"):
            ClusterEnv(cfg, workload=workload, batch_size=[1])
    DeepRMWorkload(simu_len=40).validate(cfg)


# ----- sizes that would not fit in memory ------------------------------------------------------------
def test_a_network_too_large_is_refused_before_it_is_built(monkeypatch):
    from lightning_sched.policies.networks import PolicySpec, make_policy

    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(100 << 20))
    # about 8M weights at resource_units 10000: built in 32 MiB, but training it needs about 220 MiB
    with pytest.raises(ConfigError, match=r"policy network.*would need.*ClusterConfig.resource_units=10000"):
        make_policy(PolicySpec(), ClusterConfig(resource_units=10000, observation="none"))
    make_policy(PolicySpec(), ClusterConfig())  # DeepRM's fits


def test_a_jobset_draw_too_large_is_refused_before_sampling(monkeypatch):
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(50 << 20))
    workload = DeepRMWorkload(load=1e4)  # about 270,000 job columns
    with pytest.raises(ConfigError, match=r"drawing the jobsets would need.*load=10000.0.*jobsets=2"):
        workload.sample(2, torch.Generator().manual_seed(0))
    family = WorkloadFamily(load=(1e4, 1e4))
    with pytest.raises(ConfigError, match=r"drawing the jobsets would need.*load=\(10000.0, 10000.0\)"):
        family.sample(2, torch.Generator().manual_seed(0))
    DeepRMWorkload(load=0.7).sample(2, torch.Generator().manual_seed(0))


# ----- JobSets out of the episode, empty, narrow or damaged --------------------------------------------
@pytest.mark.parametrize("arrival", [CFG.max_time, 2**62])
def test_a_job_arriving_at_or_after_max_time_is_left_out_of_the_metrics_and_counted(arrival):
    """SPEC accepts the jobset (the episode is truncated before the job arrives); the metrics cover
    the jobs that entered the episode, so none is negative, and the late one is counted."""
    from lightning_sched.evaluation import evaluate
    from lightning_sched.heuristics import make_heuristic

    jobs = jobset(arrival=set_entry(torch.zeros(2, 3, dtype=torch.long), (1, 2), arrival))
    jobs.validate(CFG)
    with pytest.raises(ConfigError, match=re.escape(f"JobSet.arrival[1, 2] = {arrival} must be < "
                                                    f"ClusterConfig.max_time={CFG.max_time}")):
        jobs.require_arrivals_in_episode(CFG)
    result = evaluate(make_heuristic("sjf", CFG), CFG, jobs)
    metrics = result.episodes
    assert metrics["num_not_arrived"].tolist() == [0, 1] and result.summary["jobs_not_arrived"] == 1
    assert (metrics["mean_slowdown"] >= 1).all() and (metrics["mean_completion_time"] >= 1).all()
    assert (metrics["slo_hit_rate"] <= 1).all()
    # the last step that is still in the episode: the job can run and finish at max_time
    jobs = jobset(b=1, length=2, arrival=torch.tensor([[0, CFG.max_time - 1]]))
    result = evaluate(make_heuristic("sjf", CFG), CFG, jobs)
    assert result.summary["unfinished_jobs"] == 0 and result.summary["mean_slowdown"] == 1.0


def test_an_empty_batch_is_refused():
    with pytest.raises(ConfigError, match=r"B=0"):
        jobset(b=0).validate(CFG)


def test_an_int32_jobset_runs_as_its_int64_copy():
    from lightning_sched.evaluation import evaluate
    from lightning_sched.heuristics import make_heuristic

    wide = DeepRMWorkload(load=0.9, simu_len=20).sample(3, torch.Generator().manual_seed(1))
    narrow = JobSet(wide.arrival.int(), wide.duration.int(), wide.demand.to(torch.int16))
    assert narrow.arrival.dtype == narrow.demand.dtype == torch.long
    cfg = ClusterConfig()
    assert (evaluate(make_heuristic("sjf", cfg), cfg, narrow).summary
            == evaluate(make_heuristic("sjf", cfg), cfg, wide).summary)


def damaged_files(tmp_path, source):
    """{kind: path}: `source` cut short, random bytes, a torch file of something else."""
    truncated, noise, other = tmp_path / "truncated.pt", tmp_path / "noise.pt", tmp_path / "tensor.pt"
    truncated.write_bytes(source.read_bytes()[:5000])
    noise.write_bytes(torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0),
                                    dtype=torch.uint8).numpy().tobytes())
    torch.save(torch.zeros(3), other)
    return {"truncated": truncated, "random bytes": noise, "a tensor": other}


def test_damaged_jobset_files_are_refused_naming_the_file(tmp_path):
    source = tmp_path / "jobs.pt"
    DeepRMWorkload().sample(50, torch.Generator().manual_seed(0)).save(source)
    for path in damaged_files(tmp_path, source).values():
        with pytest.raises(ConfigError, match=re.escape(f"{path}: not a JobSet file")):
            JobSet.load(path)
    with pytest.raises(ConfigError, match="no such file"):
        JobSet.load(tmp_path / "missing.pt")


def test_damaged_checkpoints_are_refused_naming_the_file(tmp_path):
    from pathlib import Path

    from lightning_sched.policies.checkpoints import load_policy

    source = Path(__file__).resolve().parent.parent / "checkpoints" / "reinforce_slowdown.ckpt"
    for path in damaged_files(tmp_path, source).values():
        with pytest.raises(ConfigError, match=re.escape(f"{path}: not a lightning_sched checkpoint")):
            load_policy(path)


def test_the_field_checks_refuse_bools_and_take_ints_of_any_size():
    from lightning_sched.config import is_finite, is_int, is_number
    assert is_int(3) and is_int(3, 3) and not is_int(3, 4) and not is_int(True) and not is_int(2.0)
    assert is_number(2.5) and is_number(2) and not is_number(False) and not is_number("2")
    assert is_finite(10 ** 400) and not is_finite(float("inf")) and not is_finite(float("nan")) and not is_finite(True)
