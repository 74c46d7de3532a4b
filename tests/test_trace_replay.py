"""A cluster's own log end to end: windows that start from the log's state, the cluster proposed for
a log, and the recipe (fit, adapt, evaluate, figure) on a tiny log, as a user runs it."""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import conftest
import pytest
import torch
from conftest import script_main

from lightning_sched import ClusterConfig, JobSet
from lightning_sched.cli import add_cluster_flags, add_trace_flags, add_workload_flags, setup_from_args
from lightning_sched.config import ConfigError
from lightning_sched.deeprm.cluster import init_state
from lightning_sched.deeprm.state import used_rows
from lightning_sched.evaluation import evaluate
from lightning_sched.heuristics import make_heuristic
from lightning_sched.policies.checkpoints import read_record
from lightning_sched.traces import JobRules, TraceWorkload, fit_running, propose_cluster, read_trace
from lightning_sched.traces.files import TraceError, read_swf
from lightning_sched.traces.synthesis import write_swf

ROOT = Path(__file__).resolve().parent.parent


def swf_line(number, submit, wait, run, procs, memory=-1):
    return f"{number} {submit} {wait} {run} {procs} -1 {memory} {procs} -1 -1 1 1 1 1 1 1 -1 -1"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# One processor resource of 16, one step a minute. Recorded schedule, in steps (start = submit + wait):
#   job 1: submitted 0, starts 0, runs 10 steps, 4 processors
#   job 2: submitted 1, starts 1, runs 3 steps, 8 processors         (over before step 5)
#   job 3: submitted 2, starts 7 (waited 5), runs 2 steps, 8 processors
#   job 4: submitted 3, starts 3, runs 6 steps, 6 processors         (ends at 9)
#   job 5: submitted 5, starts 5, runs 1 step, 2 processors
#   job 6: submitted 10, starts 10, runs 1 step, 1 processor
# At step 5: jobs 1 and 4 run (4 + 6 processors until steps 10 and 9), job 3 waits, jobs 5 and 6 arrive.
STATE_LOG = ["; MaxProcs: 16", swf_line(1, 0, 0, 600, 4), swf_line(2, 60, 0, 180, 8), swf_line(3, 120, 300, 120, 8),
             swf_line(4, 180, 0, 360, 6), swf_line(5, 300, 0, 60, 2), swf_line(6, 600, 0, 60, 1)]
ONE_RESOURCE = ClusterConfig(num_resources=1, resource_units=16, max_job_units=16, horizon=12, max_job_len=10,
                             observation="none")


def state_workload(tmp_path, **params) -> TraceWorkload:
    return TraceWorkload.for_cluster(ONE_RESOURCE, write(tmp_path / "state.swf", STATE_LOG), 60,
                                     resources=("processors",), simu_len=10, **params)


def test_a_window_starts_with_the_jobs_the_log_had_running_and_waiting(tmp_path):
    workload = state_workload(tmp_path)
    # before a window is drawn the line says what windows carry, not counts of zero
    assert workload.report.line().endswith("windows start from the log, carrying the jobs running at each start "
                                           "(outside the metrics)")
    jobs = workload.jobset(torch.tensor([5]))
    assert "carrying {'windows': 1, 'running': 2" in workload.report.line()
    # waiting job 3 first (arrival 0), then the window's arrivals: job 5 at 0, job 6 at 5
    real = jobs.duration[0] > 0
    assert jobs.arrival[0][real].tolist() == [0, 0, 5]
    assert jobs.duration[0][real].tolist() == [2, 1, 1]
    assert jobs.demand[0][real].flatten().tolist() == [8, 2, 1]
    # running jobs 1 and 4 hold 4 and 6 units for the 5 and 4 steps they have left
    left = jobs.running_left[0]
    assert sorted(zip(left[left > 0].tolist(), jobs.running_demand[0][left > 0].flatten().tolist())) == [(4, 6), (5, 4)]
    assert workload.report.carried == {"windows": 1, "running": 2, "running_over_capacity": 0, "waiting": 1}
    # the simulator starts with exactly that occupancy, and the episode's jobs are the three above
    state = init_state(jobs.validate(ONE_RESOURCE), ONE_RESOURCE)
    assert used_rows(state, ONE_RESOURCE)[0, :, 0].tolist() == [10, 10, 10, 10, 4, 0, 0, 0, 0, 0, 0, 0]
    assert int(state.num_jobs[0]) == 3
    # job 3 (8 units) does not fit beside the 10 running ones; at step 4 job 4 has left: 4 + 8 <= 16
    assert state.slot_offset[0, 0].item() == 4
    result = evaluate(make_heuristic("sjf", ONE_RESOURCE), ONE_RESOURCE, jobs)
    assert result.summary["num_jobs"] == 3  # running jobs are no part of the metrics


