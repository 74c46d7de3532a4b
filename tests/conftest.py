"""Shared test setup: one torch thread (CI has 2 shared cores), hypothesis profiles, small helpers."""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
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


def script_main(name: str):
    """A script's `main(argv)`, run in this process (its ConfigError raised, not printed: run_main's
    one line and exit code 2 are tested through subprocesses elsewhere)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


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
