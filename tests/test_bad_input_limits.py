"""Sizes refused before they cost (one memory budget for a whole run, gzip traces inflated under a
cap), one-line errors with exit code 2 from every script on bad values (bench and tune included),
and inputs that would give meaningless results refused (absurd trace capacities, jobs of no
processors, a trace resource mapped twice, float actions, an integer "_reset"). In-process calls of
the scripts' `main`: fast, and the same code a subprocess runs."""
from __future__ import annotations

import gzip
import sys

import pytest
import torch
from conftest import script_main
from tensordict import TensorDict
from test_bad_input_files import ROOT, SHIPPED
from test_traces import HEADER, swf_line, write

from lightning_sched import ClusterConfig, ClusterEnv, ConfigError, DeepRMWorkload, JobSet
from lightning_sched.evaluation import run_bytes
from lightning_sched.limits import memory_budget
from lightning_sched.traces import TraceError, TraceWorkload, propose_cluster, read_trace

CFG = ClusterConfig(observation="none")


def one_line_exit_2(capsys, call) -> str:
    """Runs `call` as a script does (scripts/_common.run_main): the one stderr line of its exit 2."""
    from _common import run_main

    with pytest.raises(SystemExit) as stopped:
        run_main(call)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1, lines
    return lines[0]


# ----- item: limits --------------------------------------------------------------------------------
def test_one_budget_for_the_whole_run_is_checked_before_drawing(monkeypatch, capsys):
    evaluate = script_main("evaluate")
    parts = run_bytes(CFG, DeepRMWorkload().max_jobs, 20_000, 1)
    # a budget every part fits in alone, but not all of them together
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(int(max(parts.values()) * 1.5)))
    assert sum(parts.values()) > memory_budget() > max(parts.values())
    line = one_line_exit_2(capsys, lambda: evaluate(["--policy", "tetris", "--jobsets", "20000", "--threads", "1"]))
    assert line.startswith("error: evaluate.py would need about") and "jobsets=20000" in line
    monkeypatch.delenv("LIGHTNING_SCHED_MEMORY_BYTES")
    line = one_line_exit_2(capsys, lambda: evaluate(["--policy", "tetris", "--episodes", "100000000"]))
    assert "episodes=100000000" in line and "largest part" in line
    from tasks.reinforce import Reinforce

    with pytest.raises(ConfigError, match="Reinforce's rollouts would need about .*episodes_per_jobset=100000000"):
        Reinforce(episodes_per_jobset=100_000_000)
    from tasks.maml import MAML

    with pytest.raises(ConfigError, match="MAML's rollouts would need about .*meta_batch=8, inner_jobsets=100000"):
        MAML(meta_batch=8, inner_jobsets=100_000)
    for bad in ("1e400", "nan", "-5", "lots"):
        monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", bad)
        with pytest.raises(ConfigError, match=f"LIGHTNING_SCHED_MEMORY_BYTES must be a finite number .*{bad}"):
            memory_budget()


def test_one_work_budget_refuses_hours_before_drawing(monkeypatch, capsys):
    """Time is budgeted as memory is: --resource_units 1000000 (1.9M jobs a jobset, ~13 min a
    policy) refused before any jobset is drawn, naming the field and the estimate; the documented
    sizes pass; LIGHTNING_SCHED_WORK_SECONDS raises the budget."""

    from lightning_sched.deeprm.rollout import rollout_seconds
    from lightning_sched.limits import DEFAULT_WORK_SECONDS, work_budget

    evaluate = script_main("evaluate")

    def never(*args):
        raise AssertionError("jobsets drawn before the work budget was checked")

    monkeypatch.setitem(evaluate.__globals__, "make_jobsets", never)
    line = one_line_exit_2(capsys, lambda: evaluate(["--policy", "tetris", "--resource_units", "1000000",
                                                     "--jobsets", "1", "--threads", "1"]))
    assert line.startswith("error: evaluate.py would take at least about ") and "--resource_units=1000000" in line
    assert "job columns=1908054" in line and "LIGHTNING_SCHED_WORK_SECONDS" in line, line
    from tasks.reinforce import Reinforce

    with pytest.raises(ConfigError, match=r"Reinforce's rollouts would take at least .*cluster.resource_units=100000"):
        Reinforce(cluster=ClusterConfig(resource_units=100_000, max_job_units=10, observation="none"),
                  workload=DeepRMWorkload(resource_units=100_000), num_jobsets=10, episodes_per_jobset=20)
    # the largest documented sizes are far inside the budget: evaluate.py --jobsets 2000 with a
    # network at load 1.9, a training iteration of 100 jobsets x 20 episodes
    poisson = DeepRMWorkload(load=1.9).max_jobs
    assert 3 * rollout_seconds(poisson, 2000, network=True) < DEFAULT_WORK_SECONDS / 100
    assert rollout_seconds(50, 100 * 20, network=True) < DEFAULT_WORK_SECONDS / 1000
    monkeypatch.setenv("LIGHTNING_SCHED_WORK_SECONDS", "1e9")
    assert work_budget() == 1e9
    for bad in ("inf", "0", "soon"):
        monkeypatch.setenv("LIGHTNING_SCHED_WORK_SECONDS", bad)
        with pytest.raises(ConfigError, match=f"WORK_SECONDS must be a finite number of seconds.*{bad}"):
            work_budget()


