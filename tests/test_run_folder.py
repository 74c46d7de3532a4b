"""A run of `scripts/fit.py` as a user meets it: its folder (config, checkpoints, metrics.csv, W&B
run) and what it prints; resuming it; SIGTERM; a disk that fills while a checkpoint is written;
settings a resume cannot honour; bad values as one-line errors. Real LightningCLI subprocesses with
configs/smoke.yaml."""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import run_script, script_main
from test_fit import ROOT, SMOKE, fit


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def eval_rows(metrics: Path) -> dict[int, float]:
    """eval/mean_slowdown by logged step, the later row winning (as figures.py reads a resumed run)."""
    rows = list(csv.DictReader(metrics.open()))
    return {int(r["step"]): float(r["eval/mean_slowdown"]) for r in rows if r.get("eval/mean_slowdown")}


def test_default_root_dir_holds_the_whole_run_and_start_prints_where(tmp_path):
    run = tmp_path / "runs" / "fit"  # where `make run` (fit without a config) writes
    proc = fit("fit", "--config", SMOKE, "--trainer.default_root_dir", str(run), tmp_path=tmp_path)
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts[-1] == "last.ckpt" and ckpts[0].startswith("best-") and len(ckpts) == 2, ckpts
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 4
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb")), list(run.rglob("*"))
    assert sorted(eval_rows(run / "metrics.csv")) == [1, 3]  # the validations after iterations 2 and 4
    assert "max_steps: 4" in (run / "config.yaml").read_text()
    # nothing beside it (the dot folders are HOME's: the test sets HOME to tmp_path)
    assert {p.name for p in tmp_path.iterdir() if not p.name.startswith(".")} == {"runs"}
    assert list((tmp_path / "runs").iterdir()) == [run]
    printed = proc.stdout
    for where in (str(run), f"{run}/config.yaml", f"{run}/checkpoints", f"{run}/metrics.csv", f"{run}/wandb"):
        assert where in printed, (where, printed[:2000])
    # the bar counts the run's iterations (4), not an epoch's, and the start says nothing the user cannot act on
    assert "iteration: 100%" in printed and "4/4" in printed and "Epoch 0/" not in printed
    for noise in ("No seed found", "litlogger", "anonymous setting", "LeafSpec", "Total FLOPs"):
        assert noise not in proc.stdout + proc.stderr, noise
    # the user's own run makes the learning-curve figure with the default --metrics
    figure = run_script(ROOT / "scripts" / "figures.py", "learning_curve", "--out", tmp_path / "curve.png",
                        "--threads", "1", cwd=tmp_path)
    assert figure.returncode == 0, figure.stderr[-3000:]
    assert (tmp_path / "curve.png").stat().st_size > 0
    # its validation points sit at the steps the checkpoints are named with; the title is this run's
    drawn = json.loads((tmp_path / "curve.json").read_text())
    named = sorted(int(p.stem.split("-")[1]) for p in (run / "checkpoints").glob("best-*.ckpt"))
    assert drawn["curve"]["eval_step"] == [2, 4] and set(named) <= {2, 4}
    assert drawn["title"] == "fit: Reinforce, load 0.7, validation on 8 jobsets"  # smoke.yaml's
    # figures.py's example --metrics path is where a run writes it (runs/<name>/metrics.csv)
    example = re.search(r"learning_curve --metrics (\S+)", (ROOT / "scripts" / "figures.py").read_text()).group(1)
    assert Path(example).parent.parent == Path("runs") and Path(example).name == "metrics.csv"


