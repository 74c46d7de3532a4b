"""The run-folder, resume and parse-error logic `scripts/fit.py` uses (callbacks/run_folder.py,
callbacks/resume.py, callbacks/cli.py), called directly: no Trainer, no subprocess.
tests/test_run_folder.py runs the same behaviour end to end."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch
from jsonargparse import Namespace

from callbacks.checkpoints import resume_command
from callbacks.cli import DEFAULT_MODEL, config_error, one_line, with_default_model
from callbacks.resume import check_checkpoint_model, read_training_checkpoint
from callbacks.run import run_callbacks
from callbacks.run_folder import RUN_DIR_ENV, RunFolders, run_loggers, run_name, run_of_checkpoint
from lightning_sched import ConfigError

WANDB = "lightning.pytorch.loggers.WandbLogger"


@pytest.fixture(autouse=True)
def own_run_dir_env(monkeypatch):
    """RunFolders.choose hands its folder to DDP processes through the environment: keep it per test."""
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def a_run(folder: Path) -> Path:
    """A finished run folder: config.yaml and checkpoints/last.ckpt."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text("model: {}\n")
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    return folder


# ----- the run folder --------------------------------------------------------------------------

@pytest.mark.parametrize("configs, subcommand, name", [
    (["configs/base/deeprm.yaml", "configs/deeprm_slowdown.yaml"], "fit", "deeprm_slowdown"),
    ([], "fit", "fit"),
    (["configs/smoke.yaml"], "test", "smoke-test"),
    ([], "validate", "validate"),
])
def test_a_run_is_named_after_its_last_config_and_subcommand(configs, subcommand, name):
    assert run_name(configs, subcommand) == name


def test_each_new_run_claims_the_next_free_folder(tmp_path):
    folders = RunFolders(tmp_path / "runs")
    claimed = [folders.choose("fit", ["configs/smoke.yaml"], None, None) for _ in range(3)]
    assert [p.name for p in claimed] == ["smoke", "smoke-2", "smoke-3"]
    assert all(p.is_dir() for p in claimed) and os.environ[RUN_DIR_ENV] == str(claimed[-1])


def test_a_resume_goes_back_into_the_run_folder_of_its_checkpoint(tmp_path):
    run = a_run(tmp_path / "runs" / "smoke")
    ckpt = str(run / "checkpoints" / "last.ckpt")
    assert run_of_checkpoint(ckpt) == run
    assert RunFolders(tmp_path / "runs").choose("fit", ["configs/smoke.yaml"], None, ckpt) == run
    # a checkpoint outside a run folder (a shipped one) starts a new run
    loose = tmp_path / "elsewhere.ckpt"
    loose.write_bytes(b"")
    assert run_of_checkpoint(str(loose)) is None
    assert RunFolders(tmp_path / "runs").choose("fit", ["configs/smoke.yaml"], None, str(loose)).name == "smoke-2"


def test_a_named_folder_holding_a_run_is_refused_unless_resumed(tmp_path):
    run = a_run(tmp_path / "mine")
    with pytest.raises(ConfigError, match=r"--trainer.default_root_dir .*mine already holds a run .*config.yaml"):
        RunFolders().choose("fit", [], str(run), None)
    assert RunFolders().choose("fit", [], str(run), str(run / "checkpoints" / "last.ckpt")) == run
    assert RunFolders().choose("fit", [], str(tmp_path / "fresh"), None) == tmp_path / "fresh"
    advice = f"resume it with {resume_command(run, run / 'checkpoints' / 'last.ckpt')}"
    with pytest.raises(ConfigError, match=re.escape(advice)):
        RunFolders().choose("fit", [], str(run), None)
    # checkpoints in a folder of the run's own (its config.yaml's checkpoint.dirpath), the latest by step
    elsewhere = a_run(tmp_path / "elsewhere")
    (elsewhere / "config.yaml").write_text(f"checkpoint:\n  dirpath: {tmp_path / 'ck'}\n")
    (tmp_path / "ck").mkdir()
    for step in (4, 10):
        torch.save({"global_step": step}, tmp_path / "ck" / f"best-{step}.ckpt")
    latest = os.path.relpath(tmp_path / "ck" / "best-10.ckpt")  # by step, not by name
    with pytest.raises(ConfigError, match=re.escape(f"--ckpt_path {latest}")):
        RunFolders().choose("fit", [], str(elsewhere), None)
    # a folder of another tool's (or a run's) metrics or hyperparameters is not written over either
    for name in ("metrics.csv", "hparams.yaml"):
        (tmp_path / name / name).parent.mkdir()
        (tmp_path / name / name).write_text("a,b\n1,2\n")
        with pytest.raises(ConfigError, match=f"already holds a run .*{name}"):
            RunFolders().choose("fit", [], str(tmp_path / name), None)
    killed = tmp_path / "killed"  # stopped before its first checkpoint: nothing to resume
    (killed / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="it saved no checkpoint to resume .*: remove it, or name another folder"):
        RunFolders().choose("fit", [], str(killed), None)


