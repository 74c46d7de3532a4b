"""Shared test setup: one torch thread (CI has 2 shared cores), hypothesis profiles, small helpers."""
from __future__ import annotations

import os

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
