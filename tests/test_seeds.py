"""The seed table: held-out ranges are disjoint, and the learning streams never reach them."""
import itertools
import random

import pytest

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