def test_a_run_never_writes_over_another_runs_checkpoints(tmp_path):
    from callbacks.run_folder import require_own_checkpoints

    other = a_run(tmp_path / "other") / "checkpoints"
    with pytest.raises(ConfigError, match=r"--checkpoint.dirpath .*other/checkpoints holds checkpoints \(last.ckpt\) "
                                          "this run would overwrite"):
        require_own_checkpoints(other, None)
    with pytest.raises(ConfigError, match="holds checkpoints"):  # resuming another run's file
        require_own_checkpoints(other, str(a_run(tmp_path / "third") / "checkpoints" / "last.ckpt"))
    require_own_checkpoints(other, str(other / "last.ckpt"))  # its own resume
    require_own_checkpoints(tmp_path / "empty", None)
    torch.save({"global_step": 6}, other / "last.ckpt")
    torch.save({"global_step": 4}, other / "best-4.ckpt")
    with pytest.raises(ConfigError, match=r"--ckpt_path .*best-4.ckpt would rewind the run whose checkpoints are in "
                                          r".*other/checkpoints, which stands at step 6"):
        require_own_checkpoints(other, str(other / "best-4.ckpt"))  # a rewind, or a branch writing into it


def test_a_ddp_process_takes_the_folder_rank_zero_chose(tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "runs" / "smoke"))
    monkeypatch.setenv("LOCAL_RANK", "1")
    folders = RunFolders(tmp_path / "runs")
    assert folders.choose("fit", ["configs/smoke.yaml"], None, None) == tmp_path / "runs" / "smoke"
    assert not (tmp_path / "runs").exists() and folders.created == []