def test_a_gzip_trace_is_inflated_under_a_cap(tmp_path, monkeypatch):
    lines = HEADER + [swf_line(j, 60 * j, 60, 4) for j in range(1, 2001)]
    path = write(tmp_path / "big.swf.gz", lines, gz=True)
    assert len(gzip.decompress(path.read_bytes())) > 100_000
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", "1000000")  # 100 kB of text at most
    with pytest.raises(TraceError, match=r"big.swf.gz: decompresses to more than 97.7 KiB of text"):
        TraceWorkload.for_cluster(CFG, str(path), 60)
    monkeypatch.delenv("LIGHTNING_SCHED_MEMORY_BYTES")
    TraceWorkload.for_cluster(CFG, str(path), 60)


# ----- item: one line, exit 2 ----------------------------------------------------------------------
@pytest.mark.parametrize("name, args, names", [
    ("tune_tetris", ["--threads", "0"], "--threads"),
    ("tune_tetris", ["--jobsets", "0"], "--jobsets"),
    ("bench_env", ["--repeats", "0"], "--repeats"),
    ("bench_env", ["--steps", "-1"], "--steps"),
    ("bench_env", ["--batch_sizes", "0"], "--batch_sizes"),
    ("bench_train", ["--repeats", "0"], "--repeats"),
    ("bench_maml", ["--config", "missing.yaml"], "--config missing.yaml"),
    ("evaluate", ["--device", "foo"], "--device"),
    ("evaluate", ["--seed", "1e23"], "--seed"),
    ("adapt", ["--ckpt", str(SHIPPED), "--seed", "-1"], "--seed"),
    ("adapt", ["--ckpt", str(SHIPPED), "--steps", "-1"], "--steps"),
    ("adapt", ["--ckpt", str(SHIPPED), "--lr", "0"], "--lr"),
    ("adapt", ["--ckpt", str(SHIPPED), "--select_jobsets", "5"], "--select_jobsets 5 changes nothing"),
    ("select_checkpoint", ["--ckpt", str(SHIPPED), "--loads", "0.5", "2.5"], "--loads 2.5: a selection load"),
    ("evaluate", ["--jobset_file", "saved.pt", "--loa", "0.5"], "--jobset_file saved.pt fixes the jobsets: --load"),
    ("evaluate", ["--jobset_file", "saved.pt", "--simu_len", "7"], "fixes the jobsets: --simu_len would change"),
    ("evaluate", ["--policy", "tetris", "--greedy"], "--greedy/--sample changes nothing"),
    ("evaluate", ["--policy", "sjf", "--idle_rule", "always"], "--idle_rule changes nothing"),
])
def test_every_script_gives_one_line_and_exit_2(capsys, monkeypatch, name, args, names):
    main = script_main(name)
    monkeypatch.setattr(sys, "argv", [name, *args])  # bench_env reads sys.argv
    line = one_line_exit_2(capsys, (lambda: main()) if name == "bench_env" else (lambda: main(args)))
    assert names in line, line


