"""Shared test setup: one torch thread (CI has 2 shared cores), hypothesis profiles, small helpers."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import runpy
import signal
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

# "default": quick enough for every run; "thorough": for hunting bugs locally
# (HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_properties.py).
settings.register_profile("default", deadline=None, max_examples=40, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=500, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped where CUDA is not available."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def scripts_on_path() -> None:
    """scripts/ on sys.path, as a script's own folder is when it runs as __main__ (for _common)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))


def script_module(name: str):
    """The script scripts/`name`.py as a module, loaded in this process (its functions callable)."""
    scripts_on_path()
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_main(name: str):
    """A script's `main(argv)`, run in this process (its ConfigError raised, not printed: run_main's
    one line and exit code 2 are tested through subprocesses elsewhere)."""
    return script_module(name).main


IN_PROCESS = {"adapt", "bench_env", "bench_maml", "bench_train", "ensemble", "evaluate", "figures", "make_swf",
              "select_checkpoint", "tune_tetris"}
"""The scripts run_script runs in this process (fit.py too where a test asks run_in_process)."""


def run_script(script: Path, *args, cwd: Path, env: dict | None = None, own_process: bool = False,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """`python script args` as a user runs it, in `cwd`, stopped after `timeout` seconds: in this
    process (run_in_process) unless `own_process` or the script is not one of IN_PROCESS; else with
    a minimal environment (`env` on top)."""
    if not own_process and script.stem in IN_PROCESS:
        return run_in_process(script, args, cwd, env, timeout)
    environment = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment)


def as_a_fresh_process_warns() -> None:
    """Warnings written to sys.stderr under Python's default filters (pytest records them instead)."""
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
"""Loggers that write to stderr in a process of their own (Lightning gives them a handler when the
root logger has none) but pass their records to pytest's capture here."""


class OutOfTime(BaseException):
    """A script run in this process went past its timeout (a BaseException: neither run_main nor
    fit.py turns it into an error line)."""


def _out_of_time(signum, frame):
    raise OutOfTime("the script ran past its timeout")


def run_in_process(script: Path, args, cwd: Path, env: dict | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess:
    """`python script args` run in this process as its own process runs it (the file as __main__:
    its own error handling, one-line errors and exit codes), stdout and stderr captured, Lightning's
    log lines and Python's warnings included, an uncaught exception as exit code 1 and its
    traceback: a subprocess's result without its start (torch and Lightning imported again, a few
    seconds on a busy 2-core machine). Past `timeout` seconds it fails the test (SIGALRM), as
    subprocess.run's timeout would. What it changes in this process (working folder, argv,
    environment, signal handlers, warning format, threads, a signal received) is put back."""
    from lightning_sched import threads as torch_threads

    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    saved = (os.getcwd(), sys.argv, dict(os.environ), warnings.formatwarning,
             {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}, torch.get_num_threads(),
             torch_threads._active, [(log.handlers, log.propagate) for log in loggers])
    out, err = io.StringIO(), io.StringIO()
    scripts_on_path()
    code = 0
    try:
        os.chdir(cwd)
        sys.argv = [str(script), *map(str, args)]
        os.environ.update(env or {})
        for log in loggers:
            log.handlers, log.propagate = [logging.StreamHandler(err)], False
        signal.signal(signal.SIGALRM, _out_of_time)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            as_a_fresh_process_warns()
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except Exception:  # Python's own exit: the traceback on stderr, exit code 1
                traceback.print_exc()
                code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        cwd_before, sys.argv, environ, warnings.formatwarning, handlers, threads, active, logged = saved
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(environ)
        for s, handler in handlers.items():
            signal.signal(s, handler)
        torch_threads._active = active
        torch.set_num_threads(threads)
        for log, (log_handlers, propagate) in zip(loggers, logged):
            log.handlers, log.propagate = log_handlers, propagate
        if "callbacks.stop" in sys.modules:
            sys.modules["callbacks.stop"].forget()  # a signal one run received is not the next one's
    return subprocess.CompletedProcess([str(script), *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def fit_main(tmp_path, monkeypatch):
    """scripts/fit.py's main in this process, in tmp_path (its signal handlers restored after): the
    same code as a subprocess, for the checks that end before training."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.chdir(tmp_path)
    yield script_main("fit")
    for s, handler in handlers.items():
        signal.signal(s, handler)
    from callbacks import stop

    stop.forget()  # a signal one test sent is not the next test's
