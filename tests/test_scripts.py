"""The command-line scripts, run as a user runs them (subprocesses, tiny settings)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_script, script_main

from lightning_sched import ConfigError, JobSet
from lightning_sched.policies.checkpoints import load_policy

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("mean_slowdown", "mean_completion_time", "makespan", "utilization", "slo_hit_rate")


def run(*args, check=True, cwd=ROOT, env=None, own_process=False):
    """A script run as a user runs it; `cwd` is where its default outputs go (runs/)."""
    script, *rest = args
    proc = run_script(ROOT / script, *rest, cwd=cwd, env=env, own_process=own_process)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_evaluate_json_has_every_metric_with_ci():
    out = run("scripts/evaluate.py", "--policy", "sjf", "--load", "0.9", "--short_prob", "0.6",
              "--dominant_units", "3", "7", "--jobsets", "12", "--seed", "3", "--json", "--threads", "1").stdout
    last = json.loads(out.strip().splitlines()[-1])
    for key in KEYS:
        assert isinstance(last[key], float) and isinstance(last[key + "_ci95"], float)
        assert last[key + "_ci95"] >= 0
    assert isinstance(last["num_jobs"], int) and last["num_jobs"] > 0
    assert last["slo_hit_rate"] <= 1 and last["mean_slowdown"] >= 1
    assert "mean slowdown" in out  # the table comes first


def test_evaluate_same_seed_same_numbers_and_saved_jobsets_replay(tmp_path):
    path = tmp_path / "jobs.pt"
    a = run("scripts/evaluate.py", "--policy", "tetris", "--jobsets", "8", "--seed", "5", "--json",
            "--save_jobsets", str(path), "--threads", "1").stdout.strip().splitlines()[-1]
    replay = run("scripts/evaluate.py", "--policy", "tetris", "--jobset_file", str(path), "--json",
                 "--threads", "1").stdout.strip().splitlines()
    b = replay[-1]
    # the header says where the file's jobsets came from, not the default seed as if it drew them
    header = next(line for line in replay if "jobsets x" in line)
    assert "(saved from DeepRMWorkload(" in header and ", seed 5)" in header, header
    assert "--seed 12345 for random decisions only" in header, header
    da, db = json.loads(a), json.loads(b)
    for key in KEYS:
        assert da[key] == pytest.approx(db[key])


def test_evaluate_counts_only_jobsets_with_jobs_and_writes_strict_json():
    """At load 0.1 over 3 steps most jobsets draw no job: their metrics are NaN and no part of a CI,
    so the text and the JSON say over how many the CI is; NaN is written as null (strict JSON)."""
    out = run("scripts/evaluate.py", "--policy", "sjf", "tetris", "--load", "0.1", "--simu_len", "3", "--jobsets",
              "12", "--json", "--threads", "1").stdout
    lines = [json.loads(x, parse_constant=pytest.fail) for x in out.splitlines() if x.startswith("{")]
    kept = lines[0]["jobsets_with_jobs"]
    assert 0 < kept < 12 and all(x["num_jobsets"] == 12 and x["jobsets_with_jobs"] == kept for x in lines)
    assert f"(paired 95% CI over {kept} jobsets ({12 - kept} of the 12 drew no job))" in out
    from lightning_sched.evaluation import json_line

    assert json.loads(json_line({"a": [1.0, float("nan"), {"b": float("-inf")}], "c": (2, float("inf"))})) == \
        {"a": [1.0, None, {"b": None}], "c": [2, None]}


def test_evaluate_rejects_unknown_policy_and_unreachable_load():
    proc = run("scripts/evaluate.py", "--policy", "fifo", "--jobsets", "2", check=False)
    assert proc.returncode == 2 and "'fifo'" in proc.stderr
    proc = run("scripts/evaluate.py", "--policy", "sjf", "--arrivals", "bernoulli", "--load", "1.9", check=False)
    assert proc.returncode == 2 and "load=1.9" in proc.stderr


def test_bench_env_prints_table_and_json():
    out = run("scripts/bench_env.py", "--batch_sizes", "4", "--modes", "none", "image", "--steps", "5",
              "--repeats", "1", "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["threads"] == 1
    assert result["decisions_per_s"]["none/hot/4"] > 0 and result["decisions_per_s"]["image/hot/4"] > 0
    assert result["iteration_2000_episodes_s"] > 0
    # the other env's flags are refused, not ignored (the figures would be read as theirs)
    for flags, named in ((("--trace", "x.swf"), "--trace: not read with --env deeprm"),
                         (("--env", "queue", "--sizes", "--load", "2"), "--load, --sizes: not read with --env queue")):
        assert named in one_line_error(run("scripts/bench_env.py", *flags, check=False))


def test_bench_train_prints_its_parts_and_json():
    out = run("scripts/bench_train.py", "--jobsets", "2", "--episodes", "2", "--simu_len", "10", "--repeats", "1",
              "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["threads"] == 1 and result["jobsets"] == 2
    assert 0 < result["rollout_s"] <= result["iteration_s"] and result["decisions"] > 0


def test_bench_train_contention_times_threads_quiet_and_beside_a_competitor():
    out = run("scripts/bench_train.py", "--jobsets", "2", "--episodes", "2", "--simu_len", "10", "--repeats", "1",
              "--contention").stdout
    result = json.loads(out.strip().splitlines()[-1])
    for phase in ("as is", "busy"):
        assert result[phase]["default_s"] > 0 and result[phase]["one_thread_s"] > 0 and result[phase]["ratio"] > 0
        assert all(1 <= count <= result["cores"] for count in result[phase]["default_threads"])


def test_bench_maml_times_a_meta_iteration(tmp_path):
    config = tmp_path / "tiny_maml.yaml"
    config.write_text("model:\n  init_args:\n    family: {simu_len: 10}\n    meta_batch: 2\n    inner_jobsets: 2\n"
                      "    inner_episodes: 2\n    outer_jobsets: 2\n    outer_episodes: 2\n")
    out = run("scripts/bench_maml.py", "--config", str(config), "--repeats", "1", "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["meta_batch"] == 2 and result["episodes"] == 2 * (2 * 2 + 2 * 2)
    assert result["meta_iteration_s"] > 0 and len(result["all_s"]) == 2


def test_bench_maml_merges_a_base_and_an_overlay(tmp_path):
    """Repeated --config files merge as in fit.py: the overlay changes inner_steps and keeps the
    base's family and batch sizes (the configs are composed from a base and overlays)."""
    base = tmp_path / "base.yaml"
    base.write_text("model:\n  init_args:\n    family: {simu_len: 10}\n    meta_batch: 2\n    inner_jobsets: 2\n"
                    "    inner_episodes: 2\n    outer_jobsets: 2\n    outer_episodes: 2\n")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("model:\n  init_args:\n    inner_steps: 2\n")
    out = run("scripts/bench_maml.py", "--config", str(base), "--config", str(overlay), "--repeats", "1",
              "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["config"] == [str(base), str(overlay)]
    assert result["meta_batch"] == 2 and result["inner_steps"] == 2 and result["episodes"] == 2 * (2 * 2 * 2 + 2 * 2)


def figures_here(monkeypatch, *argv) -> None:
    """scripts/figures.py with `argv`, in this process (it reads sys.argv), run from the checkout."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["scripts/figures.py", *argv])
    script_main("figures")()


def test_figures_for_the_upgraded_recipe(tmp_path, monkeypatch):
    """load_sweep (slowdown and SLO figures, paired difference to the best heuristic), ablation,
    cdf and recipes, each on a few jobsets, write their PNG and JSON."""
    ckpt = "RL=checkpoints/reinforce_slowdown.ckpt"
    common = ("--jobsets", "3", "--threads", "1")
    figures_here(monkeypatch, "load_sweep", "--loads", "0.5", "--heuristics", "tetris", "edf", "--ckpt", ckpt,
        "--out", str(tmp_path / "sweep_slowdown.png"), *common)
    sweep = json.loads((tmp_path / "sweep_slowdown.json").read_text())
    assert (tmp_path / "sweep_slo.png").exists()
    assert set(sweep["slo_hit_rate"]) == {"tetris", "edf", "RL"}
    vs = sweep["versus_best_heuristic"]["RL"]["0.5"]
    assert vs["best_heuristic"] in ("tetris", "edf") and vs["ci95"] >= 0
    figures_here(monkeypatch, "ablation", "--loads", "0.7", "1.1", "--ckpt", ckpt, "--out", str(tmp_path / "abl.png"),
        *common)
    ablation = json.loads((tmp_path / "abl.json").read_text())["results"]
    assert set(ablation) == {"tetris", "edf", "RL"} and set(ablation["RL"]) == {"0.7", "1.1"}
    figures_here(monkeypatch, "cdf", "--loads", "0.9", "--heuristics", "tetris", "--ckpt", ckpt,
        "--out", str(tmp_path / "cdf.png"), *common)
    cdf = json.loads((tmp_path / "cdf.json").read_text())["results"]["0.9"]
    assert 0 <= cdf["RL"]["share_slowdown_le_2"] <= 1 and cdf["tetris"]["p99"] >= cdf["tetris"]["median"] >= 1
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("step,perf/iteration_s,eval/mean_slowdown,eval/slo_hit_rate,eval/tetris/mean_slowdown\n"
                       "0,2.0,,,\n1,3.0,,,\n1,,5.0,0.4,3.5\n2,4.0,,,\n3,1.0,,,\n3,,4.0,0.5,3.5\n")
    figures_here(monkeypatch, "recipes", "--runs", f"a={metrics}", "--out", str(tmp_path / "rec.png"), "--threads", "1")
    curve = json.loads((tmp_path / "rec.json").read_text())["curves"]["a"]
    assert curve["iteration"] == [2, 4] and curve["wall_s"] == [5.0, 10.0] and curve["slowdown"] == [5.0, 4.0]
    # one Tetris line for two runs is right only when they validate on the same jobsets
    other = tmp_path / "other.csv"
    other.write_text(metrics.read_text().replace(",3.5\n", ",6.25\n"))
    with pytest.raises(ConfigError, match=r"runs a and b validate on different jobsets \(tetris 3.5 vs 6.25\)"):
        figures_here(monkeypatch, "recipes", "--runs", f"a={metrics}", f"b={other}", "--out", str(tmp_path / "r2.png"),
                     "--threads", "1")


def test_headroom_continues_the_adaptation_figures_curve(tmp_path, monkeypatch):
    """headroom fine-tunes one checkpoint on the adaptation figure's held-out workloads with the
    same seeds: with the same settings its steps are the figure's curve for that checkpoint."""
    ckpt = "checkpoints/reinforce_mixture_masked.ckpt"
    tiny = ("--steps", "2", "--jobsets", "2", "--episodes", "2", "--eval_jobsets", "3", "--heuristics", "tetris",
            "--threads", "1")
    figures_here(monkeypatch, "adaptation", "--ckpt", f"mixture={ckpt}", "--out", str(tmp_path / "ad.png"), *tiny)
    figures_here(monkeypatch, "headroom", "--ckpt", ckpt, "--every", "1", "--out", str(tmp_path / "hr.png"), *tiny)
    adaptation = json.loads((tmp_path / "ad.json").read_text())
    headroom = json.loads((tmp_path / "hr.json").read_text())
    assert set(headroom["curves"]) == set(adaptation["curves"]) and len(headroom["curves"]) == 4
    for label, curve in headroom["curves"].items():
        assert list(curve["fine-tuned"]) == ["0", "1", "2"]
        assert curve["fine-tuned"] == adaptation["curves"][label]["mixture"]
        assert headroom["heuristics"][label] == adaptation["heuristics"][label]


def test_select_checkpoint_picks_by_the_worst_load():
    out = run("scripts/select_checkpoint.py", "--ckpt", "checkpoints/reinforce_slowdown.ckpt",
              "checkpoints/reinforce_slowdown_load0.7.ckpt", "--loads", "0.5", "1.5", "--jobsets", "4",
              "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    worst = result["worst"]
    assert result["winner"] == min(worst, key=worst.get)
    for path, scores in result["scores"].items():
        assert worst[path] == max(scores.values())


def test_select_checkpoint_rules_out_a_policy_that_leaves_jobs_unfinished():
    """deadline_abandons_late meets more deadlines than reinforce_slowdown at load 1.5 by leaving
    late jobs until max_time; the selection must not pick it while the other finishes every job."""
    abandons, finishes = "checkpoints/deadline_abandons_late.ckpt", "checkpoints/reinforce_slowdown.ckpt"
    out = run("scripts/select_checkpoint.py", "--ckpt", abandons, finishes, "--metric", "slo_hit_rate",
              "--loads", "1.5", "--jobsets", "10", "--threads", "1").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["unfinished_jobs"][abandons] > 0 and result["unfinished_jobs"][finishes] == 0
    assert result["worst"][abandons] > result["worst"][finishes]  # it would win on the score alone
    assert result["winner"] == finishes


def test_figures_trace_takes_the_shared_trace_flags_and_its_old_names(tmp_path):
    """`figures.py trace` reads its trace through the trace flags evaluate.py and adapt.py take;
    its old --capacity/--split still name --trace_capacity/--trace_split."""
    lines = ["; MaxProcs: 64"]
    for j in range(1, 301):  # a job every 2 minutes, 1..16 processors, 1..30 minutes
        lines.append(f"{j} {120 * j} 0 {60 * (1 + j % 30)} {1 + j % 16} -1 -1 -1 -1 -1 1 1 1 1 1 1 -1 -1")
    trace = tmp_path / "jobs.swf"
    trace.write_text("\n".join(lines) + "\n")
    common = ("scripts/figures.py", "trace", "--trace", str(trace), "--seconds_per_step", "300", "--simu_len", "20",
              "--compressions", "1", "2", "--heuristics", "tetris", "sjf", "--jobsets", "3", "--threads", "1")
    # the old names, with values the defaults do not have: the run must read them as the shared flags
    run(*common, "--capacity", "processors=64", "--split", "train", "--out", str(tmp_path / "old.png"))
    new = json.loads((tmp_path / "old.json").read_text())
    assert new["split"] == "train" and new["mapping"]["capacity"] == {"processors": 64.0}
    assert [s["time_compression"] for s in new["settings"].values()] == [1.0, 2.0]
    for setting in new["settings"].values():
        assert set(setting["results"]) == {"tetris", "sjf"} and setting["jobs_in_jobsets"] > 0
        assert setting["start_state"] == "log" and setting["carried"]["windows"] == 3  # what the windows carried
    # a log of one's own: its header's 64 processors (NASA's 128 only without --trace), --compressions alone
    run(*common, "--out", str(tmp_path / "own.png"))
    assert json.loads((tmp_path / "own.json").read_text())["mapping"]["capacity"] == {"processors": 64.0}
    refused = run(*common, "--time_compression", "3", "--out", str(tmp_path / "x.png"), check=False)
    assert refused.returncode == 2 and "figures.py trace compares --compressions" in refused.stderr
    unstepped = [a for a in common if a not in ("--seconds_per_step", "300")]
    refused = run(*unstepped, "--out", str(tmp_path / "y.png"), check=False)
    assert refused.returncode == 2 and "--trace needs --seconds_per_step" in refused.stderr


# ----- outputs and bad input -----------------------------------------------------------------------------
def tiny_trace(folder: Path) -> Path:
    """An SWF trace of 300 jobs, one every 2 minutes, 1..16 of 64 processors, 1..30 minutes."""
    lines = ["; MaxProcs: 64"]
    for j in range(1, 301):
        lines.append(f"{j} {120 * j} 0 {60 * (1 + j % 30)} {1 + j % 16} -1 -1 -1 -1 -1 1 1 1 1 1 1 -1 -1")
    trace = folder / "jobs.swf"
    trace.write_text("\n".join(lines) + "\n")
    return trace


def one_line_error(proc, *named):
    """The run failed with exit code 2 and one line on stderr naming each of `named`."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, f"{proc.returncode}:\n{proc.stderr}"
    for text in named:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", ["simu_len 1500", "arrival 2**62", "random bytes", "truncated",
                                  "jobset random bytes", "B=0", "episodes 0", "threads 0", "adapt lr -1",
                                  "adapt out is ckpt", "adapt out exists", "select jobsets 0", "figures lr -1",
                                  "load 1e9"])
def test_scripts_report_bad_input_in_one_line(tmp_path, case):
    """Bad input ends in one line naming the file or the field and the value, exit code 2. Jobs
    arriving after max_time (simu_len 1500) gave mean slowdown -38.74 with exit code 0."""
    ckpt = tmp_path / "policy.ckpt"
    ckpt.write_bytes((ROOT / "checkpoints" / "reinforce_slowdown.ckpt").read_bytes())
    noise = tmp_path / "noise.ckpt"
    noise.write_bytes(bytes(range(256)) * 16)
    truncated = tmp_path / "cut.ckpt"
    truncated.write_bytes(ckpt.read_bytes()[:5000])
    taken = tmp_path / "taken.ckpt"
    taken.write_bytes(b"mine")
    ones = torch.ones(2, 3, dtype=torch.long)
    JobSet(torch.zeros(0, 3, dtype=torch.long), ones[:0], ones[:0, :, None].expand(0, 3, 2)).save(tmp_path / "b0.pt")
    late = torch.zeros(2, 3, dtype=torch.long)
    late[1, 2] = 2**62
    JobSet(late, ones, ones[:, :, None].expand(2, 3, 2)).save(tmp_path / "late.pt")
    evaluate = ("scripts/evaluate.py", "--jobsets", "2", "--threads", "1")
    saved = ("scripts/evaluate.py", "--threads", "1")  # a --jobset_file run takes no --jobsets
    adapt = ("scripts/adapt.py", "--ckpt", str(ckpt), "--threads", "1")
    command, named = {
        "simu_len 1500": ((*evaluate, "--policy", "sjf", "--simu_len", "1500", "--load", "0.3", "--json"),
                          ("simu_len=1500", "max_time=1000")),
        "arrival 2**62": ((*saved, "--policy", "sjf", "--jobset_file", str(tmp_path / "late.pt")),
                          (f"JobSet.arrival[1, 2] = {2**62}", "max_time=1000")),
        "random bytes": ((*evaluate, "--policy", str(noise)), (str(noise), "not a lightning_sched checkpoint")),
        "truncated": ((*evaluate, "--policy", str(truncated)), (str(truncated), "not a lightning_sched checkpoint")),
        "jobset random bytes": ((*saved, "--policy", "sjf", "--jobset_file", str(noise)),
                                (str(noise), "not a JobSet file")),
        "B=0": ((*saved, "--policy", "sjf", "--jobset_file", str(tmp_path / "b0.pt")), ("B=0",)),
        "episodes 0": ((*evaluate, "--policy", "sjf", "--episodes", "0"), ("--episodes", "got 0")),
        "threads 0": (("scripts/evaluate.py", "--policy", "sjf", "--threads", "0"), ("--threads", "got 0")),
        "adapt lr -1": ((*adapt, "--lr", "-1"), ("lr", "-1.0")),
        # a resumable Lightning checkpoint must not become a policy-only file
        "adapt out is ckpt": ((*adapt, "--out", str(ckpt)), (f"--out {ckpt}", "is one of the script's inputs")),
        "adapt out exists": ((*adapt, "--out", str(taken)), (f"--out {taken} exists",)),
        "select jobsets 0": (("scripts/select_checkpoint.py", "--ckpt", str(ckpt), "--jobsets", "0", "--threads", "1"),
                             ("--jobsets", "got 0")),
        "figures lr -1": (("scripts/figures.py", "headroom", "--lr", "-1", "--threads", "1"), ("--lr", "-1")),
        "load 1e9": ((*evaluate, "--policy", "sjf", "--load", "1e9"), ("load=1000000000.0", "would need")),
    }[case]
    # one case as its own process: the line is all a user's terminal shows (Lightning's loggers,
    # Python's warnings and its exit path included)
    line = one_line_error(run(*command, check=False, cwd=tmp_path, own_process=case == "random bytes"), *named)
    assert "Traceback" not in line
    assert taken.read_bytes() == b"mine" and ckpt.read_bytes()[:5000] == truncated.read_bytes()


def test_the_traceback_of_an_error_is_there_on_request(tmp_path):
    noise = tmp_path / "noise.ckpt"
    noise.write_bytes(bytes(range(256)) * 16)
    proc = run("scripts/evaluate.py", "--policy", str(noise), "--threads", "1", check=False,
               env={"LIGHTNING_SCHED_TRACEBACK": "1"}, own_process=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "not a lightning_sched checkpoint" in proc.stderr


def test_adapt_saves_under_runs_and_compares_with_the_best_heuristic(tmp_path):
    """The adapted checkpoint goes to runs/adapted/ (-2 when taken), never next to the shipped ones;
    the reference line is the best heuristic on the same evaluation jobsets (evaluate.py's seed)."""
    ckpt = ROOT / "checkpoints" / "reinforce_slowdown.ckpt"
    tiny = ("--ckpt", str(ckpt), "--steps", "1", "--jobsets", "1", "--episodes", "2", "--eval_jobsets", "3",
            "--threads", "1", "--json")
    earlier = tmp_path / "runs" / "adapted" / "reinforce_slowdown.ckpt"  # an earlier run's, kept
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"earlier")
    first = run("scripts/adapt.py", *tiny, cwd=tmp_path)
    assert "saving to runs/adapted/reinforce_slowdown-2.ckpt" in first.stdout
    assert earlier.read_bytes() == b"earlier"
    assert load_policy(tmp_path / "runs" / "adapted" / "reinforce_slowdown-2.ckpt")[1] == load_policy(ckpt)[1]
    assert not (ROOT / "checkpoints" / "reinforce_slowdown.adapted.ckpt").exists()
    final = json.loads(first.stdout.strip().splitlines()[-1])
    heuristics = run("scripts/evaluate.py", "--policy", "tetris", "sjf", "packer", "edf", "--jobsets", "3", "--json",
                     "--threads", "1").stdout.strip().splitlines()[-4:]
    best = min((json.loads(line) for line in heuristics), key=lambda s: s["mean_slowdown"])
    assert final["reference"] == {"heuristic": best["policy"], "mean_slowdown": best["mean_slowdown"]}
    assert f"best heuristic {best['policy']}, mean_slowdown {best['mean_slowdown']:.3f}" in first.stdout
    # the difference comes with its paired 95% CI over the evaluation jobsets, in the table and the JSON
    ours = [json.loads(line) for line in heuristics if json.loads(line)["policy"] == best["policy"]][0]
    assert final["minus_reference"]["jobsets"] == 3 and final["minus_reference"]["ci95"] >= 0
    assert abs(final["minus_reference"]["mean"] - (final["mean_slowdown"] - ours["mean_slowdown"])) < 1e-9
    row = [line for line in first.stdout.splitlines() if line.startswith("step 1 ")][0]
    assert row.rstrip().endswith(f"{final['minus_reference']['mean']:+.3f} ± {final['minus_reference']['ci95']:.3f}")
    assert "paired, 3 jobsets" in first.stdout and "lower is better" in first.stdout


def test_adapt_on_a_trace_names_the_split_it_adapts_on_and_the_one_it_evaluates_on(tmp_path):
    trace = tiny_trace(tmp_path)
    out = run("scripts/adapt.py", "--ckpt", str(ROOT / "checkpoints" / "reinforce_slowdown.ckpt"), "--steps", "1",
              "--jobsets", "1", "--episodes", "2", "--eval_jobsets", "2", "--trace", str(trace),
              "--seconds_per_step", "300", "--simu_len", "20", "--threads", "1", cwd=tmp_path).stdout
    lines = out.splitlines()
    assert lines[0].startswith(f"trace {trace}: ") and "; train split: " in lines[0] and "; test split: " in lines[1]
    adapting, evaluating = lines[2:4]
    assert "split=train" in adapting and "split=test" not in adapting
    assert evaluating.startswith("evaluating on 2 unseen jobsets of TraceWorkload(") and "split=test" in evaluating


def test_figures_without_out_write_under_runs(tmp_path):
    """Without --out a figure goes to runs/figures/ under the working directory, never over docs/figures."""
    docs = ROOT / "docs" / "figures" / "trace_nasa.png"
    before = docs.read_bytes() if docs.exists() else None
    run("scripts/figures.py", "trace", "--trace", str(tiny_trace(tmp_path)), "--seconds_per_step", "300",
        "--simu_len", "20", "--compressions", "1", "--heuristics", "sjf", "--jobsets", "2", "--threads", "1",
        cwd=tmp_path)
    assert (tmp_path / "runs" / "figures" / "trace_nasa.png").exists()
    assert json.loads((tmp_path / "runs" / "figures" / "trace_nasa.json").read_text())["jobsets"] == 2
    assert (docs.read_bytes() if docs.exists() else None) == before


def test_select_checkpoint_scores_on_the_checkpoints_cluster(tmp_path):
    """A checkpoint of num_slots 5, max_time 60, slo_slowdown 5 is scored on that cluster (it
    crashed on DeepRM's); candidates of different clusters are refused naming the fields."""
    from lightning_sched import ClusterConfig
    from lightning_sched.policies.checkpoints import PolicyRecord
    from lightning_sched.policies.networks import PolicySpec, make_policy

    ckpt = tmp_path / "small.ckpt"
    torch.manual_seed(0)
    net = make_policy(PolicySpec(), ClusterConfig(num_slots=5, max_time=60, slo_slowdown=5.0))
    PolicyRecord.of(net).save(ckpt)
    out = run("scripts/select_checkpoint.py", "--ckpt", str(ckpt), "--loads", "0.5", "--jobsets", "2",
              "--heuristics", "sjf", "--threads", "1").stdout
    assert json.loads(out.strip().splitlines()[-1])["cluster"] == {"num_slots": 5, "max_time": 60, "slo_slowdown": 5.0}
    deeprm = ROOT / "checkpoints" / "reinforce_slowdown.ckpt"
    proc = run("scripts/select_checkpoint.py", "--ckpt", str(ckpt), str(deeprm), "--loads", "0.5", "--jobsets", "2",
               "--threads", "1", check=False)
    one_line_error(proc, "num_slots", "max_time", "slo_slowdown")


def test_evaluate_table_says_units_and_direction_and_stays_aligned_with_long_names(tmp_path):
    long = tmp_path / ("a_checkpoint_with_a_name_longer_than_the_first_column_" * 2 + ".ckpt")
    long.write_bytes((ROOT / "checkpoints" / "reinforce_slowdown.ckpt").read_bytes())
    out = run("scripts/evaluate.py", "--policy", "sjf", str(long), "--jobsets", "3", "--threads", "1").stdout
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    assert "completion (steps)" in lines[header] and "makespan (steps)" in lines[header]
    assert lines[header + 1].count("lower is better") == 3 and lines[header + 1].count("higher is better") == 2
    rows = [line for line in lines[header + 2:] if "±" in line and "paired" not in line]
    assert len(rows) == 2 and len({row.index("±") for row in rows}) == 1  # the columns line up
    assert lines[header].index("mean slowdown") + len("mean slowdown") == lines[header + 1].index("lower") + 15
    assert "(paired 95% CI over 3 jobsets)" in out
    # one jobset gives no interval: "n/a" where the half-width would be, not "nan"
    one = run("scripts/evaluate.py", "--policy", "sjf", "tetris", "--jobsets", "1", "--threads", "1").stdout
    assert "nan" not in one and one.count("± n/a") == 11, one  # 5 metrics of 2 policies, the paired difference


def test_bench_decide_prints_latencies_of_the_checkpoint_and_its_onnx_export():
    out = run("scripts/bench_decide.py", "--threads", "1", "--repeats", "1").stdout
    rows = [line for line in out.splitlines() if " waiting, " in line]
    assert len(rows) == 4 and all("checkpoint (torch)" in r and "ONNX (onnxruntime)" in r for r in rows), out
    for row in rows:  # median / p99, each a positive number of milliseconds
        numbers = [float(x) for x in row.replace("/", " ").split() if x.replace(".", "", 1).isdigit()][-4:]
        assert len(numbers) == 4 and all(n > 0 for n in numbers), row


def test_tune_tetris_prints_each_weight_and_picks_the_lowest_mean(capsys):
    from conftest import script_main

    from lightning_sched import ClusterConfig, DeepRMWorkload, seeds
    from lightning_sched.evaluation import evaluate, make_jobsets
    from lightning_sched.heuristics import Tetris

    script_main("tune_tetris")(["--loads", "0.5", "1.1", "--weights", "0", "100", "--jobsets", "3", "--threads", "1"])
    lines = capsys.readouterr().out.splitlines()
    rows = {" ".join(line.split()[:-3]): [float(v) for v in line.split()[-3:]] for line in lines[1:-1]}
    assert list(rows) == ["tetris w=0", "tetris w=100", "sjf", "packer"]
    best = json.loads(lines[-1])
    assert best["best"] == min(("tetris w=0", "tetris w=100"), key=lambda k: rows[k][2])
    assert abs(best["best_mean"] - rows[best["best"]][2]) < 1e-3  # the table prints 3 decimals
    for name, row in rows.items():
        assert abs(row[2] - (row[0] + row[1]) / 2) < 1e-3  # the mean over loads
    # a cell is Tetris with that weight on the tuning seeds' jobsets of that load
    cfg = ClusterConfig(observation="none")
    jobs = make_jobsets(DeepRMWorkload(load=1.1), 3, seeds.tuning(1))
    direct = evaluate(Tetris(cfg, short_weight=100), cfg, jobs).summary["mean_slowdown"]
    assert abs(direct - rows["tetris w=100"][1]) < 1e-3


def shell_tree(tmp_path: Path) -> dict:
    """tmp_path as a checkout for the shell scripts (they run scripts/ and configs/ from where they are),
    and an environment whose `python` is this interpreter."""
    for name in ("scripts", "configs", "tasks", "callbacks", "lightning_sched"):
        (tmp_path / name).symlink_to(ROOT / name)
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"PATH": path, "HOME": str(tmp_path), "WANDB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}


def test_run_queue_goes_past_a_failed_run_and_says_so_in_its_status(tmp_path):
    env = shell_tree(tmp_path)
    (tmp_path / "broken.yaml").write_text("model:\n  init_args:\n    no_such_field: 1\n")
    proc = subprocess.run(["bash", "scripts/run_queue.sh", "broken.yaml", "configs/smoke.yaml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "broken.yaml failed (logs/broken.log)" in proc.stderr
    assert "1 of 2 runs failed" in proc.stderr
    assert (tmp_path / "runs/smoke/checkpoints/last.ckpt").exists()  # the run after the failed one trained


def test_ablation_evaluate_names_a_variant_without_a_run(tmp_path):
    proc = subprocess.run(["bash", "scripts/ablation.sh", "evaluate"], cwd=tmp_path, env=shell_tree(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "ablation: no best checkpoint of deeprm under runs/deeprm*" in proc.stderr


def test_heuristics_run_on_the_checkpoints_cluster_when_no_size_flag_is_given(tmp_path):
    # fit.py's closing "evaluate it" command of a run on another cluster lists the checkpoint beside
    # the heuristics without size flags: they run on the cluster the checkpoint was trained for
    from lightning_sched import ClusterConfig
    from lightning_sched.policies.checkpoints import PolicyRecord
    from lightning_sched.policies.networks import PolicySpec, make_policy
    cluster = ClusterConfig(observation="none", resource_units=16, max_job_units=16, num_slots=4)
    ckpt = tmp_path / "small.ckpt"
    PolicyRecord.of(make_policy(PolicySpec(masked=True), cluster)).save(ckpt)
    out = run("scripts/evaluate.py", "--policy", "tetris", str(ckpt), "--jobsets", "4", "--simu_len", "10",
              "--json", "--threads", "1").stdout
    rows = [json.loads(line) for line in out.strip().splitlines() if line.startswith("{")]
    assert [row["policy"] for row in rows] == ["tetris", str(ckpt)]
    refused = run("scripts/evaluate.py", "--policy", "tetris", str(ckpt), "--jobsets", "4", "--simu_len", "10",
                  "--resource_units", "10", "--threads", "1", check=False)
    assert refused.returncode == 2 and "DeepRM's image network runs only on" in refused.stderr  # the flags size it


@pytest.mark.parametrize("script", ["evaluate", "adapt"])
def test_env_flag_is_read_alike_by_both_scripts(script, capsys):
    main = script_main(script)
    for argv, expected in ((["--env", "bogus"], "got bogus"), (["--env"], "got nothing"), (["--env=gpu"], "got gpu")):
        with pytest.raises(ConfigError, match=f"^--env must be deeprm or queue, {expected}$"):
            main(argv)
    with pytest.raises(SystemExit):
        main(["--env=queue", "--help"])
    assert f"usage: {script}.py --env queue" in capsys.readouterr().out


def test_a_deadline_policy_gets_a_paired_slo_line_beside_the_heuristic_it_follows(capsys):
    main = script_main("evaluate")
    main(["--policy", "tetris", str(Path(__file__).resolve().parent.parent / "checkpoints" / "best_deadline.ckpt"),
          "--load", "1.5", "--jobsets", "4", "--threads", "1", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert "slo_hit_rate_minus_first" in rows[1] and "mean_slowdown_minus_first" in rows[1]  # its own objective too