def test_the_empty_start_keeps_the_old_windows(tmp_path):
    jobs = state_workload(tmp_path, start_state="empty").jobset(torch.tensor([5]))
    real = jobs.duration[0] > 0
    assert jobs.arrival[0][real].tolist() == [0, 5] and jobs.running_left is None
    state = init_state(jobs.validate(ONE_RESOURCE), ONE_RESOURCE)
    assert int(used_rows(state, ONE_RESOURCE).sum()) == 0


def test_the_most_jobs_of_a_window_count_the_waiting_ones(tmp_path):
    starts = torch.arange(0, 11)
    log = state_workload(tmp_path)
    empty = state_workload(tmp_path, start_state="empty")
    # job 3 waits at steps 3..7: those windows hold it beside their arrivals
    assert log.jobset(starts).num_jobs.tolist() == [5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 1]
    assert empty.jobset(starts).num_jobs.tolist() == [5, 5, 4, 3, 2, 2, 1, 1, 1, 1, 1]
    assert log.max_jobs == 5


def test_running_jobs_that_would_overfill_the_cluster_are_left_out_and_counted(tmp_path):
    assert fit_running(torch.tensor([[3], [2], [1]]), 4).tolist() == [True, False, False]
    # time compressed twice: at step 2 jobs 1, 2 and 4 overlap (4 + 8 + 6 > 16): job 4, started last, is left out
    workload = state_workload(tmp_path, time_compression=2.0)
    jobs = workload.jobset(torch.tensor([2]))
    left = jobs.running_left[0]
    assert sorted(jobs.running_demand[0][left > 0].flatten().tolist()) == [4, 8]
    assert workload.report.carried == {"windows": 1, "running": 2, "running_over_capacity": 1, "waiting": 1}
    cfg = ClusterConfig(num_resources=1, resource_units=4, max_job_units=4, observation="none")
    jobs = JobSet(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long),
                  torch.ones(1, 1, 1, dtype=torch.long),
                  running_left=torch.tensor([[2, 3]]), running_demand=torch.tensor([[[3], [2]]]))
    with pytest.raises(ConfigError, match=r"running_demand.sum\(jobs\).* exceeds resource_units=4"):
        jobs.validate(cfg)


def test_without_running_jobs_the_start_is_the_empty_cluster():
    cfg = ClusterConfig(observation="none")
    jobs = JobSet(torch.tensor([[0, 1]]), torch.tensor([[2, 3]]), torch.tensor([[[1, 1], [2, 0]]]))
    carried = JobSet(jobs.arrival, jobs.duration, jobs.demand, running_left=torch.zeros(1, 3, dtype=torch.long),
                     running_demand=torch.zeros(1, 3, 2, dtype=torch.long))
    a, b = init_state(jobs, cfg), init_state(carried, cfg)
    assert torch.equal(a.used_bits, b.used_bits) and torch.equal(a.slot_offset, b.slot_offset)


