"""The native CPU step (native.py, native_step.c) against the torch step it replaces: every field of
the state and every reward identical, over random clusters, jobsets and actions (invalid ones and
done rows included); and the fallback to torch ops where the kernel is off or cannot be built."""
from __future__ import annotations

import os
import platform
import random
import shutil
import subprocess
from dataclasses import fields

import pytest
import torch

from lightning_sched import ClusterConfig, JobSet
from lightning_sched.config import OBJECTIVES
from lightning_sched.deeprm import native
from lightning_sched.deeprm.cluster import init_state, step_state, step_state_torch
from lightning_sched.deeprm.observations import observe, render_image
from lightning_sched.deeprm.state import used_rows

UNARY_UNITS = [1, 2, 3, 10, 17, 40, 61, 62]  # level planes
BINARY_UNITS = [63, 64, 100, 1000, 1024, 2048]  # binary digit planes (state.UNARY_MAX_UNITS)
needs_kernel = pytest.mark.skipif(not native.available(), reason="no C compiler: the native step is unavailable")


def random_case(rng: random.Random, units: int | None = None) -> tuple[ClusterConfig, JobSet]:
    """A random cluster (word boundaries of the horizon crossed often) and B jobsets for it."""
    horizon = rng.choice([1, 2, 5, 20, 30, 31, 32, 40, 62, 63, 64, 65, 100, 126, 127, 130])
    units = units or rng.choice(UNARY_UNITS + BINARY_UNITS)
    cfg = ClusterConfig(num_resources=rng.randint(1, 3), resource_units=units, horizon=horizon,
                        num_slots=rng.randint(1, 12), max_job_len=rng.randint(1, horizon),
                        max_job_units=rng.randint(1, units), max_time=rng.randint(3, 60),
                        objective=rng.choice(OBJECTIVES), tardiness_weight=rng.choice([0.0, 0.0, 0.25]),
                        slo_slowdown=rng.choice([1.0, 1.5, 2.0]), observation="none")
    b, length, r = rng.randint(1, 6), rng.randint(1, 14), cfg.num_resources
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    arrival = torch.randint(0, 2 * min(horizon, 30) + 1, (b, length), generator=g)
    duration = torch.randint(1, cfg.max_job_len + 1, (b, length), generator=g)
    duration = duration * (torch.rand(b, length, generator=g) > 0.15)  # some padding
    demand = torch.randint(0, cfg.max_job_units + 1, (b, length, r), generator=g)
    deadline = None
    if rng.random() < 0.5:
        deadline = arrival + duration + torch.randint(0, 10, (b, length), generator=g)
    left = running = None
    if rng.random() < 0.3:  # jobs already running at time 0, together within the cluster
        k = rng.randint(1, 3)
        left = torch.randint(0, horizon + 1, (b, k), generator=g)
        running = torch.randint(0, min(cfg.max_job_units, units // k) + 1, (b, k, r), generator=g)
    return cfg, JobSet(arrival, duration, demand, deadline, left, running).validate(cfg)


def random_actions(state, cfg: ClusterConfig, rng: random.Random) -> torch.Tensor:
    """Per row: a slot whose job fits, any slot, void (M), or invalid (-1, M + 1, huge)."""
    m = cfg.num_slots
    out = []
    for row in range(state.time.shape[0]):
        valid = (state.slot_offset[row] >= 0).nonzero().flatten().tolist()
        kind = rng.random()
        if valid and kind < 0.55:
            out.append(rng.choice(valid))
        elif kind < 0.7:
            out.append(rng.randrange(m))
        elif kind < 0.9:
            out.append(m)
        else:
            out.append(rng.choice([-1, -5, m + 1, 1 << 40]))
    return torch.tensor(out)


def copy(state):
    return state.rows(torch.arange(state.time.shape[0]))


def assert_same(state, other, where: str) -> None:
    for f in fields(state):
        mine, theirs = getattr(state, f.name), getattr(other, f.name)
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), f"{f.name} differs {where}"


def assert_same_observation(state, other, cfg: ClusterConfig, where: str) -> None:
    """The keys the native step computed (native.observed_keys) are those observations.py computes."""
    precomputed = native.observed_keys(state)
    assert set(precomputed) == {key for key, _, _ in native.KEYS}
    computed = observe(other, cfg).materialize()
    for key, value in observe(state, cfg).materialize().items():
        assert value.dtype == computed[key].dtype and torch.equal(value, computed[key]), f"key {key} differs {where}"


@needs_kernel
def steps_as_torch(rng: random.Random, where: str, steps: int = 15) -> None:
    """A random case stepped `steps` times by native.step and by the torch step: the same rewards
    and fields throughout."""
    cfg, jobs = random_case(rng)
    state = init_state(jobs, cfg)
    theirs = copy(state)
    for _ in range(steps):
        action = random_actions(state, cfg, rng)
        assert torch.equal(native.step(state, action, cfg), step_state_torch(theirs, action, cfg))
        assert_same(state, theirs, where)


def test_native_step_matches_torch_step():
    rng = random.Random(1234)
    for case in range(300):
        cfg, jobs = random_case(rng)
        state = init_state(jobs, cfg)
        assert native.supports(state, cfg)
        theirs = copy(state)
        for step in range(rng.randint(5, 40)):
            action = random_actions(state, cfg, rng)
            reward = native.step(state, action, cfg)
            expected = step_state_torch(theirs, action, cfg)
            where = f"in case {case} ({cfg}) at step {step}"
            assert reward.dtype == expected.dtype and torch.equal(reward, expected), f"reward differs {where}"
            assert_same(state, theirs, where)
            assert_same_observation(state, theirs, cfg, where)


@needs_kernel
def test_native_step_keeps_observations_of_earlier_steps():
    """Fields the torch step replaces are fresh tensors, so observations that alias them keep
    their values; the ones it mutates in place are the same tensors."""
    cfg, jobs = random_case(random.Random(5), units=10)
    state = init_state(jobs, cfg)
    obs = observe(state, cfg).materialize()
    kept = {k: v.clone() for k, v in obs.items()}
    in_place = {name: getattr(state, name) for name in native.IN_PLACE}
    for _ in range(10):
        native.step(state, torch.full_like(state.time, cfg.num_slots), cfg)
    for key, value in obs.items():
        assert torch.equal(value, kept[key]), key
    for name, tensor in in_place.items():
        assert getattr(state, name) is tensor, name


@needs_kernel
def test_step_state_dispatches_to_the_kernel_on_the_cpu():
    cfg, jobs = random_case(random.Random(7), units=10)
    state = init_state(jobs, cfg)
    slot_offset = state.slot_offset
    step_state(state, torch.full_like(state.time, cfg.num_slots), cfg)
    assert state.slot_offset is not slot_offset


@needs_kernel
def test_the_image_of_the_binary_layout_is_drawn_with_torch():
    """The native render draws level planes only; beyond 62 units it leaves the image to torch."""
    cfg, jobs = random_case(random.Random(3), units=100)
    state = init_state(jobs, cfg)
    assert native.supports(state, cfg) and native.render(state, cfg, torch.zeros(len(state.time))) is None


def test_switched_off_or_without_compiler_steps_with_torch(monkeypatch, tmp_path):
    rng = random.Random(11)
    cfg, jobs = random_case(rng, units=10)
    state = init_state(jobs, cfg)
    theirs = copy(state)
    monkeypatch.setenv(native.SWITCH, "0")
    assert native.step(state, torch.full_like(state.time, cfg.num_slots), cfg) is None
    monkeypatch.delenv(native.SWITCH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(native, "COMPILER", "no-such-c-compiler-here")
    with pytest.warns(UserWarning, match="stepping with torch ops"):
        assert not native.available()
    for _ in range(20):
        action = random_actions(state, cfg, rng)
        assert torch.equal(step_state(state, action, cfg), step_state_torch(theirs, action, cfg))
        assert_same(state, theirs, "without a compiler")


@needs_kernel
def test_observed_keys_only_for_the_state_the_native_step_left():
    cfg, jobs = random_case(random.Random(9), units=10)
    state = init_state(jobs, cfg)
    assert native.observed_keys(state) == {}
    native.step(state, torch.full_like(state.time, cfg.num_slots), cfg)
    assert set(native.observed_keys(state)) == {key for key, _, _ in native.KEYS}
    assert native.observed_keys(state.rows(slice(None))) == {}
    step_state_torch(state, torch.full_like(state.time, cfg.num_slots), cfg)
    assert native.observed_keys(state) == {}


@needs_kernel
@pytest.mark.parametrize("openmp", [True, False])
def test_rows_split_over_threads_step_as_one(monkeypatch, openmp):
    """Chunks of rows on OpenMP's threads (tiny chunks: a small batch) give the result of one thread
    stepping every row, as a build without OpenMP does."""
    rng = random.Random(21)
    monkeypatch.setattr(native, "MIN_CHUNK_ROWS", 1)
    monkeypatch.setattr(native.kernels(), "openmp", openmp and native.kernels().openmp)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for _ in range(10):
            steps_as_torch(rng, "split over threads")
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_the_native_image_is_the_torch_image():
    """native.render draws DeepRM's image and the used rows exactly as render_image and used_rows do,
    word layouts and block widths of every kind, as episodes go on."""
    rng = random.Random(31)
    for _ in range(40):
        cfg, jobs = random_case(rng, units=rng.choice(UNARY_UNITS))
        cfg = cfg.replace(observation="image")
        state = init_state(jobs, cfg)
        for _ in range(12):
            since = observe(state, cfg)["since_new"].view(-1)
            image, used = native.render(state, cfg, since)
            assert torch.equal(used, used_rows(state, cfg)), cfg
            parts = (used, state.slot_duration, state.slot_demand.transpose(1, 2),
                     state.num_arrived - state.queue_head, since, cfg)
            assert torch.equal(image, render_image(*parts)), cfg
            step_state(state, random_actions(state, cfg, rng), cfg)


@needs_kernel
def test_a_compiler_without_openmp_builds_the_one_thread_kernel(monkeypatch, tmp_path):
    """Where the OpenMP build fails, the library is built without it and steps every row on the
    calling thread, with the same results."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(native, "OPENMP", ("-fno-such-option-anywhere",))
    library = native.load.__wrapped__(native.COMPILER, native.FLAGS)  # past the cache of built libraries
    assert library is not None and not library.openmp
    monkeypatch.setattr(native, "kernels", lambda: library)
    steps_as_torch(random.Random(41), "without OpenMP")


@needs_kernel
def test_rows_that_prefetch_rows_ahead_step_as_torch():
    """Batches longer than the prefetch distances (native_step.c reads the fields of rows ahead to
    find their job entries), their rows diverging under different actions: the torch step's results."""
    rng = random.Random(51)
    for _ in range(6):
        cfg, jobs = random_case(rng)
        jobs = jobs.repeat_interleave(80 // jobs.batch_size + 1)
        state = init_state(jobs, cfg)
        theirs = copy(state)
        for step in range(30):
            action = random_actions(state, cfg, rng)
            assert torch.equal(native.step(state, action, cfg), step_state_torch(theirs, action, cfg))
            assert_same(state, theirs, f"at step {step} of {cfg}")


@needs_kernel
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None,
                    reason="reads x86 disassembly with objdump")
def test_the_kernel_keeps_its_prefetches():
    """The compiler drops calls to a function of prefetches alone (it counts as pure): the built
    kernel must still hold prefetch instructions, which keep large batches off memory's latency."""
    library = native.build(native.COMPILER, native.FLAGS)
    disassembly = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "prefetch" in disassembly


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_library_is_loaded_only_from_a_folder_and_file_nobody_else_can_write(monkeypatch, tmp_path):
    """A compiled library runs its code when loaded: the cache must be this user's alone, else a
    private temporary folder; a file there others could write is rebuilt; one lacking the kernel's
    functions is refused (the env then steps with torch ops)."""
    shared = tmp_path / "shared"
    (shared / "lightning_sched").mkdir(parents=True)
    (shared / "lightning_sched").chmod(0o777)  # this user's, as an earlier version left it under umask 002
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    assert native.cache_dir() == shared / "lightning_sched" and native.private(shared / "lightning_sched")  # 0700 now
    monkeypatch.setattr(native.os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)  # as if another user's
    assert native.cache_dir() == native.private_temp_dir() and native.private_temp_dir() != shared / "lightning_sched"
    monkeypatch.undo()
    loose = tmp_path / "loose"  # a folder others may write, above the cache: they could swap it
    (loose / "cache").mkdir(parents=True)
    loose.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(loose / "cache"))
    assert native.cache_dir() == native.private_temp_dir()
    loose.chmod(0o1777)  # sticky, as /tmp: only owners rename
    assert native.cache_dir() == loose / "cache" / "lightning_sched"
    own = tmp_path / "own"
    monkeypatch.setenv("XDG_CACHE_HOME", str(own))
    assert native.cache_dir() == own / "lightning_sched" and native.private(own / "lightning_sched")
    source = tmp_path / "tiny.c"
    source.write_text("int lightning_sched_tiny(void) { return 7; }\n")
    built = native.build("cc", ("-shared", "-fPIC"), (source,), (), "tiny")
    built.write_bytes(b"planted")  # the same name, then made writable by others
    built.chmod(0o666)
    again = native.build("cc", ("-shared", "-fPIC"), (source,), (), "tiny")
    assert again == built and again.read_bytes() != b"planted" and native.private(again)
    with pytest.warns(UserWarning, match="lacks lightning_sched_step_rows .*stepping with torch ops"):
        assert native.build_and_load("cc", ("-shared", "-fPIC"), (source,), (), "tiny",
                                     symbols=("lightning_sched_tiny", "lightning_sched_step_rows")) is None
