"""`scripts/fit.py` as a user runs it (LightningCLI subprocesses with configs/smoke.yaml), W&B
offline files, checkpoints reloaded, resumption, DDP on 2 CPU processes, and the faults."""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_in_process

ROOT = Path(__file__).resolve().parent.parent


def fit(*args, tmp_path, check=True, env=None, in_process=False):
    """Run scripts/fit.py in tmp_path (runs/ lands there) on one thread (unless `args` says otherwise);
    `in_process`: in this process (conftest.run_in_process), for a run refused before it trains or
    one without W&B (whose service outlives a run) or signals."""
    base = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
            "WANDB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    command, *rest = args
    if in_process:
        proc = run_in_process(ROOT / "scripts" / "fit.py", [command, "--threads", "1", *rest], tmp_path,
                              {**base, **(env or {})})
    else:
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit.py"), command, "--threads", "1", *rest],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**base, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"fit.py {args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


SMOKE = str(ROOT / "configs" / "smoke.yaml")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One real smoke run shared by the tests that only read what it wrote."""
    tmp = tmp_path_factory.mktemp("smoke")
    proc = fit("fit", "--config", SMOKE, tmp_path=tmp)
    return tmp, proc


def test_smoke_fit_writes_a_wandb_offline_run_and_checkpoints(smoke_run):
    tmp, proc = smoke_run
    runs = list((tmp / "runs" / "smoke" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((tmp / "runs").rglob("*"))
    run = runs[0]
    assert list(run.glob("run-*.wandb")) and (run / "run-" f"{run.name.split('-')[-1]}.wandb").stat().st_size > 0
    # the heuristic-comparison callback logged its figure and table as W&B media
    assert list(run.rglob("learning_curve_*.png")) and list(run.rglob("comparison_*.table.json"))
    table = json.loads(next(run.rglob("comparison_*.table.json")).read_text())
    assert [row[0] for row in table["data"]] == ["policy", "tetris", "sjf", "random"]
    ckpts = {p.name for p in (tmp / "runs").rglob("*.ckpt")}
    assert "last.ckpt" in ckpts and any(n.startswith("best-") for n in ckpts)
    # the end-of-training summary: the best checkpoint, where it is, and the heuristics on the same jobsets
    best = next(p for p in (tmp / "runs" / "smoke" / "checkpoints").glob("best-*.ckpt"))
    summary = proc.stdout[proc.stdout.index("fit done at step 4"):]
    assert f"best checkpoint: runs/smoke/checkpoints/{best.name} (eval/mean_slowdown " in summary
    assert "heuristics on the same 8 validation jobsets, mean_slowdown: tetris " in summary
    # on the workload it trained on (smoke's simu_len), not evaluate.py's DeepRM default
    assert (f"scripts/evaluate.py --policy runs/smoke/checkpoints/{best.name} tetris sjf --jobsets 200 "
            "--simu_len 10\n") in summary + "\n"


def test_last_checkpoint_is_the_latest_state_not_the_best(tmp_path):
    # monitoring the iteration counter (mode min), the best stays at the first validation (step 2)
    fit("fit", "--config", SMOKE, "--trainer.logger", "false", "--checkpoint.monitor", "iteration",
        "--checkpoint.dirpath", str(tmp_path / "ck"), tmp_path=tmp_path, in_process=True)
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["best-2.ckpt", "last.ckpt"], names
    assert torch.load(tmp_path / "ck" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 4


def test_best_checkpoint_without_monitor_and_save_last(tmp_path):
    # no monitor on the best-checkpoint callback: it and the latest one keep distinct states
    fit("fit", "--config", SMOKE, "--trainer.logger", "false", "--checkpoint.monitor", "null",
        "--checkpoint.dirpath", str(tmp_path / "ck"), tmp_path=tmp_path, in_process=True)
    assert torch.load(tmp_path / "ck" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 4
    proc = fit("fit", "--config", SMOKE, "--checkpoint.save_last", "true", tmp_path=tmp_path, check=False,
               in_process=True)
    assert proc.returncode != 0 and "checkpoint.save_last=True" in proc.stderr + proc.stdout


def test_checkpoint_reloads_for_evaluation(smoke_run):
    tmp, _ = smoke_run
    ckpt = next((tmp / "runs").rglob("last.ckpt"))
    data = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert data["global_step"] == 4
    from lightning_sched.policies.checkpoints import load_policy

    policy, cfg = load_policy(ckpt)
    assert cfg.objective == "slowdown"
    state = data["state_dict"]
    assert torch.equal(policy.net.first.weight, state["net.first.weight"])
    out = subprocess.run([sys.executable, "scripts/evaluate.py", "--policy", str(ckpt), "tetris", "--jobsets", "6",
                          "--simu_len", "10", "--json", "--threads", "1"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    first = json.loads(out.stdout.strip().splitlines()[-2])
    assert first["policy"] == str(ckpt) and first["mean_slowdown"] >= 1 and first["num_jobs"] > 0


def test_fit_resumes_from_a_checkpoint_in_its_run_folder(smoke_run, tmp_path):
    tmp, _ = smoke_run
    shutil.copytree(tmp / "runs" / "smoke", tmp_path / "runs" / "smoke")
    fit("fit", "--config", SMOKE, "--trainer.max_steps", "6", "--ckpt_path", "runs/smoke/checkpoints/last.ckpt",
        tmp_path=tmp_path)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["smoke"]
    resumed = torch.load(tmp_path / "runs" / "smoke" / "checkpoints" / "last.ckpt", map_location="cpu",
                         weights_only=True)
    assert resumed["global_step"] == 6


def test_a_resume_inside_a_warm_start_from_a_sampling_teacher_goes_on_as_the_run_would(tmp_path, fit_main,
                                                                                      monkeypatch):
    config = tmp_path / "teacher.yaml"  # the slot checkpoint acts sampled: its draws must not start again
    config.write_text(f"""model:
  class_path: tasks.reinforce.Reinforce
  init_args:
    workload: {{load: 0.9, simu_len: 10}}
    policy: {{kind: slots, hidden: [16], masked: true}}
    num_jobsets: 3
    episodes_per_jobset: 3
    imitation: {{teacher: {ROOT / "checkpoints" / "slots_slowdown.ckpt"}, iterations: 4}}
    iterations_per_epoch: 2
    evaluation: {{val_jobsets: 4, test_jobsets: 4}}
trainer: {{max_steps: 4, val_check_interval: 1, logger: false}}
compare: {{heuristics: [sjf]}}
""")
    # fit.py in this process: the resumed run starts from the state the first one left, as a new process would
    for folder, more in (("through", []), ("resumed", ["--trainer.max_steps", "2"]),
                         ("resumed", ["--ckpt_path", "runs/teacher/checkpoints/last.ckpt"])):
        (tmp_path / folder).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / folder)
        fit_main(["fit", "--config", str(config), "--threads", "1", *more])
    a, b = (torch.load(tmp_path / folder / "runs" / "teacher" / "checkpoints" / "last.ckpt", map_location="cpu",
                       weights_only=True) for folder in ("through", "resumed"))
    assert a["global_step"] == b["global_step"] == 4
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key


def test_iterations_after_the_last_validation_are_saved_when_training_ends(tmp_path):
    fit("fit", "--config", SMOKE, "--trainer.max_steps", "3", "--trainer.logger", "false", tmp_path=tmp_path,
        in_process=True)
    last = torch.load(tmp_path / "runs" / "smoke" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 3  # validations at 2 (and 4): the third iteration is on disk all the same


def test_validate_and_test_subcommands(smoke_run):
    tmp, _ = smoke_run
    ckpt = next((tmp / "runs").rglob("last.ckpt"))
    proc = fit("test", "--config", SMOKE, "--ckpt_path", str(ckpt), "--trainer.logger", "false", tmp_path=tmp,
               in_process=True)
    assert "test/mean_slowdown" in proc.stdout
    # validate reproduces, from last.ckpt, the validation the run logged at its last step
    proc = fit("validate", "--config", SMOKE, "--ckpt_path", str(ckpt), "--trainer.logger", "false", tmp_path=tmp,
               in_process=True)
    shown = next(line for line in proc.stdout.splitlines() if "eval/mean_slowdown " in line)
    logged = [r for r in csv.DictReader((ckpt.parent.parent / "metrics.csv").open()) if r.get("eval/mean_slowdown")]
    assert float(shown.split("│")[2]) == pytest.approx(float(logged[-1]["eval/mean_slowdown"]), rel=1e-6)


def test_checkpoint_with_another_cluster_is_refused_naming_the_fields(smoke_run):
    tmp, _ = smoke_run
    ckpt = next((tmp / "runs").rglob("last.ckpt"))
    proc = fit("test", "--config", SMOKE, "--ckpt_path", str(ckpt), "--trainer.logger", "false",
               "--model.init_args.cluster.objective", "completion_time", tmp_path=tmp, check=False, in_process=True)
    assert proc.returncode != 0
    assert "objective (checkpoint 'slowdown', config 'completion_time')" in proc.stderr


def fit_exit(fit_main, capsys, *args) -> tuple[int, str, str]:
    """fit.py's main in this process (it ends with SystemExit: --print_config, or a refusal): (its
    exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as stopped:
        fit_main(["fit", *args])
    out = capsys.readouterr()
    return stopped.value.code or 0, out.out, out.err


def test_a_monitor_the_validation_never_logs_is_refused_before_training(fit_main, capsys, tmp_path):
    code, _, err = fit_exit(fit_main, capsys, "--config", SMOKE, "--checkpoint.monitor", "eval/mean_slowdwn")
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "error: checkpoint.monitor: Reinforce's validation logs no 'eval/mean_slowdwn' (it logs eval/makespan, ")
    assert not any((tmp_path / "runs").glob("*"))  # refused before any iteration; the new run folder removed


