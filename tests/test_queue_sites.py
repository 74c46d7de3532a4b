"""Sites (lightning_sched.queue.sites): a log rewritten by hidden site parameters, every change counted."""
from __future__ import annotations

import numpy as np
import pytest
from test_queue_env import write_log

from lightning_sched.config import ConfigError
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.sites import (
    HELDOUT_SITES,
    OVERESTIMATING,
    TIGHT,
    TRAINING_SITES,
    ArrivalCopies,
    SiteModel,
)


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    return read_queue_log(write_log(tmp_path_factory.mktemp("site") / "log.swf", jobs=6000, nodes=64))


def test_exact_site_is_the_log(log):
    site = SiteModel("same").apply(log)
    for name in ("submit", "run", "requested", "processors"):
        np.testing.assert_array_equal(getattr(site, name), getattr(log, name))
    assert site.counts["site"]["name"] == "same" and site.counts["site_killed_at_request"] == 0
    # a logged job that ran past its request runs to its end when only the arrivals change (--load)
    from dataclasses import replace

    overran = replace(log, requested=np.maximum(1, log.run // 2))
    loaded = SiteModel("load", load=1.2).apply(overran)
    np.testing.assert_array_equal(loaded.run, log.run)
    np.testing.assert_array_equal(loaded.requested, overran.requested)
    assert loaded.counts["site_killed_at_request"] == 0 and loaded.offered_load() == pytest.approx(1.2, rel=1e-3)


def test_request_factors_follow_the_buckets_and_short_requests_kill(log):
    site = SiteModel("over", OVERESTIMATING, max_request=10 ** 9, seed=3).apply(log)
    factor = site.requested / site.run
    shares = [((factor >= lo) & (factor < hi)).mean() for lo, hi in ((2, 10), (10, 101))]
    assert abs(shares[0] - 0.14) < 0.02 and abs(shares[1] - 0.774) < 0.03
    assert (site.requested >= site.run).all()  # a job asking for less than it runs is killed at its request
    tight = SiteModel("tight", TIGHT, seed=3).apply(log)
    killed = tight.run < log.run
    assert killed.sum() == tight.counts["site_killed_at_request"] > 0.2 * log.num_jobs
    np.testing.assert_array_equal(tight.run[killed], tight.requested[killed])
    capped = SiteModel("cap", OVERESTIMATING, max_request=600, seed=3).apply(log)
    assert capped.requested.max() <= 600 and (capped.run <= 600).all()


@pytest.mark.parametrize("rho", [-0.6, 0.0, 0.7])
def test_size_length_correlation_keeps_each_column(log, rho):
    site = SiteModel("corr", size_length_correlation=rho, seed=5).apply(log)
    np.testing.assert_array_equal(np.sort(site.processors), np.sort(log.processors))
    np.testing.assert_array_equal(site.run, log.run)
    assert abs(rank_correlation(site.processors, site.run) - rho) < 0.1


def test_load_and_order(log):
    site = SiteModel("busy", load=1.3, seed=1).apply(log)
    assert abs(site.offered_load() - 1.3) < 0.01 and (np.diff(site.submit) >= 0).all()


def test_the_declared_split_pairs_no_held_out_log_and_model_seen_in_training():
    trained = {(log, (s.request_buckets, s.size_length_correlation)) for log, s in TRAINING_SITES}
    trained_buckets = {s.request_buckets for _, s in TRAINING_SITES}
    assert len(HELDOUT_SITES) >= 3
    assert all((log, (s.request_buckets, s.size_length_correlation)) not in trained for log, s in HELDOUT_SITES)
    assert any(log not in {t for t, _ in TRAINING_SITES} for log, _ in HELDOUT_SITES)  # a log never seen
    assert any(not s.request_buckets for _, s in HELDOUT_SITES)  # exact requests
    assert any(s.request_buckets and s.request_buckets not in trained_buckets for _, s in HELDOUT_SITES)


@pytest.mark.parametrize("fields,message", [
    ({"request_buckets": [(0.5, 1, 2)]}, "probabilities must sum to 1"),
    ({"request_buckets": [(1.0, 3, 2)]}, "request_buckets[0] must be"),
    ({"max_request": 0}, "max_request must be an integer >= 1"),
    ({"max_request": True}, "max_request must be an integer >= 1"),  # True is no number of seconds
    ({"size_length_correlation": 2}, "size_length_correlation must be in [-1, 1]"),
])
def test_bad_site_parameters_name_the_field(fields, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SiteModel("bad", **fields)


def test_perturbed_arrivals_keep_the_jobs_and_their_order_and_move_the_load_within_its_spread(log):
    copies = ArrivalCopies(copies=3, gap_jitter=0.5, load_spread=0.2, seed=4).of([log])
    assert len(copies) == 4 and copies[0] is log
    for other in copies[1:]:
        for name in ("run", "requested", "processors", "job_number"):
            assert np.array_equal(getattr(other, name), getattr(log, name))
        assert (np.diff(other.submit) >= 0).all() and other.submit[0] == log.submit[0]
        assert not np.array_equal(other.submit, log.submit)
        assert 0.8 * 0.999 <= other.offered_load() / log.offered_load() <= 1.2 * 1.001
        assert other.summary()["arrivals_perturbed"]["gap_jitter"] == 0.5
    again = ArrivalCopies(copies=3, gap_jitter=0.5, load_spread=0.2, seed=4).of([log])
    assert all(np.array_equal(a.submit, b.submit) for a, b in zip(copies, again, strict=True))
    unchanged = ArrivalCopies(copies=1, gap_jitter=0.0, load_spread=0.0).perturbed(log, seed=0)
    assert np.abs(unchanged.submit - log.submit).max() <= 1  # rounding only
    for fields, message in (({"copies": -1}, "copies must be an integer >= 0, got -1"),
                            ({"load_spread": 1.0}, "load_spread must be in \\[0, 1\\), got 1.0"),
                            ({"gap_jitter": -0.1}, "gap_jitter must be >= 0, got -0.1")):
        with pytest.raises(ConfigError, match=message):
            ArrivalCopies(**fields)


def test_ppo_trains_on_the_copies_and_validates_on_the_logs_themselves(tmp_path):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    path = str(write_log(tmp_path / "log.swf", jobs=600, nodes=32))
    settings = {"window": 64, "sequence_length": 64, "validation": QueueValidation(2, 64), "iterations_per_epoch": 1,
                "ppo": PPOSettings(epochs=1, minibatch_size=128, advantage="sequence", episodes_per_sequence=2)}
    with pytest.raises(ConfigError, match="batch_size 4 is below 3 training logs .* ppo.episodes_per_sequence 2"):
        QueuePPO(path, batch_size=4, arrival_copies=ArrivalCopies(copies=2), **settings)
    with pytest.raises(ConfigError, match="^QueuePPO.batch_size 7 must be a multiple of ppo.episodes_per_sequence 2$"):
        QueuePPO(path, batch_size=7, **settings)  # refused at the start, not in the first training step
    model = QueuePPO(path, batch_size=6, arrival_copies=ArrivalCopies(copies=2), **settings)
    train, validation = model.env("train"), model.env("validation")
    assert len(train.logs) == 3 and len(validation.logs) == 1
    assert not np.array_equal(train.logs[1].submit, train.logs[0].submit)
    Trainer(max_steps=1, limit_val_batches=0, logger=False, enable_checkpointing=False, num_sanity_val_steps=0,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path).fit(model)
    checkpoint = {}
    model.on_save_checkpoint(checkpoint)
    assert checkpoint["lightning_sched"]["log"] == [path]