# ----- the proposed cluster ----------------------------------------------------------------------
def test_the_proposed_cluster_keeps_all_but_under_one_percent_of_the_jobs_whole(tmp_path):
    # 200 jobs: 100 of 30 s, 99 of 3000 s, 1 of 25 h; 64 processors from the header
    lines = ["; MaxProcs: 64"] + [swf_line(j + 1, 60 * j, 0, 30 if j < 100 else 3000, 1 + j % 64)
                                  for j in range(199)] + [swf_line(200, 60 * 200, 0, 90000, 64)]
    path = write(tmp_path / "sizes.swf", lines)
    proposal = propose_cluster(read_trace(path), resources=("processors",))
    c = proposal.cluster
    # 1 of 200 jobs may be clipped (fewer than 1%): the 3000 s jobs must fit; 15 s steps would need 200,
    # more than the 128-step horizon; 30 s steps need 100
    assert proposal.seconds_per_step == 30 and c.max_job_len == 100 and c.horizon == 128
    assert (c.resource_units, c.max_job_units) == (64, 64) and proposal.unit == {"processors": 1.0}
    assert proposal.clipped_length == 1 and proposal.clipped_fraction < 0.01
    assert "--resource_units 64" in proposal.describe() and "--seconds_per_step 30" in proposal.describe()
    # a divisor: 16 units of 4 processors; a step length given is kept
    other = propose_cluster(read_trace(path), resources=("processors",), resource_units=16, seconds_per_step=60)
    assert other.unit == {"processors": 4.0} and other.cluster.max_job_len == 50
    # replaying at the proposal clips exactly what it said
    workload = TraceWorkload.for_cluster(c, path, proposal.seconds_per_step, resources=("processors",))
    assert workload.report.clipped == {"length": 1, "demand": 0}


def test_a_missing_capacity_names_the_command_line_flag(tmp_path):
    path = write(tmp_path / "bare.swf", [swf_line(1, 0, 0, 60, 4)])
    with pytest.raises(TraceError, match=r"--trace_capacity processors=N") as error:
        propose_cluster(read_trace(path), resources=("processors",))
    assert "capacity={" not in str(error.value)


def test_jobs_larger_than_the_capacity_name_both_ways_out(tmp_path):
    # 5 jobs of 8 processors and one of 32 on a 16-processor log: 1 of 6 cut is more than 1%
    lines = ["; MaxProcs: 16"] + [swf_line(j + 1, 60 * j, 0, 60, 8) for j in range(5)] + [swf_line(6, 400, 0, 60, 32)]
    path = write(tmp_path / "wide.swf", lines)
    with pytest.raises(TraceError, match=r"1 of 6 jobs ask for more than the capacity .* raise --trace_capacity, "
                                         r"or --max_clipped to let that many be cut \(--oversize drop"):
        propose_cluster(read_trace(path), resources=("processors",))
    assert propose_cluster(read_trace(path), resources=("processors",), max_clipped=0.2).clipped_demand == 1


def test_the_proposal_sizes_the_cluster_by_the_jobs_the_rules_keep(tmp_path):
    # 100 completed jobs of 60 s and a failed one (status 0) of 10 h
    lines = ["; MaxProcs: 8"] + [swf_line(j + 1, 60 * j, 0, 60, 1) for j in range(100)]
    lines.append("101 6000 0 36000 8 -1 -1 8 -1 -1 0 1 1 1 1 1 -1 -1")
    trace = read_trace(write(tmp_path / "failed.swf", lines))
    completed = propose_cluster(trace, resources=("processors",))  # JobRules(): completed jobs only
    every = propose_cluster(trace, JobRules(statuses=None), resources=("processors",))
    assert (completed.jobs, completed.clipped_length) == (100, 0)
    assert (every.jobs, every.clipped_length) == (101, 1)  # 1 of 101 may be clipped: the same 1 s steps
    assert completed.cluster == every.cluster and completed.seconds_per_step == every.seconds_per_step == 1


def test_the_test_splits_jobs_never_size_the_proposed_cluster(tmp_path, capsys):
    # 100 jobs of 60 s, one a minute; the last 10 (the last tenth of the time span) run 3000 s
    lines = ["; MaxProcs: 8"] + [swf_line(j + 1, 60 * j, 0, 60 if j < 90 else 3000, 1) for j in range(100)]
    path = write(tmp_path / "late_long.swf", lines)
    whole = propose_cluster(read_trace(path), resources=("processors",))
    train = propose_cluster(read_trace(path), resources=("processors",), sized_share=0.75)
    assert whole.seconds_per_step == 30 and train.seconds_per_step == 1  # 3000 s in 128 steps; 60 s in 60
    assert train.jobs == 75 and "first 75% of the log's time span" in train.describe()
    ap = argparse.ArgumentParser()
    for add in (add_workload_flags, add_trace_flags, add_cluster_flags):
        add(ap)
    for split in ("train", "test", "all"):  # one cluster whatever split a command replays
        args = ap.parse_args(["--trace", str(path), "--fit_cluster", "--trace_split", split])
        assert setup_from_args(args).trace.seconds_per_step == 1
        assert train.describe() in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ap.parse_args(["--trace", str(path), "--test_fraction", "1"])
    assert "--test_fraction: must be a number in (0, 1), got 1.0" in capsys.readouterr().err


