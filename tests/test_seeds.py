"""The seed table: held-out ranges are disjoint, and the learning streams never reach them."""
import itertools
import random

import pytest
import torch

from lightning_sched import ConfigError, seeds


def test_held_out_ranges_are_disjoint():
    spans = sorted(seeds.HELD_OUT.values(), key=lambda r: r.start)
    for a, b in itertools.pairwise(spans):
        assert a.stop <= b.start, (a, b)


def held_out(seed: int) -> str | None:
    return next((use for use, span in seeds.HELD_OUT.items() if seed in span), None)


def test_training_and_adaptation_streams_avoid_held_out_seeds():
    # MAML seed 0, iteration 3, second inner step: 12_297 + 101 would be inside the evaluation range
    assert held_out(3 * 4099 + 101) == "evaluation" and held_out(seeds.training(0, 3, 0, 101)) is None
    rng = random.Random(0)
    for _ in range(50_000):
        seed, iteration, rank = rng.randrange(4), rng.randrange(5000), rng.randrange(4)
        stream = rng.choice([0, 1000, 1, 101, 201, 301]) + rng.randrange(32)
        assert held_out(seeds.training(seed, iteration, rank, stream)) is None
        assert held_out(seeds.adaptation(rng.randrange(20), rng.randrange(2000))) is None


def test_held_out_helpers_stay_in_their_range():
    assert seeds.evaluation() == 12345 and seeds.VALIDATION in seeds.HELD_OUT["validation"]
    assert seeds.selection(1.9) == 745 and seeds.tuning(0) == 777
    with pytest.raises(ConfigError, match="selection seed 777"):
        seeds.selection(2.22)
    with pytest.raises(ConfigError, match="evaluation seed"):
        seeds.evaluation(400)
    assert seeds.selection(5.0, base=1) == 501  # a user's own base is theirs to choose


def test_shipped_streams_are_the_plain_formula():
    # the shipped runs (seed 0, MAML with one inner step and 8 tasks) never needed the move
    for iteration in range(2000):
        for stream in [1 + k for k in range(8)] + [1000 + k for k in range(8)]:
            assert seeds.training(0, iteration, 0, stream) == iteration * 4099 + stream


def test_no_draw_repeats_another_iterations_or_ranks():
    # rank 0's formula spaces iterations STREAMS apart; other ranks hash, so a DDP rank never replays
    # the jobsets rank 0 draws at another iteration (a rank term in the formula would: 100_003 = 24 x 4099 + 1627)
    rank0 = {seeds.training(0, it, 0, s) for it in range(60) for s in range(0, seeds.STREAMS, 7)}
    assert len(rank0) == 60 * len(range(0, seeds.STREAMS, 7))
    others = {seeds.training(0, it, rank, s) for it in range(60) for rank in (1, 2, 3) for s in range(0, 2000, 7)}
    assert len(others) == 60 * 3 * len(range(0, 2000, 7)) and not rank0 & others
    assert all(seed < 2**62 for seed in others)
    for stream in (-1, seeds.STREAMS):
        with pytest.raises(ConfigError, match=f"training seed stream {stream} is outside"):
            seeds.training(0, 0, 0, stream)


def test_maml_outer_rollouts_draw_apart_from_every_inner_step():
    from tasks.maml import MAML, outer_stream
    assert outer_stream(1) == 1000 and outer_stream(10) == 1000  # the shipped runs' stream
    for inner_steps in (10, 11, 12, 40):
        inner = {1 + 100 * step + k for step in range(inner_steps) for k in range(99)}
        assert not inner & set(range(outer_stream(inner_steps), outer_stream(inner_steps) + 99))
    with pytest.raises(ConfigError, match="MAML.inner_steps must be <= 40 with meta_batch 8 .* got 41"):
        MAML(inner_steps=41)


def test_ddp_ranks_sample_actions_apart_and_one_stream_an_iteration():
    from types import SimpleNamespace

    from tasks.reinforce import Reinforce

    def draws(rank: int, step: int, calls: int = 2) -> list[list[float]]:
        module = Reinforce()
        module._trainer = SimpleNamespace(world_size=2, global_rank=rank, global_step=step)
        return [torch.rand(3, generator=module.action_sampler()).tolist() for _ in range(calls)]

    first, second = draws(1, 5)
    assert first != second  # the calls of one iteration (MAML's inner and outer rollouts) go on drawing
    assert draws(1, 5) == [first, second] and draws(1, 6)[0] != first  # a resumed rank repeats its iteration
    assert draws(0, 5)[0] != first and draws(2, 5)[0] != first
