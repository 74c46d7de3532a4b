"""Real traces as workloads (lightning_sched.traces: files parses, mapping and workload map): the
mapping checked exactly on small SWF and CSV files the tests write, every bad input's error, a parser
fuzz test, and a replay through scripts/evaluate.py --trace with every heuristic."""
from __future__ import annotations

import gzip
import json
import random
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import conftest
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lightning_sched import ClusterConfig, ClusterEnv, ConfigError
from lightning_sched.cli import parse_capacity
from lightning_sched.evaluation import evaluate
from lightning_sched.heuristics import HEURISTICS, make_heuristic
from lightning_sched.traces import TraceError, TraceWarning, TraceWorkload
from lightning_sched.traces.files import read_csv, read_swf, trace_format

ROOT = Path(__file__).resolve().parent.parent
CFG = ClusterConfig(observation="none")  # 2 resources of 10 units, max_job_len 15, max_job_units 10


def swf_line(job, submit, run, procs, status=1, used_mem=-1, req_procs=-1, req_mem=-1, wait=-1):
    fields = [job, submit, wait, run, procs, -1, used_mem, req_procs, -1, req_mem, status, 1, 1, -1, 1, -1, -1, -1]
    return " ".join(str(f) for f in fields)


def write(path: Path, lines: list[str], gz: bool = False) -> Path:
    text = "\n".join(lines) + "\n"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


HEADER = ["; Version: 2.2", "; Computer: test cluster", "; MaxProcs: 64", ";", "; Note: written by the tests"]
# (line in the file, what the mapping does with it) at 60 s a step, 64 processors -> 10 units, origin 100 s
PROCESSOR_JOBS = [
    swf_line(1, 100, 60, 1),               # step 0, 1 step (60 s), ceil(1/64*10) = 1 unit
    swf_line(2, 160, 61, 32),              # step 1, 2 steps, 5 units
    swf_line(3, 400, 0, 8),                # ran 0 s: dropped (zero_run_time)
    swf_line(4, 700, 1200, 64),            # step 10, 20 steps: longer than 15 (clip: 15 / drop: too_long), 10 units
    swf_line(5, 710, 120, 128),            # step 10, 2 steps, 20 units: larger than 10 (clip: 10 / drop: too_large)
    swf_line(6, 800, 60, 1, status=0),     # failed: dropped (status)
    swf_line(7, 900, 30, -1, status=-1, req_procs=7),  # unknown status kept; requested processors: ceil(70/64) = 2
    swf_line(8, -1, 60, 1),                # unknown submit time
    swf_line(9, 950, -1, 1),               # unknown run time
    swf_line(10, 960, 60, -1),             # unknown processors (allocated and requested)
    swf_line(11, 1000, 60, 1, status=5),   # cancelled: dropped (status)
]


def processor_trace(tmp_path, gz=False):
    return write(tmp_path / ("jobs.swf.gz" if gz else "jobs.swf"), HEADER + [""] + PROCESSOR_JOBS, gz=gz)


def consecutive(path, **kw):
    return TraceWorkload.for_cluster(CFG, path, 60, windows="consecutive", simu_len=20, **kw)


# ----- the mapping, exactly -------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_swf_mapping_clip(tmp_path, gz):
    with pytest.warns(TraceWarning, match="memory"):  # no job gives memory: the second resource gets 0
        w = consecutive(processor_trace(tmp_path, gz))
    assert w.trace.header["MaxProcs"] == "64" and w.report.capacity == {"processors": 64.0}
    jobs = w.sample(1)
    n = int(jobs.num_jobs[0])
    assert n == 5 and w.max_jobs == 5
    assert jobs.arrival[0, :n].tolist() == [0, 1, 10, 10, 13]
    assert jobs.duration[0, :n].tolist() == [1, 2, 15, 2, 1]
    assert jobs.demand[0, :n, 0].tolist() == [1, 5, 10, 10, 2]
    assert jobs.demand[0, :n, 1].tolist() == [0, 0, 0, 0, 0]
    r = w.report
    assert r.job_lines == 11 and r.kept == 5
    assert r.dropped == {"status": 2, "unknown_submit": 1, "unknown_run_time": 1, "zero_run_time": 1,
                         "unknown_demand": 1, "zero_demand": 0, "too_long": 0, "too_large": 0}
    assert r.clipped == {"length": 1, "demand": 1}
    assert r.zero_demand_resources == [1]
    # as JSON: the same names and numbers
    assert json.loads(json.dumps(r.to_dict())) == vars(r)