def test_print_config_and_unknown_keys(fit_main, capsys):
    code, out, _ = fit_exit(fit_main, capsys, "--config", SMOKE, "--print_config")
    assert code == 0 and "class_path: tasks.reinforce.Reinforce" in out and "episodes_per_jobset: 4" in out
    code, _, err = fit_exit(fit_main, capsys, "--config", SMOKE, "--model.init_args.bogus_knob", "3")
    assert code != 0 and "bogus_knob" in err
    code, _, err = fit_exit(fit_main, capsys, "--config", SMOKE, "--model.init_args.num_jobsets", "many")
    assert code != 0 and "num_jobsets" in err
    # a workload's own refusal, from inside jsonargparse's union of workload classes: one line
    code, _, err = fit_exit(fit_main, capsys, "--config", str(ROOT / "configs" / "trace_nasa.yaml"),
                            "--model.workload.init_args.path", "no_such_log.swf")
    assert code != 0 and err.strip() == ("error: no_such_log.swf: cannot read the trace (No such file or directory); "
                                         "the logs the docs use: docs/hpc_queue.md, 'The logs'")


def test_a_maml_config_keeps_maml_defaults_and_no_config_means_reinforce(fit_main, capsys):
    """A config picking tasks.maml.MAML gets MAML's own defaults (normalize_advantage True), not
    Reinforce's values for the arguments both modules have; with no config, Reinforce is trained."""
    import yaml

    def model(*args) -> dict:
        code, out, err = fit_exit(fit_main, capsys, *args, "--print_config")
        assert code == 0, err
        return yaml.safe_load(out)["model"]

    maml = model("--config", str(ROOT / "configs" / "base" / "maml.yaml"), "--config",
                 str(ROOT / "configs" / "maml_masked.yaml"))
    assert maml["class_path"] == "tasks.maml.MAML" and maml["init_args"]["normalize_advantage"] is True
    plain = model()
    assert plain["class_path"] == "tasks.reinforce.Reinforce" and plain["init_args"]["normalize_advantage"] is False
    tuned = model("--model.num_jobsets", "5")
    assert tuned["class_path"] == "tasks.reinforce.Reinforce" and tuned["init_args"]["num_jobsets"] == 5