def test_unwritable_folders_are_named_and_empty_ones_made_are_removed(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    folders = RunFolders(tmp_path / "runs")
    with pytest.raises(ConfigError, match=f"^the checkpoint folder {blocker / 'ck'} is not writable: Not a directory$"):
        folders.require_writable(blocker / "ck", "the checkpoint folder")
    run = folders.choose("fit", ["configs/smoke.yaml"], None, None)
    folders.require_writable(run / "checkpoints", "the checkpoint folder")
    (run / "config.yaml").write_text("")
    kept = folders.choose("fit", ["configs/smoke.yaml"], None, None)
    (kept / "metrics.csv").write_text("")
    folders.remove_unused()
    # the folders this process made go unless they hold a checkpoint or a metric (a config alone resumes nothing)
    assert not run.exists() and kept.is_dir()


def smoke_config(**checkpoint) -> Namespace:
    return Namespace(trainer=Namespace(default_root_dir=None, logger=True), ckpt_path=None,
                     checkpoint=Namespace(dirpath=None, **checkpoint), last_checkpoint=Namespace(dirpath=None))


def test_configure_points_the_trainer_checkpoints_and_loggers_at_the_run(tmp_path):
    config = smoke_config()
    run = RunFolders(tmp_path / "runs").configure(config, "fit", ["configs/smoke.yaml"], wandb_id="abc123")
    assert run == tmp_path / "runs" / "smoke" and config.trainer.default_root_dir == str(run)
    assert config.checkpoint.dirpath == config.last_checkpoint.dirpath == str(run / "checkpoints")
    wandb, csv = config.trainer.logger
    assert wandb.class_path == WANDB and wandb.init_args.save_dir == str(run) and wandb.init_args.id == "abc123"
    assert wandb.init_args.project == "lightning_sched"
    assert csv.class_path == "callbacks.run.RunCSVLogger" and csv.init_args.save_dir == str(run)
    with pytest.raises(ConfigError, match=r"checkpoint.save_last=True: last.ckpt is kept by last_checkpoint"):
        RunFolders(tmp_path / "runs").configure(smoke_config(save_last=True), "fit", [], None)


def test_run_loggers_keep_what_the_user_gave():
    assert [e.class_path for e in run_loggers(False, Path("r"))] == ["callbacks.run.RunCSVLogger"]
    own = Namespace(class_path=WANDB, init_args=Namespace(save_dir="mine", dir=None, id="theirs", version=None))
    csv = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir="x"))
    loggers = run_loggers([own, csv], Path("r"), wandb_id="resumed")
    assert loggers[:2] == [own, csv] and own.init_args.save_dir == "mine" and own.init_args.id == "theirs"
    assert csv.init_args.save_dir == "x" and loggers[2].class_path == "callbacks.run.RunCSVLogger"  # RUN/metrics.csv
    # a CSVLogger named without a folder writes in the run's, not in the directory fit.py runs in
    bare = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir="."))
    assert run_loggers(bare, Path("r"))[0].init_args.save_dir == "r"


