"""The thread count chosen from the cores other processes leave free (lightning_sched.threads)."""
import subprocess
import sys
import time

import pytest
import torch

from lightning_sched import threads


@pytest.fixture(autouse=True)
def one_thread_after():
    yield
    threads.fixed_threads(1)  # the suite runs on one thread (conftest)


def test_threads_from_the_cores_busy_elsewhere():
    free = threads.FreeCores()
    cores = len(free.cpus)
    assert free.threads(None) == free.most == cores  # no counters: every usable core
    assert free.threads(0.0) == cores
    assert free.threads(cores - 1.0) == 1  # every core but one busy: one thread
    assert free.threads(float(cores)) == 1  # never fewer than one
    assert free.threads(threads.SPARE / 2) == cores  # a core mostly idle counts as free
    assert free.threads(1.5 * threads.SPARE) == max(1, cores - 1)  # one busy more than SPARE does not
    assert threads.FreeCores(most=1).threads(0.0) == 1


def test_busy_cores_elsewhere_are_the_machines_less_ours(monkeypatch):
    free = threads.FreeCores()
    ticks = {"cpu": 0, "own": 0, "now": 100.0}
    monkeypatch.setattr(threads, "_cpu_ticks", lambda cpus: ticks["cpu"])
    monkeypatch.setattr(threads, "_own_ticks", lambda: ticks["own"])
    monkeypatch.setattr(threads.time, "monotonic", lambda: ticks["now"])
    free.others_busy()
    per_second = 1 / free.tick_seconds
    ticks.update(cpu=int(1.5 * per_second), own=int(1.0 * per_second), now=101.0)  # 1.5 cores busy, 1 of them ours
    assert free.others_busy() == pytest.approx(0.5, abs=0.02)
    ticks.update(now=101.0)  # no time passed
    assert free.others_busy() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_counters_read():
    free = threads.FreeCores()
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        others = free.others_busy()
    finally:
        competitor.kill()
        competitor.wait()
    assert 0.1 < others <= len(free.cpus) + 0.1  # the competitor (and whatever else runs beside the tests)


def test_use_free_cores_sets_torch_and_fixed_threads_stops_following():
    count = threads.use_free_cores(most=2, sample_seconds=0.05)
    assert 1 <= count <= 2 and torch.get_num_threads() == count
    threads.follow_load()  # within CHECK_SECONDS: nothing to do
    assert threads.fixed_threads(1) == 1 and threads._active is None
    threads.follow_load()
    assert torch.get_num_threads() == 1