def test_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    from lightning.pytorch import Callback, Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_sched import DeepRMWorkload
    from tasks.base import EvaluationSettings
    from tasks.reinforce import Reinforce

    class Poison(Callback):
        """Breaks a weight before the third iteration, as a diverging run would."""

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2:
                with torch.no_grad():
                    pl_module.net.first.weight[0, 0] = float("nan")

    module = Reinforce(workload=DeepRMWorkload(simu_len=10), num_jobsets=2, episodes_per_jobset=2,
                       evaluation=EvaluationSettings(val_jobsets=4))
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)  # no monitor: saves at every validation
    trainer = Trainer(max_steps=10, val_check_interval=1, check_val_every_n_epoch=None, logger=False,
                      enable_progress_bar=False, callbacks=[Poison(), checkpoint], num_sanity_val_steps=0)
    with pytest.raises(FloatingPointError, match="non-finite loss .* iteration 2"):
        trainer.fit(module)
    last = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 2
    assert all(bool(torch.isfinite(v).all()) for v in last["state_dict"].values())


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_splits_jobsets_and_keeps_parameters_identical(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    # with the default logger (W&B offline), whose run exists on rank 0 only
    fit("fit", "--config", SMOKE, "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.callbacks+=tests.ddp_probe.ParameterProbe", tmp_path=tmp_path, env={"DDP_PROBE_DIR": str(probe)})
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["smoke"]  # both ranks in rank 0's run folder
    last = torch.load(tmp_path / "runs/smoke/checkpoints/last.ckpt", map_location="cpu", weights_only=True)
    assert last["wandb_run_id"] and last["global_step"] == 4
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["step"] for r in ranks] == [4, 4]
    assert [r["epoch"] for r in ranks] == [1, 1]  # every rank runs all 4 iterations of an epoch, as one process does
    assert ranks[0]["jobsets"] == ranks[1]["jobsets"] == 2  # num_jobsets 4 split over 2 ranks
    assert (ranks[0]["arrivals"], ranks[0]["durations"]) != (ranks[1]["arrivals"], ranks[1]["durations"])
    for a, b in zip(ranks[0]["params"], ranks[1]["params"]):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-6)