def test_figures_refuse_clashing_names_and_files_of_another_kind(capsys, monkeypatch, tmp_path):
    main = script_main("figures")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    queue_run = tmp_path / "metrics.csv"  # a queue run's columns: no curve the DeepRM figure draws
    queue_run.write_text("step,epoch,eval/mean_bounded_slowdown,train/loss_objective\n0,0,,1.0\n1,0,5.0,\n")
    for args, names in (
            (["load_sweep", "--ckpt", f"a={SHIPPED}", f"a={SHIPPED}"], "--ckpt 'a="),
            (["load_sweep", "--ckpt", f"sjf={SHIPPED}"], "the name 'sjf' is taken"),
            (["load_sweep", "--ckpt", str(SHIPPED)], "expected NAME=PATH"),
            (["learning_curve", "--metrics", str(text)], "notes.txt: not a run's metrics.csv"),
            (["learning_curve", "--metrics", str(queue_run), "--out", str(tmp_path / "c.png")],
             "metrics.csv: no row holds eval/mean_slowdown or train/mean_return (what DeepRM's modules log); "
             "logged: eval/mean_bounded_slowdown, train/loss_objective"),
            (["redraw", str(text)], "notes.txt: not a figure's JSON")):
        monkeypatch.setattr(sys, "argv", ["figures.py", *args, "--jobsets", "1", "--threads", "1"] if args[0] ==
                            "load_sweep" else ["figures.py", *args, "--threads", "1"])
        assert names in one_line_exit_2(capsys, main)
    assert not (tmp_path / "c.png").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is there")
def test_cuda_without_cuda_is_one_line(capsys):
    main = script_main("evaluate")
    assert "CUDA is not available" in one_line_exit_2(capsys, lambda: main(["--device", "cuda"]))