def test_the_command_line_reads_proposes_and_builds_in_one_direction(tmp_path, capsys):
    log = write_swf(tmp_path / "mem.swf", num_jobs=200, processors=32, memory_per_processor_kb=1024, seed=3)
    ap = argparse.ArgumentParser()
    for add in (add_workload_flags, add_trace_flags, add_cluster_flags):
        add(ap)
    # one cluster resource of a log with memory: the proposal needs no memory capacity
    args = ap.parse_args(["--trace", str(log), "--fit_cluster", "--num_resources", "1", "--max_horizon", "32",
                          "--simu_len", "20"])
    given = dict(vars(args))
    cfg, sized, trace = setup_from_args(args)
    assert vars(args) == given  # what the proposal chose travels in the result, not in the flags
    proposal = propose_cluster(read_trace(log), num_resources=1, max_horizon=32, simu_len=20, sized_share=0.75)
    assert proposal.describe() in capsys.readouterr().out
    assert sized and (cfg.num_resources, cfg.resource_units, cfg.horizon) == (1, 32, proposal.cluster.horizon)
    assert trace.seconds_per_step == proposal.seconds_per_step and trace.read() is read_trace(log)
    workload = trace.workload(cfg, split="train")
    assert workload.trace is trace.read() and workload.resources == ("processors",)
    assert workload.split == "train" and workload.seconds_per_step == proposal.seconds_per_step
    with pytest.raises(SystemExit):  # a horizon of no step is refused as parsed, before the log is read
        ap.parse_args(["--trace", str(log), "--fit_cluster", "--max_horizon", "0"])
    assert "--max_horizon: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_a_processors_only_log_gets_one_resource_unless_a_checkpoint_or_the_flag_fixes_two(tmp_path):
    lines = ["; MaxProcs: 16"] + [swf_line(j + 1, 60 * j, 0, 60 + j, 1 + j % 16) for j in range(100)]
    path = write(tmp_path / "procs.swf", lines)
    proposal = propose_cluster(read_trace(path))
    assert proposal.cluster.num_resources == 1 and "--num_resources 1 " in proposal.describe()
    with warnings.catch_warnings():  # the proposal's own cluster: no resource of demand 0 to warn about
        warnings.simplefilter("error")
        TraceWorkload.for_cluster(proposal.cluster, path, proposal.seconds_per_step)
    assert propose_cluster(read_trace(path), num_resources=2).cluster.num_resources == 2
    # with a memory column some job gives, both resources
    memory = write_swf(tmp_path / "mem.swf", num_jobs=200, processors=32, memory_per_processor_kb=1024, seed=3)
    both = propose_cluster(read_trace(memory), capacity={"processors": 32, "memory": 32 * 1024})
    assert both.cluster.num_resources == 2
    # the scripts: a checkpoint's network fixes its resources; --num_resources overrides both
    ap = argparse.ArgumentParser()
    for add in (add_workload_flags, add_trace_flags, add_cluster_flags):
        add(ap)
    ckpt = str(ROOT / "checkpoints" / "best_slowdown.ckpt")
    args = ap.parse_args(["--trace", str(path), "--fit_cluster", "--simu_len", "20"])
    assert setup_from_args(args).cluster.num_resources == 1
    assert setup_from_args(args, [ckpt]).cluster.num_resources == 2
    args = ap.parse_args(["--trace", str(path), "--fit_cluster", "--simu_len", "20", "--num_resources", "3"])
    assert setup_from_args(args, [ckpt]).cluster.num_resources == 3