def test_a_branch_started_from_a_runs_config_writes_only_its_own_folder(tmp_path):
    """config.yaml keeps the checkpoint and logger folders as given: a branch from an older checkpoint
    (the resume refusal's advice) writes checkpoints, metrics and W&B into its own folder."""
    run, branch = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    fit("fit", "--config", SMOKE, "--trainer.default_root_dir", str(run), tmp_path=tmp_path)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert "dirpath: null" in (run / "config.yaml").read_text()
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    proc = fit("fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(best), "--trainer.default_root_dir",
               str(branch), "--trainer.max_steps", "6", tmp_path=tmp_path)
    assert "best checkpoint: runs/b/checkpoints/best-6.ckpt" in proc.stdout  # its own, not the first run's
    proc = fit("fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
               "--trainer.default_root_dir", str(tmp_path / "runs" / "c"), "--trainer.max_steps", "5",
               "--trainer.logger", "false", tmp_path=tmp_path, in_process=True)  # no validation after the branch point
    assert "no best checkpoint of this run" in proc.stdout and "runs/a/checkpoints/best" not in proc.stdout
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # the first run's files, W&B's included, untouched
    assert load(branch / "checkpoints" / "last.ckpt")["global_step"] == 6
    assert max(eval_rows(branch / "metrics.csv")) == 5 and list((branch / "wandb").glob("offline-run-*"))


def test_each_run_gets_its_own_folder_named_after_its_config(tmp_path):
    first = fit("fit", "--config", SMOKE, "--trainer.max_steps", "2", "--trainer.logger", "false",
                "--trainer.enable_progress_bar", "false", tmp_path=tmp_path, in_process=True)
    fit("fit", "--config", SMOKE, "--trainer.max_steps", "2", "--trainer.logger", "false", tmp_path=tmp_path,
        in_process=True)
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["smoke", "smoke-2"]
    for run in runs.iterdir():
        assert (run / "config.yaml").is_file() and (run / "metrics.csv").is_file()
        assert (run / "checkpoints" / "last.ckpt").is_file()
    assert "iteration" not in first.stdout  # no progress bar was asked for, and none crashed the run