@pytest.mark.parametrize("args, expected", [
    (["--ckpt_path", "POLICY_ONLY"], "is a policy-only checkpoint"),
    (["--config", str(SHIPPED)], f"--config {SHIPPED}: not a YAML config"),
    (["--config", "PYTHON_TAG"], "python.yaml, line 1, column 8: not valid YAML (could not determine a constructor"),
    (["--config", "BROKEN"], "broken.yaml, line 4, column 4: not valid YAML (expected ',' or ']', but got ':')"),
    (["--config", "TYPO"], "model: Option 'num_jobsetz' is not accepted (--config TYPO, line 4)"),
    (["--config", "TYPE", "--model.episodes_per_jobset", "2"],
     "model.num_jobsets: Expected a <class 'int'>. Got value: many (--config TYPE, line 3)"),
    (["--model.num_jobsets", "many"], "model.num_jobsets: Expected a <class 'int'>. Got value: many (`"),
    (["--config", "NESTED"], "model.evaluation.val_jobsets: Expected a <class 'int'>. Got value: some (--config "
                             "NESTED, line 5)"),  # the nested key, not the top-level one of the same name
    (["--config", "TOP"], "(--config TOP, line 1)"),  # a top-level key's value
    (["--trainer.val_check_interval", "0"], "trainer.val_check_interval must be > 0"),
    (["--model.seed", "99999999999999"], "model.seed must be an integer in [0, 2^31), got 99999999999999"),
    (["--ckpt_path", str(ROOT / "checkpoints" / "queue_bsld.ckpt")],
     "holds a tasks.queue_ppo.QueuePPO model; the config trains tasks.reinforce.Reinforce"),
    (["--trainer.max_steps", "-5"], "trainer: `max_steps` must be a non-negative integer or -1"),
    (["--trainer.devices", "0"], "trainer: `Trainer(devices='0')` value is not a valid input"),
])
def test_fit_gives_one_line_and_exit_2(fit_main, capsys, tmp_path, args, expected):
    policy_only = tmp_path / "policy.ckpt"
    torch.save({"lightning_sched": torch.load(SHIPPED, map_location="cpu", weights_only=True)["lightning_sched"]},
               policy_only)
    (tmp_path / "python.yaml").write_text('model: !!python/object/apply:os.system ["touch payload_ran"]\n')
    configs = {"PYTHON_TAG": "python.yaml: model: !!python/object/apply:os.system ['touch payload_ran']",
               "BROKEN": "broken.yaml: model:\n  init_args:\n    num_jobsets: [4\n  x: 1",  # a bracket left open
               "TYPO": "typo.yaml: model:\n  class_path: tasks.reinforce.Reinforce\n  init_args:\n    num_jobsetz: 4",
               "TYPE": "type.yaml: model:\n  init_args:\n    num_jobsets: many",
               "NESTED": "nested.yaml: model:\n  init_args:\n    val_jobsets: 3\n    evaluation:\n"
                         "      val_jobsets: some",
               "TOP": "top.yaml: seed_everything: many"}
    for name, content in configs.items():
        file, text = content.split(": ", 1)
        (tmp_path / file).write_text(text + "\n")
        configs[name] = str(tmp_path / file)
    args = [str(policy_only) if a == "POLICY_ONLY" else configs.get(a, a) for a in args]
    for name in ("TYPO", "TYPE", "NESTED", "TOP"):
        expected = expected.replace(f"--config {name}", f"--config {configs[name]}")
    with pytest.raises(SystemExit) as stopped:
        fit_main(["fit", "--config", str(ROOT / "configs" / "smoke.yaml"), "--trainer.logger", "false", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no folder left


def test_hand_edited_files_are_named(tmp_path):
    from lightning_sched.policies.checkpoints import load_policy

    data = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    cases = {"empty": {"lightning_sched": {}}, "number": {"lightning_sched": 5},
             "field": {"lightning_sched": {**data["lightning_sched"],
                                           "cluster": {**data["lightning_sched"]["cluster"], "cores": 3}}}}
    for name, content in cases.items():
        torch.save(content, tmp_path / f"{name}.ckpt")
        with pytest.raises(ConfigError, match=f"^{tmp_path / name}.ckpt: "):
            load_policy(tmp_path / f"{name}.ckpt")
    torch.save({"arrival": torch.zeros(1, 2, dtype=torch.long), "duration": torch.ones(1, 2, dtype=torch.long),
                "demand": torch.ones(1, 2, 2, dtype=torch.long), "deadline": "soon"}, tmp_path / "jobs.pt")
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'jobs.pt'}: JobSet.deadline must be a tensor, got a str"):
        JobSet.load(tmp_path / "jobs.pt")


# ----- item: meaningless inputs ---------------------------------------------------------------------
@pytest.mark.parametrize("max_procs", ["2000000000", "1e23"])
def test_an_absurd_capacity_is_refused(tmp_path, max_procs):
    path = write(tmp_path / "t.swf", ["; MaxProcs: " + max_procs] + [swf_line(j, 60 * j, 60, 8) for j in range(1, 9)])
    with pytest.raises(TraceError, match=r"capacity of 'processors' \S+ is over 10,000 times the largest job's"):
        TraceWorkload.for_cluster(CFG, str(path), 60)


def test_zero_processor_jobs_are_dropped_and_counted_and_a_resource_named_twice_is_refused(tmp_path):
    # allocated 0 and requested 0: no job; allocated 0 and requested 4: the request, as the queue env reads it
    lines = [swf_line(1, 60, 60, 8), swf_line(2, 120, 60, 0, req_procs=0), swf_line(3, 180, 60, 0, req_procs=4)]
    path = write(tmp_path / "t.swf", HEADER + lines)
    workload = TraceWorkload.for_cluster(CFG, str(path), 60, split="all", windows="consecutive", simu_len=10)
    assert workload.report.kept == 2 and workload.report.dropped["zero_demand"] == 1
    assert workload.sample(1).demand[0, :2, 0].tolist() == [2, 1]  # 8 and 4 of 64 processors, in 10 units
    assert propose_cluster(read_trace(str(path))).jobs == 2  # the proposal sizes on the same jobs
    good = write(tmp_path / "good.swf", HEADER + [swf_line(1, 60, 60, 8, used_mem=10)])
    with pytest.raises(TraceError, match="trace resource 'processors' is named twice"):
        TraceWorkload.for_cluster(CFG, str(good), 60, resources=("processors", "processors"))


def test_the_env_refuses_float_actions_and_an_integer_reset():
    env = ClusterEnv(CFG, DeepRMWorkload(simu_len=10), batch_size=[4])
    td = env.reset()
    with pytest.raises(ConfigError, match=r'"action" must hold integer slot indices, got dtype torch.float32'):
        env.step(td.set("action", torch.full((4,), 0.9)))
    with pytest.raises(ConfigError, match=r'"_reset" must be a bool mask .*torch.int64'):
        env.reset(TensorDict({"_reset": torch.tensor([0, 2, 0, 0])}, batch_size=[4]))
    env.step(td.set("action", torch.zeros(4, dtype=torch.long)))


def test_fit_test_of_a_module_without_a_test_is_one_line(fit_main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the shipped config's logs are relative to the checkout
    with pytest.raises(SystemExit) as stopped:
        fit_main(["test", "--config", "configs/base/queue.yaml", "--config", "configs/queue_bsld.yaml",
                  "--ckpt_path", "checkpoints/queue_bsld.ckpt", "--trainer.logger", "false", "--threads", "1",
                  "--trainer.default_root_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and err[-1] == ("error: QueuePPO has no test: `fit.py validate` runs its "
                                                   "validation, scripts/evaluate.py its evaluation protocols"), err


def test_queue_training_in_another_precision_is_one_line(fit_main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's log is relative to the checkout
    with pytest.raises(SystemExit) as stopped:
        fit_main(["fit", "--config", "configs/queue_smoke.yaml", "--trainer.precision", "bf16-mixed", "--threads", "1",
                  "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and err[-1].startswith("error: trainer.precision bf16-mixed: QueuePPO trains in "
                                                          "32-true"), err


def test_reinforce_with_several_epochs_in_another_precision_is_one_line(fit_main, capsys, tmp_path):
    # the steps before an iteration's last bypass the precision plugin's loss scaling: refused
    with pytest.raises(SystemExit) as stopped:
        fit_main(["fit", "--config", str(ROOT / "configs" / "smoke.yaml"), "--trainer.precision", "bf16-mixed",
                  "--model.init_args.ppo.epochs", "2", "--threads", "1", "--trainer.logger", "false",
                  "--trainer.default_root_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and err[-1].startswith("error: trainer.precision bf16-mixed: Reinforce trains in "
                                                          "32-true or 64-true (with ppo.epochs > 1"), err


def test_evaluate_applies_objective_to_every_policy_and_refuses_another_slo_for_a_checkpoint(capsys):
    """--objective picks the paired metric whatever policy comes first; a network reads its jobs'
    deadlines, so a --slo_slowdown other than its checkpoint's is refused (it was ignored)."""
    evaluate = script_main("evaluate")
    ckpt = str(ROOT / "checkpoints" / "best_slowdown.ckpt")
    for policies in ([ckpt], ["tetris", ckpt]):
        with pytest.raises(ConfigError, match=r"--slo_slowdown 50.0: .*best_slowdown.ckpt sees deadlines at "
                                              r"slo_slowdown 2.0"):
            evaluate(["--policy", *policies, "--slo_slowdown", "50", "--jobsets", "2", "--threads", "1"])
    with pytest.raises(ConfigError, match="the 2 jobsets drawn hold no job"):  # a table of NaN was printed
        evaluate(["--policy", "tetris", "--load", "0.001", "--jobsets", "2", "--threads", "1"])
    evaluate(["--policy", ckpt, "tetris", "--objective", "deadline", "--jobsets", "2", "--threads", "1"])
    out = capsys.readouterr().out
    assert "objective deadline" in out and "slo hit rate - " in out


def test_adapt_refuses_a_step_that_cannot_move_a_repeated_policy_and_a_figure_over_its_output(tmp_path):
    adapt = script_main("adapt")
    with pytest.raises(ConfigError, match="adaptation episodes 1 with TimeIndexedBaseline: .*every advantage is 0"):
        adapt(["--ckpt", str(ROOT / "checkpoints" / "maml.ckpt"), "--steps", "1", "--jobsets", "2", "--episodes", "1",
               "--eval_jobsets", "2", "--threads", "1"])
    log = str(ROOT.parent / "shared" / "traces" / "lublin_256.swf.gz")  # refused before it is read
    with pytest.raises(ConfigError, match="--policy 'scratch' is given twice"):
        adapt(["--env", "queue", "--trace", log, "--policy", "scratch", "scratch", "--steps", "1"])
    with pytest.raises(ConfigError, match="--out .*q.png is also --figure"):
        adapt(["--env", "queue", "--trace", log, "--policy", "scratch", "--steps", "1",
               "--out", str(tmp_path / "q.png"), "--figure", str(tmp_path / "." / "q.png")])


def test_a_queue_adaptation_too_large_for_memory_is_refused_before_its_rollouts(tmp_path):
    from test_queue_env import write_log

    from lightning_sched.queue.adaptation import adaptation_curve
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicySpec

    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    cfg = log.config(sequence_length=64)
    with pytest.raises(ConfigError, match=r"the adaptation's rollouts would need about .*sequences=100000, "
                                          r"episodes=4, sequence_length=64"):
        adaptation_curve(QueueNetwork(QueuePolicySpec()), log, cfg, torch.tensor([300]), 1, 0.1, 100_000, 4,
                         train_jobs=320, seed=0, train_length=64)