def test_the_synthetic_log_has_memory_and_a_schedule_that_fits(tmp_path):
    path = write_swf(tmp_path / "syn.swf.gz", num_jobs=400, processors=32, memory_per_processor_kb=1024, seed=1)
    trace = read_swf(path)
    assert trace.num_jobs == 400 and trace.present == (True, True) and trace.header["MaxProcs"] == "32"
    # at every start, the jobs running fit the machine on both resources
    start = [s + w for s, w in zip(trace.submit, trace.wait)]
    end = [s + r for s, r in zip(start, trace.run_time)]
    for t in start:
        running = [j for j in range(400) if start[j] <= t < end[j]]
        assert sum(trace.demand[j][0] for j in running) <= 32
        assert sum(trace.demand[j][1] for j in running) <= 32 * 1024 * (1 + 1e-9)


# ----- the recipe, as a user runs it -------------------------------------------------------------
def script(path, *args, cwd, env):
    proc = conftest.run_script(Path(path), *args, cwd=cwd, env=env)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_recipe_on_a_tiny_log(tmp_path):
    """Evaluate heuristics on the held-out period, fit on the earlier one from the slot policy (2
    iterations), adapt 1 step, evaluate and plot against the heuristics: each one command."""
    log = write_swf(tmp_path / "tiny.swf", num_jobs=300, processors=32, memory_per_processor_kb=1024, seed=2)
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    trace = ["--trace", str(log), "--trace_capacity", f"memory={32 * 1024}", "--fit_cluster", "--max_horizon", "32",
             "--simu_len", "20", "--threads", "1"]
    # the cluster --fit_cluster proposes (each script prints it), spelt out in the training config
    proposal = propose_cluster(read_trace(log), capacity={"memory": 32 * 1024}, max_horizon=32, simu_len=20,
                               sized_share=0.75)  # the train split of --test_fraction 0.25
    c = proposal.cluster
    sizes = {"--horizon": c.horizon, "--max_job_len": c.max_job_len, "--seconds_per_step": proposal.seconds_per_step}
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""model:
  class_path: tasks.reinforce.Reinforce
  init_args:
    cluster: {{resource_units: 32, max_job_units: 32, horizon: {sizes['--horizon']},
              max_job_len: {sizes['--max_job_len']}, observation: none}}
    workload:
      class_path: lightning_sched.traces.TraceWorkload
      init_args: {{path: {log}, seconds_per_step: {sizes['--seconds_per_step']}, split: train, simu_len: 20,
                  resource_units: 32, max_job_units: 32, max_job_len: {sizes['--max_job_len']},
                  capacity: {{memory: {32 * 1024}}}}}
    policy: {{kind: slots, hidden: [32], masked: true}}
    init_from: {ROOT / 'checkpoints' / 'slots_slowdown.ckpt'}
    num_jobsets: 2
    episodes_per_jobset: 2
    evaluation: {{val_jobsets: 2, test_jobsets: 2}}