def test_sigterm_saves_a_checkpoint_exits_143_and_the_printed_command_resumes_the_same_run(tmp_path):
    proc = fit("fit", "--config", SMOKE, "--trainer.max_steps", "6", "--trainer.callbacks+=tests.faults.SigtermAt",
               "--trainer.callbacks.iteration", "3", tmp_path=tmp_path, check=False)
    assert proc.returncode == 143, proc.stderr[-3000:]
    run = tmp_path / "runs" / "smoke"
    stopped = load(run / "checkpoints" / "last.ckpt")
    assert stopped["global_step"] == 3  # between validations (2 and 4): saved by the SIGTERM itself
    command = proc.stdout.split("Resume with:")[1].strip().splitlines()[0]
    assert "--ckpt_path runs/smoke/checkpoints/last.ckpt" in command
    resumed = subprocess.run([sys.executable, *shlex.split(command)[1:], "--threads", "1"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["smoke"]  # the same folder
    last = load(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 6
    # the best over the whole run, the validations before the stop included
    evals = eval_rows(run / "metrics.csv")
    assert sorted(evals) == [1, 3, 5]
    best = next(v for k, v in last["callbacks"].items() if k.startswith("ModelCheckpoint"))
    assert float(best["best_model_score"]) == pytest.approx(min(evals.values()))
    best_files = list((run / "checkpoints").glob("best-*.ckpt"))
    assert len(best_files) == 1 and best_files[0] == Path(best["best_model_path"])
    # one metrics row per iteration across the stop and the resume (the redone ones replaced)
    iterations = [float(r["iteration"]) for r in csv.DictReader((run / "metrics.csv").open()) if r["iteration"]]
    assert iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # offline, the resume is a W&B run of its own (W&B cannot append to an offline run), in the first's group
    first = stopped["wandb_run_id"]
    folders = sorted(p.name.split("-", 3)[3] for p in (run / "wandb").glob("offline-run-*"))
    assert folders == [first, f"{first}-resumed-3"] and last["wandb_run_id"] == first
    record = next((run / "wandb").glob(f"offline-run-*-{first}-resumed-3/run-*.wandb")).read_bytes()
    assert first.encode() in record.replace(f"{first}-resumed-3".encode(), b"")  # its group


def test_a_stop_right_after_a_validation_resumes_with_the_logged_steps_of_a_run_that_went_through(tmp_path):
    """SIGTERM at the end of iteration 4, whose validation ran (smoke validates every 2): Lightning
    resumes from the state saved at that validation's end and counts the iteration's logging step
    then; a second save after the iteration's end made every later row one step late."""
    proc = fit("fit", "--config", SMOKE, "--trainer.max_steps", "6", "--trainer.logger", "false",
               "--trainer.callbacks+=tests.faults.SigtermAt", "--trainer.callbacks.iteration", "4",
               tmp_path=tmp_path, check=False)
    assert proc.returncode == 143, proc.stderr[-3000:]
    fit("fit", "--config", "runs/smoke/config.yaml", "--ckpt_path", "runs/smoke/checkpoints/last.ckpt",
        tmp_path=tmp_path, in_process=True)
    rows = list(csv.DictReader((tmp_path / "runs" / "smoke" / "metrics.csv").open()))
    steps = [(int(r["step"]), "eval" if r.get("eval/mean_slowdown") else "train") for r in rows]
    assert steps == [(0, "train"), (1, "train"), (1, "eval"), (2, "train"), (3, "train"), (3, "eval"),
                     (4, "train"), (5, "train"), (5, "eval")]


def test_a_disk_filling_up_during_a_checkpoint_write_leaves_the_previous_file_whole(tmp_path):
    """The second write of last.ckpt fails halfway (the file may not grow past 64 KiB). Lightning
    staged it in $TMPDIR and copied it over last.ckpt, leaving 65,536 bytes of it; here the
    previous last.ckpt stays, whole. $TMPDIR on another filesystem where there is one (/dev/shm)."""
    ck = tmp_path / "ck"
    staging = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else tmp_path
    with tempfile.TemporaryDirectory(prefix="stage-", dir=staging) as stage:  # a fresh folder, removed after
        proc = fit("fit", "--config", SMOKE, "--trainer.logger", "false", "--checkpoint.dirpath", str(ck),
                   "--trainer.callbacks+=tests.faults.DiskFullAtSecondWrite", "--trainer.callbacks.folder", str(ck),
                   tmp_path=tmp_path, check=False, env={"TMPDIR": stage})
    assert proc.returncode != 0 and "last.ckpt was left as it was" in proc.stderr, proc.stderr[-3000:]
    assert load(ck / "last.ckpt")["global_step"] == 2
    assert not [p for p in ck.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_a_disk_filling_up_mid_run_is_one_line_and_leaves_the_run_resumable(tmp_path, fit_main, capsys,
                                                                            monkeypatch):
    """From metrics.csv's fifth append on (iteration 5's row, after last.ckpt at step 4) the disk is
    full: the write puts half its row down and fails with ENOSPC. One line naming the file, the
    space left and the resume, exit 2; metrics.csv as before that write (no row cut short, where
    Lightning's CSV logger left 21 of 33 columns and a traceback); the run resumes."""
    import errno

    real_write, appends = os.write, []

    def full_disk(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.csv"):
            appends.append(len(data))
            if len(appends) >= 5:
                real_write(fd, bytes(data)[:len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    run = ["fit", "--config", SMOKE, "--threads", "1", "--trainer.logger", "false", "--trainer.max_steps", "6"]
    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(SystemExit) as stopped:
        fit_main(run)
    monkeypatch.setattr(os, "write", real_write)  # space freed
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert stopped.value.code == 2, line
    assert line.startswith("error: writing runs/smoke/metrics.csv failed ([Errno 28] No space left on device); "
                           "metrics.csv was left as it was; runs/smoke has ") and " MiB free; " in line, line
    assert line.endswith("resume from step 4: python " + shlex.join([sys.argv[0], "fit", "--config",
                         "runs/smoke/config.yaml", "--ckpt_path", "runs/smoke/checkpoints/last.ckpt"])), line
    metrics = tmp_path / "runs" / "smoke" / "metrics.csv"
    text = metrics.read_text()
    rows = list(csv.reader(text.splitlines()))
    assert text.endswith("\n") and all(len(r) == len(rows[0]) for r in rows), rows
    assert [r[rows[0].index("iteration")] for r in rows[1:]] == ["1.0", "2.0", "", "3.0", "4.0", ""]
    assert load(tmp_path / "runs" / "smoke" / "checkpoints" / "last.ckpt")["global_step"] == 4
    fit_main([*run[:1], "--config", "runs/smoke/config.yaml", "--ckpt_path", "runs/smoke/checkpoints/last.ckpt",
              "--threads", "1"])
    iterations = [float(r["iteration"]) for r in csv.DictReader(metrics.open()) if r["iteration"]]
    assert iterations == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_an_unwritable_checkpoint_folder_is_refused_before_training(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = fit("fit", "--config", SMOKE, "--trainer.logger", "false", "--checkpoint.dirpath", str(blocker / "ck"),
               tmp_path=tmp_path, check=False, in_process=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: the checkpoint folder {blocker / 'ck'} is not writable: "
                                                "Not a directory"]
    assert "iteration" not in proc.stdout and not (tmp_path / "runs" / "smoke").exists()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("finished")
    fit("fit", "--config", SMOKE, "--trainer.max_steps", "2", "--trainer.logger", "false", tmp_path=tmp)
    return tmp, tmp / "runs" / "smoke"


def test_a_resume_refuses_model_settings_other_than_the_checkpoints(finished_run):
    tmp, run = finished_run
    ckpt = "runs/smoke/checkpoints/last.ckpt"
    proc = fit("fit", "--config", SMOKE, "--ckpt_path", ckpt, "--model.num_jobsets", "6", "--model.workload.load",
               "1.5", tmp_path=tmp, check=False, in_process=True)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "model.num_jobsets (checkpoint 4, config 6)" in line and "model.workload.load (checkpoint 0.7, config 1.5)" \
        in line and "--config runs/smoke/config.yaml" in line
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 2  # nothing trained


def test_a_checkpoint_of_another_module_is_refused(finished_run):
    tmp, _ = finished_run
    proc = fit("fit", "--config", SMOKE, "--ckpt_path", str(ROOT / "checkpoints" / "image_maml.ckpt"), tmp_path=tmp,
               check=False, in_process=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --ckpt_path {ROOT / 'checkpoints' / 'image_maml.ckpt'} holds a tasks.maml.MAML model; "
        "the config trains tasks.reinforce.Reinforce (fit.py's default when neither --config nor --model names "
        "one): give the config it was trained with (its run's config.yaml)"]


def test_a_checkpoint_can_neither_import_a_module_nor_delete_a_file_outside_its_folder(finished_run, fit_main,
                                                                                     capsys):
    """LightningCLI parses a checkpoint's hyperparameters as the model's config (importing any class
    they name) and a resumed ModelCheckpoint deletes the files its state names as outdated: both are
    checked before Lightning reads the file; so are the weights' shapes (one line, not a traceback).
    fit.py runs in this process: `this` (which prints its poem when imported) must stay unimported."""
    tmp, run = finished_run
    assert "this" not in sys.modules
    good = load(run / "checkpoints" / "last.ckpt")
    victim = tmp / "victim.txt"
    victim.write_text("keep me")
    bad_class = {**good, "hyper_parameters": {**good["hyper_parameters"], "workload": {"class_path": "this.Zen"}}}
    bad_string = {**good, "hyper_parameters": {**good["hyper_parameters"], "workload": "this.Zen"}}  # a class too
    state = {k: dict(v) for k, v in good["callbacks"].items()}
    name = next(k for k in state if k.startswith("ModelCheckpoint"))
    state[name]["best_model_path"] = f"{state[name]['dirpath']}/../../../victim.txt"
    bad_path = {**good, "callbacks": state}
    no_folder = {k: dict(v) for k, v in state.items()}
    del no_folder[name]["dirpath"]  # Lightning would then take the resumed run's folder
    weights = dict(good["state_dict"])
    name = next(iter(weights))
    weights[name] = weights[name].reshape(-1)
    bad_shape = {**good, "state_dict": weights}
    moments = [dict(o) for o in good["optimizer_states"]]
    moments[0]["state"] = {k: {m: t if m == "step" else torch.full_like(t, float("nan")) for m, t in v.items()}
                           for k, v in moments[0]["state"].items()}  # RMSprop's or Adam's moments
    bad_moments = {**good, "optimizer_states": moments}
    for crafted, message in ((bad_class, "hyper_parameters.workload.class_path names 'this.Zen', a class outside "
                                         "lightning_sched, tasks and callbacks that the config does not name"),
                             (bad_string, "hyper_parameters.workload names 'this.Zen', a class outside"),
                             (bad_path, "the state of ModelCheckpoint names"),
                             ({**good, "callbacks": no_folder}, "the state of ModelCheckpoint names"),
                             (bad_shape, f"weight {name} is ({weights[name].numel()},) in the checkpoint"),
                             (bad_moments, ".square_avg holds NaN or infinite values; a checkpoint of "
                                           "non-finite weights (or optimizer state) is never loaded")):
        path = tmp / "crafted.ckpt"
        torch.save(crafted, path)
        for subcommand in ("fit", "validate"):
            with pytest.raises(SystemExit) as stopped:
                fit_main([subcommand, "--config", str(run / "config.yaml"), "--ckpt_path", str(path), "--threads", "1",
                          "--trainer.max_steps", "4", "--trainer.default_root_dir", str(tmp / "branch")])
            out = capsys.readouterr()
            lines = out.err.strip().splitlines()
            assert stopped.value.code == 2 and len(lines) == 1 and message in lines[0], out.err[-2000:]
            assert "this" not in sys.modules and "Beautiful is better than ugly" not in out.out
    assert victim.read_text() == "keep me" and not (tmp / "branch").exists()
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 2


def test_a_named_folder_holding_a_run_is_refused_unless_resumed(finished_run):
    tmp, run = finished_run
    proc = fit("fit", "--config", SMOKE, "--trainer.default_root_dir", "runs/smoke", tmp_path=tmp, check=False,
               in_process=True)
    assert proc.returncode == 2 and "already holds a run" in proc.stderr
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 2


@pytest.mark.parametrize("args, line", [
    (["--model.optimizer.lr", "-1"], "error: Reinforce.optimizer.lr must be a finite number > 0, got -1.0"),
    (["--model.cluster.num_slots", "0"], "error: ClusterConfig.num_slots must be an integer >= 1, got 0"),
    (["--threads", "0"], "error: --threads must be auto or an integer >= 1, got 0"),
    (["--model.num_jobsets", "many"], "error: model.num_jobsets: Expected a <class 'int'>. Got value: many"),
])
def test_a_bad_value_is_one_line_naming_the_field(tmp_path, args, line):
    proc = fit("fit", "--config", SMOKE, "--trainer.logger", "false", *args, tmp_path=tmp_path, check=False,
               in_process=True)
    assert proc.returncode == 2
    [printed] = proc.stderr.strip().splitlines()
    assert printed.startswith(line), printed
    assert not (tmp_path / "runs" / "smoke").exists()  # no empty run folder left


def test_the_full_traceback_on_request(tmp_path):
    proc = fit("fit", "--config", SMOKE, "--trainer.logger", "false", "--model.optimizer.lr", "-1",
               tmp_path=tmp_path, check=False, env={"LIGHTNING_SCHED_TRACEBACK": "1"})
    assert proc.returncode != 0 and "Traceback (most recent call last)" in proc.stderr
    assert "Reinforce.optimizer.lr must be a finite number > 0" in proc.stderr


def test_a_checkpoint_saved_by_an_older_module_signature_is_not_resumed(tmp_path):
    ckpt = ROOT / "checkpoints" / "reinforce_slowdown.ckpt"
    proc = fit("fit", "--config", SMOKE, "--ckpt_path", str(ckpt), tmp_path=tmp_path, check=False, in_process=True)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --ckpt_path {ckpt} was saved with arguments tasks.reinforce.Reinforce no longer "
                           "takes (") and "rmsprop_alpha" in line


def test_ctrl_c_saves_prints_the_resume_command_and_a_resume_only_continues_from_last(tmp_path, fit_main, capsys):
    proc = fit("fit", "--config", SMOKE, "--trainer.max_steps", "6", "--trainer.logger", "false",
               "--trainer.callbacks+=tests.faults.SigtermAt", "--trainer.callbacks.iteration", "3",
               "--trainer.callbacks.signal", "SIGINT", tmp_path=tmp_path, check=False)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "stopped by Ctrl-C (SIGINT) at iteration 3" in proc.stdout and "Resume with:" in proc.stdout
    run = tmp_path / "runs" / "smoke"
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    [best] = run.glob("checkpoints/best-*.ckpt")
    config = str(run / "config.yaml")

    def refused(*args) -> str:  # fit.py's main in this process (tmp_path): its one line, exit 2
        with pytest.raises(SystemExit) as stopped:
            fit_main(["fit", "--threads", "1", *args])
        lines = capsys.readouterr().err.strip().splitlines()
        assert stopped.value.code == 2 and len(lines) == 1, lines
        return lines[0]

    line = refused("--config", config, "--ckpt_path", str(best))
    assert "stands at step 3 (runs/smoke/checkpoints/last.ckpt)" in line, line
    assert f"--trainer.default_root_dir runs/smoke-from-{best.stem}" in line
    from callbacks.run_folder import RunFolders

    holder = RunFolders()
    holder.hold(run)  # this process holds the run: a second one is refused, whatever it asks
    (run / "checkpoints" / ".last.ckpt.1.0badcafe.tmp").write_bytes(b"cut")  # a write killed midway
    line = refused("--config", config, "--ckpt_path", str(run / "checkpoints" / "last.ckpt"))
    assert f"the run folder runs/smoke is in use by another process (pid {os.getpid()})" in line
    holder.lock.close()  # as the kernel does when the holder dies: the next holder cleans up
    RunFolders().hold(run)
    assert not list(run.rglob(".*.tmp")) and load(run / "checkpoints" / "last.ckpt")["global_step"] == 3


def test_a_second_signal_outside_training_does_not_raise_into_the_clean_up(capfd):
    """The first Ctrl-C outside training raises Stopped; a second one, which would land wherever the
    clean-up is (atexit, a finaliser) and print "Exception ignored", only says so."""
    from callbacks import stop

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stop.install()
    try:
        with pytest.raises(stop.Stopped, match=re.escape("stopped by Ctrl-C (SIGINT)")):
            os.kill(os.getpid(), signal.SIGINT)
            [None for _ in range(1000)]  # the handler runs between bytecodes
        os.kill(os.getpid(), signal.SIGINT)
        [None for _ in range(1000)]
        assert capfd.readouterr().err == "already stopping\n" and stop.exit_code() == 130
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        stop.forget()


def test_a_signal_during_validation_or_test_stops_it_at_once_and_the_run_resumes(tmp_path, fit_main, capsys):
    """SIGTERM 0.2 s into a validation that would last a minute (a queue policy's takes one): the
    run stops within seconds with last.ckpt at the last training step, and resumes, redoing that
    validation; Ctrl-C in the test loop stops it as promptly."""
    import time

    from tests.faults import SigtermInEvaluation

    def stopped_by(command, *args) -> tuple[int, float]:
        SigtermInEvaluation.sent_at = None
        with pytest.raises(SystemExit) as stopped:
            fit_main([command, "--config", SMOKE, "--threads", "1", "--trainer.logger", "false",
                      "--trainer.callbacks+=tests.faults.SigtermInEvaluation", *args])
        return stopped.value.code, time.monotonic() - SigtermInEvaluation.sent_at

    code, waited = stopped_by("fit", "--trainer.callbacks.iteration", "2")
    assert code == 143 and waited < 20, (code, waited)
    assert "stopped by SIGTERM at iteration 2 (its validation cut short: the resume redoes it)" in \
        capsys.readouterr().out
    last = tmp_path / "runs" / "smoke" / "checkpoints" / "last.ckpt"
    assert load(last)["global_step"] == 2
    fit_main(["fit", "--config", "runs/smoke/config.yaml", "--ckpt_path", str(last), "--threads", "1"])
    assert load(last)["global_step"] == 4
    rows = list(csv.DictReader((tmp_path / "runs" / "smoke" / "metrics.csv").open()))
    assert [float(r["iteration"]) for r in rows if r["iteration"]] == [1.0, 2.0, 3.0, 4.0]
    assert sorted(eval_rows(tmp_path / "runs" / "smoke" / "metrics.csv")) == [1, 3]  # the cut one redone
    code, waited = stopped_by("test", "--ckpt_path", str(last), "--trainer.callbacks.signal", "SIGINT")
    assert code == 130 and waited < 20, (code, waited)
    assert "stopped by Ctrl-C (SIGINT) during test; nothing to save" in capsys.readouterr().err


def test_sigterm_at_start_leaves_nothing_or_a_resumable_folder(tmp_path):
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "fit.py"), "fit", "--config", SMOKE, "--threads",
                             "1", "--trainer.logger", "false", "--trainer.max_steps", "1000"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    for line in proc.stdout:  # the folder exists once fit prints it
        if line.startswith("run folder"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    run = tmp_path / "runs" / "smoke"
    assert not run.exists() or (run / "checkpoints" / "last.ckpt").is_file(), sorted(run.rglob("*"))


def test_a_stopped_run_ends_its_wandb_run_with_the_signals_exit_code(monkeypatch):
    import types

    finished = []
    fake = types.SimpleNamespace(run=object(), finish=lambda exit_code: finished.append(exit_code))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    main = script_main("fit")
    main.__globals__["finish_wandb"](143)
    fake.run = None  # no open run: nothing to finish
    main.__globals__["finish_wandb"](143)
    assert finished == [143]  # W&B would otherwise record the stopped run as finished with 0


def test_a_run_shorter_than_its_first_validation_says_so_and_names_its_latest_state(tmp_path):
    proc = fit("fit", "--config", SMOKE, "--trainer.max_steps", "1", "--trainer.val_check_interval", "3",
               "--trainer.logger", "false", tmp_path=tmp_path, in_process=True)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("no best checkpoint"))
    assert "the first comes after 3 iterations (--trainer.val_check_interval) and the run stopped at 1" in line
    assert "its latest state: runs/smoke/checkpoints/last.ckpt" in line
    assert (tmp_path / "runs" / "smoke" / "checkpoints" / "last.ckpt").is_file()


def test_resuming_a_run_that_reached_max_steps_is_refused_before_anything_is_written(tmp_path):
    fit("fit", "--config", SMOKE, tmp_path=tmp_path)
    run = tmp_path / "runs" / "smoke"
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    proc = fit("fit", "--config", SMOKE, "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), tmp_path=tmp_path,
               check=False)
    assert proc.returncode == 2 and "its run stands at step 4, which trainer.max_steps 4 has reached" in proc.stderr
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # no empty W&B run beside the first