def test_an_offline_resume_is_a_wandb_run_of_its_own_in_the_first_ones_group(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # offline
    first = run_loggers(True, tmp_path)[0].init_args
    assert first.offline and first.get("id") is None
    resumed = run_loggers(True, tmp_path, wandb_id="abc", resumed_step=3)[0].init_args
    assert (resumed.id, resumed.group) == ("abc-resumed-3", "abc")
    (tmp_path / "wandb" / "offline-run-20261127_120000-abc-resumed-3").mkdir(parents=True)
    again = run_loggers(True, tmp_path, wandb_id="abc", resumed_step=3)[0].init_args  # the same step again
    assert (again.id, again.group) == ("abc-resumed-3-2", "abc")
    assert run_loggers(True, tmp_path, wandb_id="abc")[0].init_args.id == "abc"  # not a resume: the run's own


# ----- the checkpoint against the config --------------------------------------------------------

def model(class_path="tasks.reinforce.Reinforce", **init_args) -> Namespace:
    args = {"num_jobsets": 4, "cluster.objective": "slowdown", "evaluation.val_jobsets": 8, **init_args}
    namespace = Namespace(class_path=class_path, init_args=Namespace())
    for key, value in args.items():
        namespace.init_args[key] = value
    return namespace


def test_the_same_model_resumes_without_notes():
    assert check_checkpoint_model(model(), model(), "fit", "last.ckpt") == []
    assert check_checkpoint_model(None, model(), "fit", "last.ckpt") == []


def test_a_resume_names_every_model_field_that_differs_and_the_config_to_use(tmp_path):
    run = a_run(tmp_path / "runs" / "smoke")
    ckpt = str(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError) as refused:
        check_checkpoint_model(model(num_jobsets=6), model(), "fit", ckpt)
    assert str(refused.value) == (f"--ckpt_path {ckpt} was trained with other settings: model.num_jobsets "
                                  f"(checkpoint 4, config 6); resume with --config {run / 'config.yaml'}, or leave "
                                  "out --ckpt_path to start a new run")
    with pytest.raises(ConfigError, match="resume with the config it was trained with"):
        check_checkpoint_model(model(num_jobsets=6), model(), "fit", "shipped.ckpt")


def test_a_checkpoint_of_another_module_or_signature_is_refused():
    with pytest.raises(ConfigError, match=r"^--ckpt_path x.ckpt holds a tasks.maml.MAML model; the config trains "
                                          r"tasks.reinforce.Reinforce \(fit.py's default when neither --config nor "
                                          r"--model names one\): give the config it was trained with"):
        check_checkpoint_model(model(), model("tasks.maml.MAML"), "test", "x.ckpt")
    old = model()
    old.dict_kwargs = {"rmsprop_alpha": 0.9}
    with pytest.raises(ConfigError, match=r"no longer takes \(rmsprop_alpha\); it cannot be resumed"):
        check_checkpoint_model(model(), old, "fit", "x.ckpt")
    notes = check_checkpoint_model(model(), old, "test", "x.ckpt")
    assert old.dict_kwargs == {} and notes == ["note: test ignores the checkpoint's arguments that "
                                               "tasks.reinforce.Reinforce no longer takes: rmsprop_alpha"]


def test_testing_a_checkpoint_takes_the_configs_evaluation_and_refuses_another_cluster():
    saved = model(num_jobsets=100)
    notes = check_checkpoint_model(model(**{"evaluation.val_jobsets": 50}), saved, "test", "x.ckpt")
    assert saved.init_args["evaluation.val_jobsets"] == 50 and saved.init_args.num_jobsets == 100
    assert notes == ["note: test uses the checkpoint's settings where the config differs: model.num_jobsets "
                     "(checkpoint 100, config 4)"]
    with pytest.raises(ConfigError, match=r"another cluster: model.cluster.objective \(checkpoint 'slowdown', "
                                          r"config 'deadline'\)"):
        check_checkpoint_model(model(**{"cluster.objective": "deadline"}), model(), "validate", "x.ckpt")


def test_read_checkpoint_names_a_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match=f"^--ckpt_path {tmp_path / 'no.ckpt'}: no such file "
                                          r"\(expected a Lightning checkpoint\)$"):
        read_training_checkpoint(str(tmp_path / "no.ckpt"))
    (tmp_path / "cut.ckpt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ConfigError, match=r"cut.ckpt: not a Lightning checkpoint \(torch.load failed: a zip archive "
                                          r"cut short \(truncated\?\)"):
        read_training_checkpoint(str(tmp_path / "cut.ckpt"))
    torch.save({"global_step": 3, "state_dict": {}, "optimizer_states": [], "loops": {}, "wandb_run_id": "abc"},
               tmp_path / "ok.ckpt")
    assert read_training_checkpoint(str(tmp_path / "ok.ckpt"))["wandb_run_id"] == "abc"


# ----- parsing ------------------------------------------------------------------------------------

def test_jsonargparse_messages_become_one_line_naming_the_key():
    message = ('Parser key "model":\n  Does not validate against any of the types in typing.Union:\n'
               '    - Problem with given class_path \'tasks.reinforce.Reinforce\':\n'
               '        Parser key "num_jobsets":\n          Expected a <class \'int\'>. Got value: many\n'
               '    - Expected a <class \'NoneType\'>')
    assert one_line(message) == "model.num_jobsets: Expected a <class 'int'>. Got value: many"
    assert one_line("unrecognized arguments: --bogus") == "unrecognized arguments: --bogus"


def test_the_default_module_only_when_nothing_picks_one():
    assert with_default_model(["fit"]) == ["fit", f"--model={DEFAULT_MODEL}"]
    assert with_default_model(["fit", "--model.num_jobsets", "5"])[1] == f"--model={DEFAULT_MODEL}"
    for picked in (["fit", "--config", "c.yaml"], ["fit", "--model=tasks.maml.MAML"], ["fit", "-c", "c.yaml"],
                   ["--help"], []):
        assert with_default_model(picked) == picked


def test_config_error_finds_the_cause_jsonargparse_wrapped():
    try:
        try:
            raise ConfigError("ClusterConfig.num_slots must be an integer >= 1, got 0")
        except ConfigError as inner:
            raise ValueError("Problem with given class_path") from inner
    except ValueError as outer:
        assert str(config_error(outer)) == "ClusterConfig.num_slots must be an integer >= 1, got 0"
    assert config_error(RuntimeError("no")) is None


# ----- what the trainer gets ------------------------------------------------------------------------

def test_a_run_adds_its_wandb_id_and_progress_bar_unless_the_config_has_its_own():
    from lightning.pytorch.callbacks import TQDMProgressBar

    def names(**trainer):
        return [type(c).__name__ for c in run_callbacks(Namespace({"callbacks": None, "enable_progress_bar": None,
                                                                   **trainer}))]

    assert names() == ["WandbRunId", "TrainingSummary", "StopEvaluations", "RunProgressBar"]
    assert names(enable_progress_bar=False) == ["WandbRunId", "TrainingSummary", "StopEvaluations"]
    assert names(callbacks=TQDMProgressBar()) == ["TQDMProgressBar", "WandbRunId", "TrainingSummary", "StopEvaluations"]


def test_sigterm_prints_the_command_that_resumes_the_run(monkeypatch):
    from callbacks import LatestCheckpoint

    latest = LatestCheckpoint(dirpath="runs/smoke/checkpoints")
    assert latest.stopped_message(3, "runs/smoke") == "\nstopped by SIGTERM at iteration 3, before any checkpoint"
    latest.last_model_path = "runs/smoke/checkpoints/last.ckpt"
    monkeypatch.setattr(sys, "argv", ["scripts/fit.py", "fit"])
    assert latest.stopped_message(3, "runs/smoke").endswith(
        "saved runs/smoke/checkpoints/last.ckpt. Resume with:\n  python scripts/fit.py fit --config "
        "runs/smoke/config.yaml --ckpt_path runs/smoke/checkpoints/last.ckpt")
    # in the validation after the last iteration: nothing to resume (fit.py refuses it), the validation to run
    assert latest.stopped_message(4, "runs/smoke", validating=True, final=True).endswith(
        "(its validation cut short: the validate command below measures it), its last; saved "
        "runs/smoke/checkpoints/last.ckpt. Validate it with:\n  python scripts/fit.py validate --config "
        "runs/smoke/config.yaml --ckpt_path runs/smoke/checkpoints/last.ckpt --trainer.default_root_dir "
        "runs/smoke-validate")


def test_the_hyperparameters_check_refuses_importable_names_not_logs_or_the_configs_own(tmp_path):
    from callbacks.resume import require_project_classes

    def check(value, given=frozenset()):
        require_project_classes({"hyper_parameters": {"_class_path": "tasks.queue_ppo.QueuePPO", "x": value}},
                                "x.ckpt", given)

    for fine in ("trace.swf.gz", "queue.swf", "sjf+reserve", "cuda:0", "not_a_module.Thing", str(tmp_path)):
        check(fine)  # a log's name ("trace" is a stdlib module), a rule, a device, nothing importable, a folder
    check("torch.float32", given={"torch.float32"})  # the config's own value
    for bad in ("this.Zen", "os.system", "torch.float32"):
        with pytest.raises(ConfigError, match=rf"hyper_parameters.x names '{bad}', a class outside"):
            check(bad)
    (tmp_path / "evil.yaml").write_text("class_path: this.Zen\n")
    with pytest.raises(ConfigError, match="a config file; not read"):
        check(str(tmp_path / "evil.yaml"))


UNION = """Does not validate against any of the Union subtypes
Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
Errors:
  - Does not validate against any of the Union subtypes
    Subtypes: [<class 'lightning_sched.workloads.DeepRMWorkload'>, <class 'lightning_sched.workloads.WorkloadFamily'>, \
<class 'lightning_sched.traces.workload.TraceWorkload'>]
    Errors:
      - DeepRMWorkload.__init__() got an unexpected keyword argument 'path'
      - WorkloadFamily.__init__() got an unexpected keyword argument 'path'
      - {reason}
    Given value type: <class 'jsonargparse._namespace.Namespace'>
  - Expected a <class 'NoneType'>
Given value type: <class 'jsonargparse._namespace.Namespace'>"""


def test_a_value_that_fits_no_class_of_a_union_gives_the_reason_of_the_class_it_was_meant_for():
    # jsonargparse hands a ConfigError raised in a union's branch (a workload: DeepRM's, a family, a
    # trace) on as text only, beside each other branch's refusal
    from lightning_sched import ConfigError

    refused = str(ConfigError("LOG.swf: cannot read the trace (No such file or directory)"))  # raised in a branch
    assert str(config_error(ValueError(UNION.format(reason=refused)))) == refused
    # two branches the value may have been meant for: jsonargparse's type refusal and a refusal of ours
    two = UNION.replace("WorkloadFamily.__init__() got an unexpected keyword argument 'path'",
                        "Expected a <class 'float'>. Got value: (1.5, 0.3)").format(reason=refused)
    assert str(config_error(ValueError(two))) == (f"as WorkloadFamily: Expected a <class 'float'>. Got value: "
                                                   f"(1.5, 0.3); or as TraceWorkload: {refused}")
    # a crash inside a class (no ConfigError of ours) keeps its traceback
    assert config_error(ValueError(UNION.format(reason="'oops'"))) is None
    assert config_error(ValueError("Does not validate against any of the Union subtypes\nsomething else")) is None


def test_lightnings_refusals_of_a_device_or_strategy_are_one_line():
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    gpu = str(config_error(MisconfigurationException("No supported gpu backend found!")))
    assert gpu.startswith("trainer.accelerator: No supported gpu backend found!") and gpu.endswith(
        "use --trainer.accelerator cpu")
    name = ValueError("You selected an invalid accelerator name: `accelerator='gpus'`. Available names are: cpu.")
    outer = RuntimeError("instantiating the trainer")
    outer.__cause__ = name
    assert str(config_error(outer)) == f"trainer: {name}"
    assert config_error(ValueError("another value error")) is None


def test_a_resume_sets_aside_checkpoints_saved_after_its_step(tmp_path, capsys):
    """A run stopped between writing best-<step> and last.ckpt leaves a best file last.ckpt does not
    know: the resume moves it into checkpoints/abandoned/ (never deleted, never overwritten)."""
    from callbacks.run_folder import set_aside_checkpoints_after

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name, step in (("best-1.ckpt", 1), ("best-2.ckpt", 2), ("last.ckpt", 1), ("odd.ckpt", None)):
        if step is None:
            (folder / name).write_bytes(b"not a checkpoint")  # unreadable: left where it is
        else:
            torch.save({"global_step": step}, folder / name)
    (folder / "abandoned").mkdir()
    (folder / "abandoned" / "best-2.ckpt").write_bytes(b"an earlier one")
    set_aside_checkpoints_after(folder, 1)
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["best-1.ckpt", "last.ckpt", "odd.ckpt"]
    assert (folder / "abandoned" / "best-2.ckpt").read_bytes() == b"an earlier one"
    assert torch.load(folder / "abandoned" / "best-2-2.ckpt", weights_only=True)["global_step"] == 2
    assert "best-2.ckpt (step 2) is after the resumed step 1: moved to" in capsys.readouterr().err


def test_an_error_in_training_starts_a_line_of_its_own():
    """The bar stays on its line while it runs; an exception closes it, so the `error: ...` line fit.py
    prints next does not land at the end of the bar's."""
    import io

    from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

    from callbacks.run import RunProgressBar

    bar, out = RunProgressBar(), io.StringIO()
    bar._train_progress_bar = Tqdm(desc="iteration", total=5, file=out, leave=True)
    bar._train_progress_bar.update(2)
    assert not out.getvalue().endswith("\n")
    bar.on_exception(None, None, ValueError("a bad monitor"))
    assert out.getvalue().endswith("\n")