@pytest.mark.slow
def test_queue_ppo_under_ddp_with_easy_backfilling_takes_as_many_steps_on_every_rank(tmp_path):
    """With EASY the ranks' episodes make different numbers of decisions; every backward averages the
    ranks' gradients, so each rank must take the same number of minibatch steps (or the ranks wait on
    each other for ever)."""
    from test_queue_env import write_log

    probe = tmp_path / "probe"
    probe.mkdir()
    log = write_log(tmp_path / "busy.swf", jobs=400, nodes=32, seed=2)
    fit("fit", "--config", str(ROOT / "configs" / "base" / "queue.yaml"), "--model.init_args.log", str(log),
        "--model.init_args.backfill", "easy", "--model.init_args.window", "16",
        "--model.init_args.sequence_length", "64",
        "--model.init_args.batch_size", "4", "--model.init_args.ppo.minibatch_size", "8",
        "--model.init_args.validation.sequences", "2", "--model.init_args.validation.sequence_length", "64",
        "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.logger", "false",
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.callbacks+=tests.ddp_probe.ParameterProbe", tmp_path=tmp_path, env={"DDP_PROBE_DIR": str(probe)})
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["step"] for r in ranks] == [2, 2]
    for a, b in zip(ranks[0]["params"], ranks[1]["params"]):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-6)


def test_minibatches_cover_every_decision_and_match_the_ranks_count():
    from tasks.queue_ppo import minibatches

    torch.manual_seed(5)
    before = torch.randperm(10).split(4)  # what one process drew before DDP's count existed
    torch.manual_seed(5)
    assert [b.tolist() for b in minibatches(10, 4, 3, "cpu")] == [b.tolist() for b in before]
    for n, count in ((10, 5), (10, 13), (1, 3)):
        parts = minibatches(n, 4, count, "cpu")
        assert len(parts) == count and all(len(b) > 0 for b in parts)
        assert sorted(set(torch.cat(parts).tolist())) == list(range(n))


def test_warm_start_from_a_checkpoint_and_refusal_of_another_cluster(smoke_run):
    from lightning_sched import ClusterConfig, ConfigError
    from tasks.reinforce import Reinforce

    tmp, _ = smoke_run
    ckpt = next((tmp / "runs").rglob("last.ckpt"))
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    module = Reinforce(init_from=str(ckpt))
    assert torch.equal(module.net.first.weight, saved["net.first.weight"])
    with pytest.raises(ConfigError, match=r"num_slots \(init_from=\S+ 10, run 5\)"):
        Reinforce(cluster=ClusterConfig(num_slots=5), init_from=str(ckpt))
    # another objective trains the same network: allowed
    module = Reinforce(cluster=ClusterConfig(objective="deadline"), init_from=str(ckpt))
    assert torch.equal(module.net.first.weight, saved["net.first.weight"])


def test_a_module_of_another_family_trains_and_resumes_through_fit(tmp_path):
    """fit.py holds nothing of DeepRM's module: another LightningModule (tests/other_task.py, as a
    queue-level task would be) gets the same run folder, checkpoints and resume."""
    args = ("--model", "tests.other_task.OtherTask", "--checkpoint.monitor", "eval/mean_error",
            "--trainer.logger", "false", "--trainer.val_check_interval", "2")
    proc = fit("fit", *args, "--trainer.max_steps", "4", tmp_path=tmp_path, in_process=True)
    assert "model        OtherTask, 1 parameters" in proc.stdout
    run = tmp_path / "runs" / "fit"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best-4.ckpt", "last.ckpt"]
    fit("fit", *args, "--trainer.max_steps", "6", "--ckpt_path", "runs/fit/checkpoints/last.ckpt", tmp_path=tmp_path,
        in_process=True)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["fit"]
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 6