@pytest.mark.parametrize("long_jobs, processors", [(4, 8), (10, 8), (4, 100)])
def test_a_cluster_that_cuts_more_than_five_percent_of_the_jobs_is_named(tmp_path, long_jobs, processors):
    # 100 jobs a minute apart, of 60 s but `long_jobs` of 1200 s (20 steps of 60 s, over CFG's max_job_len 15)
    # on `processors` of 64 (100: more units than max_job_units 10 too, so each of those is cut twice)
    lines = HEADER + [swf_line(j + 1, 60 * j, 1200 if j < long_jobs else 60, processors if j < long_jobs else 8)
                      for j in range(100)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = TraceWorkload.for_cluster(CFG, write(tmp_path / "long.swf", lines), 60)
    cut = [str(c.message) for c in caught if "cut to the cluster" in str(c.message)]
    wide = long_jobs if processors > 64 else 0
    assert w.report.clipped == {"length": long_jobs, "demand": wide}
    assert cut == ([] if long_jobs == 4 else [f"{tmp_path / 'long.swf'}: 10 of 100 kept jobs (10%) are cut to the "
                                              "cluster ({'length': 10, 'demand': 0}, max_job_len=15 steps of 60 s, "
                                              "max_job_units=10); --fit_cluster sizes a cluster at the log's own "
                                              "resolution, --oversize drop drops them instead"])


def test_swf_mapping_drop_and_status_knobs(tmp_path):
    path = processor_trace(tmp_path)
    with pytest.warns(TraceWarning):
        w = consecutive(path, oversize="drop")
    jobs = w.sample(1)
    assert jobs.arrival[0, :3].tolist() == [0, 1, 13] and int(jobs.num_jobs[0]) == 3
    assert w.report.dropped["too_long"] == 1 and w.report.dropped["too_large"] == 1
    assert w.report.clipped == {"length": 0, "demand": 0}
    with pytest.warns(TraceWarning):
        w = consecutive(path, keep_unknown_status=False, statuses=(1, 0, 5), keep_zero_run_time=True)
    # job 3 (0 s, a 1-step job at step 5), 6 (failed) and 11 (cancelled) come in; job 7 (status -1) goes
    assert w.sample(1).arrival[0, :7].tolist() == [0, 1, 5, 10, 10, 11, 15]
    assert w.report.dropped["status"] == 1 and w.report.dropped["zero_run_time"] == 0


def test_swf_with_memory_columns(tmp_path):
    kb = 1024 * 1024  # 1 GB in SWF's KB
    lines = ["; MaxProcs: 16", swf_line(1, 0, 300, 4, used_mem=kb),        # 4 GB of 16: ceil(2.5) = 3; 4 procs: 3
             swf_line(2, 600, 300, 2, req_mem=kb // 2),                   # requested 1 GB: ceil(.625) = 1; 2 procs: 2
             swf_line(3, 1200, 300, 16, used_mem=2 * kb),                 # 32 GB: 20 units, clipped to 10
             swf_line(4, 1500, 300, 1, used_mem=-1)]                      # memory unknown: dropped
    path = write(tmp_path / "mem.swf", lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both resources are present: no warning of a resource of demand 0
        warnings.filterwarnings("ignore", message=".*cut to the cluster")  # 1 of 3 jobs is (below)
        w = TraceWorkload.for_cluster(CFG, path, 300, capacity={"memory": 16 * kb}, windows="consecutive", simu_len=10)
    jobs = w.sample(1)
    assert jobs.arrival[0].tolist() == [0, 2, 4]
    assert jobs.duration[0].tolist() == [1, 1, 1]
    assert jobs.demand[0].tolist() == [[3, 3], [2, 1], [10, 10]]
    assert w.report.dropped["unknown_demand"] == 1 and w.report.clipped["demand"] == 1


def test_csv_mapping(tmp_path):
    rows = ["id,submit,runtime,cpus,mem_gb,state",
            "1,1000,3600,8,16,1",      # step 0, 4 steps (900 s a step), ceil(8/32*10) = 3, ceil(16/128*10) = 2
            "2,1900,900,32,1,1",       # step 1, 1 step, 10, 1
            "3,2000,100,4,,1",         # memory unknown: dropped
            "4,2800,1000,1,64,0",      # status 0: dropped
            '"5",4600,1,1,128,1']      # step 4, 1 step, 1, 10
    path = write(tmp_path / "jobs.csv", rows)
    w = TraceWorkload.for_cluster(CFG, path, 900, resources=("cpus", "mem_gb"), capacity={"cpus": 32, "mem_gb": 128},
                                  csv_submit="submit", csv_run_time="runtime", csv_status="state",
                                  windows="consecutive", simu_len=10)
    jobs = w.sample(1)
    assert jobs.arrival[0].tolist() == [0, 1, 4]
    assert jobs.duration[0].tolist() == [4, 1, 1]
    assert jobs.demand[0].tolist() == [[3, 2], [10, 1], [1, 10]]
    assert w.report.dropped["unknown_demand"] == 1 and w.report.dropped["status"] == 1
    # capacities as values in resource order, and from the command line
    same = TraceWorkload.for_cluster(CFG, path, 900, resources=("cpus", "mem_gb"),
                                     capacity=parse_capacity(["32", "128"]),
                                     csv_submit="submit", csv_run_time="runtime", csv_status="state",
                                     windows="consecutive", simu_len=10)
    assert torch.equal(same.sample(1).demand, jobs.demand)
    assert parse_capacity(["cpus=32", "mem_gb=1e3"]) == {"cpus": 32.0, "mem_gb": 1000.0}


def test_fewer_trace_resources_than_cluster_get_zero_with_warning(tmp_path):
    path = write(tmp_path / "one.csv", ["submit_time,run_time,cores", "0,10,5", "20,10,10"])
    with pytest.warns(TraceWarning, match="1 of the cluster's 2 resources get demand 0"):
        w = TraceWorkload.for_cluster(CFG, path, 10, resources=("cores",), capacity={"cores": 10},
                                      windows="consecutive", simu_len=5)
    jobs = w.sample(1)
    assert jobs.demand[0].tolist() == [[5, 0], [10, 0]] and jobs.arrival[0].tolist() == [0, 2]
    assert w.report.zero_demand_resources == [1]


def evenly_spaced(tmp_path, n=100, seconds=10):
    """One 1-step job every step (10 s a step), n of them: arrival step i for job i."""
    return write(tmp_path / "even.csv",
                 ["submit_time,run_time,cpu"] + [f"{i * seconds},{seconds},{1 + i % 10}" for i in range(n)])


def test_time_ordered_split_and_consecutive_windows(tmp_path):
    path = evenly_spaced(tmp_path)
    kw = dict(resources=("cpu",), capacity=(10,), windows="consecutive", simu_len=10, test_fraction=0.25)
    with pytest.warns(TraceWarning):
        train = TraceWorkload.for_cluster(CFG, path, 10, split="train", **kw)
        test = TraceWorkload.for_cluster(CFG, path, 10, split="test", **kw)
    assert train.report.split_steps == [0, 75] and test.report.split_steps == [75, 100]
    assert train.arrival.tolist() == list(range(75)) and test.arrival.tolist() == list(range(75, 100))
    # test tiles: [75, 85), [85, 95), [95, 105); successive samples go on in time order, wrapping
    first = test.sample(2)
    assert first.arrival[0].tolist() == list(range(10)) and first.arrival[1].tolist() == list(range(10))
    assert first.demand[0, :, 0].tolist() == [1 + i % 10 for i in range(75, 85)]
    again = test.sample(2)
    assert again.num_jobs.tolist() == [5, 10]  # the last tile holds 95..99, then back to the first
    assert test.max_jobs == 10 and test.num_windows == 3


def test_random_windows_are_the_trace_cut_at_their_start(tmp_path):
    rng = random.Random(0)
    submits = sorted(rng.randrange(0, 20000) for _ in range(300))
    path = write(tmp_path / "r.csv", ["submit_time,run_time,cpu,mem"] +
                 [f"{s},{rng.randrange(1, 2000)},{rng.randrange(1, 65)},{rng.randrange(0, 100)}" for s in submits])
    w = TraceWorkload.for_cluster(CFG, path, 60, resources=("cpu", "mem"), capacity=(64, 100), simu_len=25,
                                  split="test")
    steps = w.arrival.tolist()
    lo, hi = w.report.split_steps
    # max_jobs: the most jobs any window start in [lo, hi - 25] sees
    assert w.max_jobs == max(sum(s <= a < s + 25 for a in steps) for s in range(lo, hi - 25 + 1))
    starts = w.window_starts(64, torch.Generator().manual_seed(1))
    jobs = w.jobset(starts)
    for row, start in enumerate(starts.tolist()):
        assert lo <= start <= hi - 25
        inside = [i for i, a in enumerate(steps) if start <= a < start + 25]
        assert inside and int(jobs.num_jobs[row]) == len(inside)  # no empty window is ever drawn
        assert jobs.arrival[row, :len(inside)].tolist() == [steps[i] - start for i in inside]
        assert jobs.duration[row, :len(inside)].tolist() == w.duration[inside].tolist()
    same = w.sample(64, torch.Generator().manual_seed(1))
    assert torch.equal(same.arrival, jobs.arrival) and torch.equal(same.demand, jobs.demand)


def test_time_compression_and_target_load(tmp_path):
    path = evenly_spaced(tmp_path)
    kw = dict(resources=("cpu",), capacity=(10,), windows="consecutive", simu_len=200)
    with pytest.warns(TraceWarning):
        twice = TraceWorkload.for_cluster(CFG, path, 10, time_compression=2.0, **kw)
        loaded = TraceWorkload.for_cluster(CFG, path, 10, target_load=0.9, **kw)
    assert twice.arrival.tolist() == [i // 2 for i in range(100)]  # floor(10 i * 2 / 10) halves the steps
    assert twice.report.load[0] == pytest.approx(2 * twice.report.natural_load[0], abs=1e-3)
    # natural load: 550 unit-steps over 99 steps of 10 units
    assert loaded.report.natural_load[0] == pytest.approx(550 / 990, abs=1e-4)
    assert loaded.report.load[0] == pytest.approx(0.9, abs=1e-3)
    assert loaded.report.compression == pytest.approx(0.9 / (550 / 990))


def test_env_and_evaluation_accept_a_trace_workload(tmp_path):
    with pytest.warns(TraceWarning):
        w = TraceWorkload.for_cluster(CFG, processor_trace(tmp_path), 60, simu_len=20)
    env = ClusterEnv(CFG, workload=w, batch_size=[3], seed=0)
    td = env.reset()
    assert td["job_start"].shape == (3, w.max_jobs)
    td["action"] = torch.full((3,), CFG.num_slots)
    assert env.step(td)["next", "reward"].shape == (3, 1)
    result = evaluate(make_heuristic("sjf", CFG), CFG, w.sample(4, torch.Generator().manual_seed(0)))
    assert result.summary["unfinished_jobs"] == 0 and result.summary["mean_slowdown"] >= 1
    with pytest.raises(ConfigError, match="resource_units"):
        w.validate(CFG.replace(resource_units=20, max_job_units=20))
    with pytest.raises(ConfigError, match="max_job_len"):
        w.validate(CFG.replace(max_job_len=10))


# ----- bad input: each a clear TraceError (a ConfigError) -----------------------------------------
def test_malformed_line_names_file_line_and_field(tmp_path):
    lines = HEADER + [swf_line(1, 0, 60, 1), swf_line(2, 60, "1O", 1)]  # a letter O in the run time
    path = write(tmp_path / "bad.swf", lines)
    with pytest.raises(TraceError, match=r"bad\.swf, line 7, field 4 \(run time\): '1O' is not a number"):
        read_swf(path)
    path = write(tmp_path / "short.swf", [swf_line(1, 0, 60, 1), "2 60 -1 60 1"])
    with pytest.raises(TraceError, match=r"short\.swf, line 2, field 6 \(average CPU time\): missing"):
        read_swf(path)
    path = write(tmp_path / "neg.swf", [swf_line(1, -5, 60, 1)])
    with pytest.raises(TraceError, match=r"neg\.swf, line 1, field 2 \(submit time\): -5 is negative"):
        read_swf(path)
    path = write(tmp_path / "bad.csv", ["submit_time,run_time,cpu", "0,10,1", "5,ten,1"])
    with pytest.raises(TraceError, match=r"bad\.csv, line 3, column 'run_time': 'ten' is not a number"):
        read_csv(path, demands=("cpu",))
    assert issubclass(TraceError, ConfigError)


def test_empty_trace(tmp_path):
    with pytest.raises(TraceError, match="empty trace"):
        read_swf(write(tmp_path / "empty.swf", HEADER))
    with pytest.raises(TraceError, match="empty trace"):
        read_swf(write(tmp_path / "empty.swf.gz", [""], gz=True))
    with pytest.raises(TraceError, match="empty trace"):
        read_csv(write(tmp_path / "empty.csv", ["submit_time,run_time,cpu"]), demands=("cpu",))


def test_no_job_fits(tmp_path):
    path = write(tmp_path / "huge.swf", ["; MaxProcs: 8", swf_line(1, 0, 60, 64), swf_line(2, 9, 60, 8, status=0)])
    with pytest.raises(TraceError,
                       match=r"no job fits the cluster: 2 job lines, all dropped \(status 1, too_large 1\)"), \
            pytest.warns(TraceWarning):
        TraceWorkload.for_cluster(CFG, path, 60, oversize="drop")


def test_gz_that_is_not_gzip(tmp_path):
    path = write(tmp_path / "plain.swf.gz", [swf_line(1, 0, 60, 1)])
    with pytest.raises(TraceError, match=r"plain\.swf\.gz: not a gzip file"):
        read_swf(path)
    broken = tmp_path / "cut.swf.gz"
    broken.write_bytes(gzip.compress(("\n".join(swf_line(i, i, 60, 1) for i in range(50))).encode())[:40])
    with pytest.raises(TraceError, match="corrupt gzip"):
        read_swf(broken)


def test_unknown_csv_column(tmp_path):
    path = write(tmp_path / "cols.csv", ["submit,run_time,cpu", "0,10,1"])
    with pytest.raises(TraceError, match=r"unknown CSV column: submit column 'submit_time'.*"
                                         r"header has \['submit', 'run_time', 'cpu'\]"):
        read_csv(path, demands=("cpu",))
    with pytest.raises(TraceError, match="demand 'gpu' column 'gpu'"):
        TraceWorkload.for_cluster(CFG, path, 10, resources=("cpu", "gpu"), csv_submit="submit", capacity=(1, 1))


def test_bad_knobs_and_formats(tmp_path):
    path = processor_trace(tmp_path)
    with pytest.raises(TraceError, match="seconds_per_step"):
        TraceWorkload.for_cluster(CFG, path, 0)
    with pytest.raises(TraceError, match="oversize"):
        TraceWorkload.for_cluster(CFG, path, 60, oversize="squash")
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        trace_format(tmp_path / "jobs.txt")
    with pytest.raises(TraceError, match="cannot read"):
        read_swf(tmp_path / "missing.swf")
    with pytest.raises(TraceError, match="no capacity for resource 'processors'"), pytest.warns(TraceWarning):
        TraceWorkload.for_cluster(CFG, write(tmp_path / "nohead.swf", [swf_line(1, 0, 60, 1)]), 60)
    with pytest.raises(TraceError, match="job_columns=2 is too few"), pytest.warns(TraceWarning):
        TraceWorkload.for_cluster(CFG, path, 60, simu_len=20, job_columns=2)


# ----- fuzz: parse or raise the project's own error, never anything else ------------------------------
TOKENS = st.sampled_from(["-1", "0", "1", "7", "128", "3600", "1e9", "1e300", "-5", "2.5", "nan", "inf", "x", "", ";",
                          "1_0", "0x1", "\x00", "é", ",", '"', "-0", "1e-300"])
SWF_LINE = st.lists(st.one_of(st.integers(-1, 10 ** 5).map(str), TOKENS), min_size=18, max_size=18).map(" ".join)
LINE = st.one_of(st.lists(TOKENS, min_size=0, max_size=20).map(" ".join), st.text(max_size=40),
                 st.lists(st.integers(-2, 10 ** 6).map(str), min_size=18, max_size=18).map(" ".join),
                 st.lists(st.integers(-1, 10 ** 4).map(str), min_size=18, max_size=18).map(" ".join), SWF_LINE)


def _try_all(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        try:
            read_swf(path)
        except TraceError:
            pass
        try:
            read_csv(path, demands=("cpu",))
        except TraceError:
            pass
        for fmt, resources in (("swf", None), ("csv", ("cpu",))):
            try:
                w = TraceWorkload(str(path), 60, format=fmt, resources=resources,
                                  capacity=(64,) if fmt == "csv" else {"memory": 1e6}, statuses=None, simu_len=5)
                w.sample(2, torch.Generator().manual_seed(0)).validate(CFG)
            except TraceError:
                pass


@given(st.binary(max_size=300), st.sampled_from(["f.swf", "f.swf.gz", "f.csv"]), st.booleans())
def test_fuzz_random_bytes(tmp_path_factory, data, name, compress):
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(gzip.compress(data) if compress else data)
    _try_all(path)


@given(st.lists(LINE, max_size=8), st.booleans())
def test_fuzz_random_lines(tmp_path_factory, lines, csv_header):
    path = tmp_path_factory.mktemp("fuzz") / "f.swf"
    path.write_text("\n".join((["submit_time,run_time,cpu"] if csv_header else ["; MaxProcs: 64"]) + lines))
    _try_all(path)


# ----- a trace the project has never seen, replayed by the script with every heuristic ---------------
def realistic_swf(path: Path, jobs: int = 400) -> Path:
    """A standard SWF in the archive's style, with memory columns (used and requested, KB per processor)."""
    rng = random.Random(2024)
    lines = ["; Version: 2.2", "; Computer: Imaginary Cluster 64 x 4 GB", "; Installation: nowhere",
             "; UnixStartTime: 1000000000", f"; MaxJobs: {jobs}", "; MaxNodes: 64", "; MaxProcs: 64",
             "; Note: memory is KB per processor", ";"]
    submit = 0
    for j in range(1, jobs + 1):
        submit += int(rng.expovariate(1 / 400))
        procs = rng.choice([1, 1, 2, 4, 8, 16, 32, 64])
        run = max(1, int(rng.lognormvariate(6.5, 1.5)))
        used = rng.randrange(1000, 4 * 1024 * 1024)
        status = rng.choice([1] * 9 + [0, 5])
        fields = [j, submit, rng.randrange(0, 3600), run, procs, run * procs * 0.9, used, procs,
                  run * 2, used + 1000, status, rng.randrange(1, 30), rng.randrange(1, 5), rng.randrange(1, 50),
                  rng.randrange(0, 3), 1, -1, -1]
        lines.append(" ".join(f"{f:.1f}" if isinstance(f, float) else str(f) for f in fields))
    return write(path, lines, gz=True)


def run_script(*args):
    return conftest.run_script(ROOT / "scripts" / "evaluate.py", *args, cwd=ROOT)


def test_evaluate_script_replays_an_swf_with_memory_with_every_heuristic(tmp_path):
    path = realistic_swf(tmp_path / "imaginary.swf.gz")
    heuristics = sorted(HEURISTICS)
    assert set(heuristics) >= {"sjf", "packer", "tetris", "edf", "random"}
    proc = run_script("--trace", str(path), "--seconds_per_step", "300",
                      "--trace_capacity", "processors=64", f"memory={64 * 4 * 1024 * 1024}",
                      "--policy", *heuristics, "--jobsets", "6", "--simu_len", "30", "--json", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    assert "get demand 0" not in proc.stderr  # both resources present
    results = [json.loads(line) for line in proc.stdout.strip().splitlines()[-len(heuristics):]]
    cut = sum(results[0]["trace_clipped"].values())  # DeepRM's cluster cuts many of a real log's jobs: named
    assert (cut > 0.05 * results[0]["trace_kept"]) == ("are cut to the cluster" in proc.stderr)
    lines = proc.stderr.splitlines()  # the project's warnings in one line each, no source line after them
    assert lines and all(line.startswith("TraceWarning: ") for line in lines), proc.stderr
    assert [r["policy"] for r in results] == heuristics
    for r in results:
        assert r["num_jobsets"] == 6 and r["num_jobs"] > 0 and r["mean_slowdown"] >= 1
        assert r["trace_dropped"]["status"] > 0 and sum(r["trace_clipped"].values()) > 0
        assert r["trace_kept"] + sum(r["trace_dropped"].values()) == 400
    bad = run_script("--trace", str(tmp_path / "absent.swf"), "--seconds_per_step", "60", "--policy", "sjf")
    assert bad.returncode == 2 and "absent.swf: cannot read" in bad.stderr


def test_fit_and_adapt_take_a_trace_workload(tmp_path):
    """`scripts/fit.py` trains on a trace's windows from a config; `scripts/adapt.py --trace` fine-tunes
    the result on the trace's earlier history and reports on its held-out range."""
    trace = realistic_swf(tmp_path / "imaginary.swf.gz")
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    config = tmp_path / "trace.yaml"
    config.write_text("model:\n  init_args:\n    workload:\n      class_path: lightning_sched.traces.TraceWorkload\n"
                      f"      init_args: {{path: {trace}, seconds_per_step: 300, split: train, simu_len: 20,\n"
                      f"                  capacity: {{processors: 64, memory: {64 * 4 * 1024 * 1024}}}}}\n")
    fit = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit.py"), "fit",
                          "--config", str(ROOT / "configs" / "smoke.yaml"), "--config", str(config),
                          "--trainer.max_steps", "2", "--trainer.logger", "false",
                          "--checkpoint.dirpath", str(tmp_path / "ck"), "--threads", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpt = tmp_path / "ck" / "last.ckpt"
    data = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert str(trace) in str(data["hyper_parameters"]["workload"])  # trained on the trace's windows
    assert f"trace {trace}: " in fit.stdout and "; train split: " in fit.stdout  # what the mapping kept, clipped
    # the closing "evaluate it" command reads the trace's held-out split as the run read its train split
    hint = next(line for line in fit.stdout.splitlines() if line.startswith("evaluate it on unseen jobsets: "))
    command = shlex.split(hint.split(": ", 1)[1])
    assert command[command.index("--trace_split") + 1] == "test"
    assert command[0] == "python" and (tmp_path / command[1]).resolve() == ROOT / "scripts" / "evaluate.py"  # as pasted
    evaluated = conftest.run_script(tmp_path / command[1], *command[2:], "--jobsets", "4", "--threads", "1",
                                    cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "test split: " in evaluated.stdout
    adapt = conftest.run_script(ROOT / "scripts" / "adapt.py", "--ckpt", ckpt, "--steps", "1", "--trace", trace,
                                "--seconds_per_step", "300", "--simu_len", "20", "--jobsets", "2", "--episodes", "2",
                                "--trace_capacity", "processors=64", f"memory={64 * 4 * 1024 * 1024}",
                                "--eval_jobsets", "4", "--json", "--threads", "1", "--out", tmp_path / "adapted.ckpt",
                                cwd=ROOT)
    assert adapt.returncode == 0, adapt.stderr[-3000:]
    last = json.loads(adapt.stdout.strip().splitlines()[-1])
    assert last["step"] == 1 and last["num_jobsets"] == 4 and last["mean_slowdown"] >= 1
    assert {"trace_kept", "trace_dropped", "trace_clipped"} <= set(last)  # as evaluate.py --json says them
    assert "; train split: " in adapt.stdout and "; test split: " in adapt.stdout


def test_deeprm_workload_flags_beside_a_trace_are_refused(tmp_path):
    # the log's jobs replace DeepRM's generator: --load and its kin would change nothing
    import argparse

    from lightning_sched.cli import add_cluster_flags, add_trace_flags, add_workload_flags, setup_from_args
    path = write(tmp_path / "log.swf", ["; MaxProcs: 8"] + [swf_line(j + 1, 60 * j, 60, 2) for j in range(20)])
    ap = argparse.ArgumentParser()
    add_workload_flags(ap)
    add_trace_flags(ap)
    add_cluster_flags(ap)
    base = ["--trace", str(path), "--seconds_per_step", "60", "--trace_capacity", "processors=8"]
    assert setup_from_args(ap.parse_args(base + ["--simu_len", "20"])).trace is not None
    for extra, message in ((["--load", "0.9"], "--load 0.9: --trace replays the log's jobs"),
                           (["--short_len", "2", "4"], "--short_len (2, 4): --trace replays")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            setup_from_args(ap.parse_args(base + extra))