trainer: {{max_steps: 2, val_check_interval: 2}}
""")
    script(str(ROOT / "scripts/fit.py"), "fit", "--config", str(config), "--trainer.logger", "false",
           "--checkpoint.dirpath", str(tmp_path / "ck"), "--threads", "1", cwd=tmp_path, env=env)
    trained = tmp_path / "ck" / "last.ckpt"
    adapted = tmp_path / "adapted.ckpt"
    last = script(str(ROOT / "scripts/adapt.py"), "--ckpt", str(trained), "--steps", "1", "--jobsets", "2",
                  "--episodes", "2", "--eval_jobsets", "4", *trace, "--out", str(adapted), "--json",
                  "--acting", "select", "--select_jobsets", "3", cwd=tmp_path, env=env).strip().splitlines()[-1]
    assert json.loads(last)["step"] == 1 and adapted.exists()
    # the acting mode that scored best on the train split is the one saved, and the one evaluated last
    record = read_record(adapted)
    scores = record.acting_selected["scores"]
    chosen = str(record.acting)
    assert json.loads(last)["acting"] == chosen and scores[chosen] == min(scores.values())
    out = script(str(ROOT / "scripts/evaluate.py"), *trace, "--policy", "tetris", "sjf", str(adapted),
                 "--jobsets", "4", "--json", cwd=tmp_path, env=env)
    assert proposal.describe() in out  # the same cluster the config was written for
    final = json.loads(out.strip().splitlines()[-1])
    assert final["num_jobsets"] == 4 and "mean_slowdown_minus_first" in final and final["trace_start"] == "log"
    script(str(ROOT / "scripts/figures.py"), "trace", *trace, "--heuristics", "tetris",
           "--ckpt", f"adapted={adapted}", "--compressions", "1", "--jobsets", "3", "--out", str(tmp_path / "t.png"),
           cwd=tmp_path, env=env)
    figure = json.loads((tmp_path / "t.json").read_text())
    assert figure["cluster"]["resource_units"] == 32
    assert set(next(iter(figure["settings"].values()))["results"]) == {"tetris", "adapted"}


def test_the_adaptation_figure_adds_the_log_on_its_own_cluster(tmp_path):
    """figures.py adaptation --trace: the log is one more panel, on the cluster --fit_cluster proposes,
    with every checkpoint, the fresh network and the heuristics measured there."""
    log = write_swf(tmp_path / "tiny.swf", num_jobs=300, processors=32, memory_per_processor_kb=1024, seed=2)
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    slots = ROOT / "checkpoints" / "slots_slowdown.ckpt"
    script(str(ROOT / "scripts/figures.py"), "adaptation", "--ckpt", f"slots={slots}",
           "--steps", "1", "--jobsets", "1", "--episodes", "2", "--eval_jobsets", "2", "--heuristics", "tetris",
           "--trace", str(log), "--trace_capacity", f"memory={32 * 1024}", "--fit_cluster", "--max_horizon", "32",
           "--simu_len", "20", "--threads", "1", "--out", str(tmp_path / "a.png"), cwd=tmp_path, env=env)
    figure = json.loads((tmp_path / "a.json").read_text())
    panel = "tiny, test split"
    assert figure["clusters"][panel]["resource_units"] == 32 and figure["clusters"][panel]["horizon"] <= 32
    assert set(figure["curves"][panel]) == {"slots", "scratch"} and set(figure["heuristics"][panel]) == {"tetris"}
    assert len(figure["curves"]) == 5 and (tmp_path / "a.png").exists()


def test_make_swf_writes_the_memory_per_processor_it_is_given(tmp_path, capsys):
    out = tmp_path / "mem.swf"
    script_main("make_swf")([str(out), "--jobs", "300", "--processors", "16", "--memory_per_processor_kb", "512",
                             "--seed", "4"])
    assert "16 processors, 8192 KB of memory" in capsys.readouterr().out
    text = out.read_text().splitlines()
    assert "; Note: memory per processor 512 KB, 8192 KB in all; greedy backfilling schedule, offered load 0.7" in text
    rows = [line.split() for line in text if not line.startswith(";")]
    procs, memory = [int(r[4]) for r in rows], [int(r[6]) for r in rows]  # used KB per processor
    assert len(rows) == 300 and min(memory) >= 512 // 16 and max(memory) <= 2 * 512
    assert all(m * p <= 16 * 512 for m, p in zip(memory, procs))  # every job fits the machine's memory
    assert max(memory) > 512  # some jobs need more than their processors' share: memory-bound


def test_more_random_windows_than_the_split_has_starts_warn_once(tmp_path):
    from lightning_sched.traces.mapping import TraceWarning

    workload = state_workload(tmp_path, split="all")
    count = int(workload._plan.interval_end[-1])  # the distinct starts of a 10-step window in 11 steps
    with pytest.warns(TraceWarning, match=rf"{count + 1} random windows asked, the all split has {count} distinct"):
        workload.window_starts(count + 1, torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once a workload: a training run draws every iteration
        workload.window_starts(count + 1, torch.Generator().manual_seed(1))
        state_workload(tmp_path, split="all").window_starts(count, torch.Generator().manual_seed(0))


def test_a_header_of_unknown_max_procs_falls_back_to_max_nodes(tmp_path):
    lines = ["; MaxProcs: -1", "; MaxNodes: 16"] + [swf_line(j + 1, 60 * j, 0, 60 + j, 1 + j % 16) for j in range(100)]
    workload = TraceWorkload.for_cluster(ONE_RESOURCE, write(tmp_path / "unknown.swf", lines), 60,
                                         resources=("processors",), simu_len=10)
    assert workload.report.capacity == {"processors": 16.0}  # SWF's -1 is "unknown", not a capacity
