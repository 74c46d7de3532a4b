"""The queue env as users meet it: SWF logs read as RLScheduler reads them (with every dropped or
changed job counted and bad logs refused in one line), the native kernel and the torch step giving
the same states and observations, TorchRL's spec check, the rules, the protocols and
`evaluate.py --env queue` on a log the test writes."""
from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import fields
from functools import partial
from pathlib import Path

import conftest
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from lightning_sched.config import ConfigError
from lightning_sched.queue import native
from lightning_sched.queue.config import QueueConfig
from lightning_sched.queue.env import EPISODE_KEYS, QueueEnv, episode_metrics
from lightning_sched.queue.evaluation import evaluate_queue, heuristic_policies, protocol_starts
from lightning_sched.queue.heuristics import QueueHeuristic
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.reservation import ReservingRule, reserving_config
from lightning_sched.queue.rollout import collect
from lightning_sched.queue.state import KERNEL_ORDERS, MAX_EPISODE_SECONDS, init_state
from lightning_sched.queue.step import step_and_observe
from lightning_sched.traces.files import TraceError

ROOT = Path(__file__).resolve().parent.parent


def swf_line(number, submit, run, processors, requested=-1, allocated=None):
    allocated = processors if allocated is None else allocated
    return f"{number} {submit} -1 {run} {allocated} -1 -1 {processors} {requested} -1 1 -1 -1 -1 0 -1 -1 -1"


def write_log(path: Path, jobs: int = 3000, nodes: int = 32, seed: int = 0, extra: list[str] = ()) -> Path:
    """A Lublin-like log: bursty arrivals, heavy-tailed run times, power-of-two sizes."""
    g = torch.Generator().manual_seed(seed)
    gaps = (-torch.log(torch.rand(jobs, generator=g)) * 40).long()
    submit = torch.cumsum(gaps, 0)
    run = (torch.exp(torch.rand(jobs, generator=g) * 8)).long() + 1
    procs = 2 ** torch.randint(0, 6, (jobs,), generator=g)
    lines = [f"; MaxNodes: {nodes}", f"; MaxProcs: {nodes}"]
    lines += [swf_line(i + 1, int(submit[i]), int(run[i]), int(procs[i])) for i in range(jobs)]
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def test_log_reading_counts_what_it_changes(tmp_path):
    path = tmp_path / "small.swf"
    path.write_text("\n".join(["; MaxNodes: 8", "; MaxProcs: 16",
                               swf_line(1, 0, 100, 4), swf_line(2, 5, 0, 2), swf_line(3, 9, -1, 2, requested=50),
                               swf_line(4, 12, 30, 3, requested=60, allocated=5), swf_line(5, -1, 40, 2)]) + "\n")
    log = read_queue_log(path)
    assert (log.nodes, log.processors_per_node) == (8, 2)
    assert log.run.tolist() == [100, 10, 30] and log.requested.tolist() == [100, 50, 60]
    assert log.processors.tolist() == [4, 2, 5]  # max(allocated, requested)
    assert log.counts == {"read": 5, "dropped_zero_run": 1, "dropped_unknown_processors": 0,
                          "dropped_unknown_submit": 1, "negative_run_set_to_10": 1, "requested_from_run": 1,
                          "requested_zero_from_run": 0, "requested_below_run": 0, "dropped_larger_than_cluster": 0,
                          "processors_rounded_up_to_nodes": 1, "times_rounded_up_to_seconds": 0, "kept": 3}
    cfg = log.config(sequence_length=3)
    state = QueueEnv(cfg, log, batch_size=[1], starts=[0]).initial_state()
    assert state.nodes[0].tolist() == [2, 1, 3]  # ceil(processors / 2 per node)


def test_a_zero_request_is_unknown_and_short_requests_partial_nodes_and_repeats_are_named(tmp_path):
    path = tmp_path / "site.swf"
    path.write_text("\n".join(["; MaxNodes: 4", "; MaxProcs: 32", swf_line(1, 0, 100, 8, requested=0),
                               swf_line(2, 50, 300, 1, requested=200), swf_line(3, 90, 100, 16, requested=500)]) + "\n")
    log = read_queue_log(path)
    assert log.requested.tolist() == [100, 200, 500]  # 0 s is no estimate: the run time, as for -1
    assert {k: log.counts[k] for k in ("requested_zero_from_run", "requested_below_run",
                                       "processors_rounded_up_to_nodes")} == {"requested_zero_from_run": 1,
                                                                              "requested_below_run": 1,
                                                                              "processors_rounded_up_to_nodes": 1}
    # whole nodes: 100 s x 1 node + 300 x 1 + 100 x 2 over 90 s x 4 nodes (processors would say 2.75 / 8)
    assert log.offered_load() == pytest.approx((100 + 300 + 200) / (90 * 4))
    again = tmp_path / "overlap.swf"
    again.write_text("; MaxNodes: 4\n" + "\n".join(swf_line(j, 10 * j, 10, 1) for j in (1, 2, 3, 2)) + "\n")
    with pytest.raises(TraceError, match=r"overlap.swf, line 5, field 1 \(job number\): job 2 is also on line 3"):
        read_queue_log(again)


def test_the_kernels_constants_are_the_python_ones():
    from lightning_sched.queue import config, native
    source = (ROOT / "lightning_sched" / "queue" / "native_queue.c").read_text()
    defined = {m[1]: float(m[2]) for m in re.finditer(r"^#define (\w+) ([0-9.]+)", source, re.MULTILINE)}
    assert defined == {"FEATURES": config.JOB_FEATURES, "CLUSTER_FEATURES": config.CLUSTER_FEATURES,
                       "QUEUE_WINDOWS": config.QUEUE_WINDOWS, "MINUTE": config.MINUTE, "LOG_SPAN": config.LOG_SPAN,
                       "INDEX_BITS": native.PACKED_BITS}
    assert MAX_EPISODE_SECONDS == 1 << (64 - native.PACKED_BITS)  # a time fills the sort keys' other bits


def test_real_logs_quirks_are_read_or_refused_naming_the_field(tmp_path):
    log = tmp_path / "quirks.swf"
    jobs = [swf_line(1, "0.5", "0.4", 2), swf_line(2, 3, "12.7", 2, requested="20.2"), swf_line(3, 9, 10, 2)]
    log.write_text("; MaxNodes: 4\n" + "\n".join(jobs) + "\n")
    read = read_queue_log(log)  # whole seconds, rounded up: a job that ran 0.4 s ran, and is kept
    assert (read.submit.tolist(), read.run.tolist(), read.requested.tolist()) == ([1, 3, 9], [1, 13, 10], [1, 21, 10])
    assert read.counts["times_rounded_up_to_seconds"] == 2 and read.counts["kept"] == 3
    for line, field in ((swf_line(4, 12, 10, "2.5"), r"field 5 \(allocated processors\): 2.5 is not a whole number"),
                        (swf_line("4.5", 12, 10, 2), r"field 1 \(job number\): 4.5 is not a whole number"),
                        (swf_line(4, 12, 10, 2, requested="-1.5"), r"field 9 \(requested time\): -1.5 is negative")):
        log.write_text("; MaxNodes: 4\n" + "\n".join([*jobs, line]) + "\n")
        with pytest.raises(TraceError, match=rf"quirks.swf, line 5, {field}"):
            read_queue_log(log)
    for value in ("inf", "1e400", "16.7", "99999999999999999999"):
        log.write_text(f"; MaxNodes: {value}\n" + "\n".join(jobs) + "\n")
        with pytest.raises(TraceError, match=rf"header MaxNodes: '{value}' must be a whole number from 1 to "):
            read_queue_log(log)
    log.write_text("; MaxNodes: 4\n; MaxNodes: 4\n; MaxNodes: 8\n" + "\n".join(jobs) + "\n")  # the same twice is fine
    with pytest.raises(TraceError, match="quirks.swf, line 3: header MaxNodes given twice, '4' then '8'"):
        read_queue_log(log)
    for nodes in (3, 128):  # nodes of different sizes, or fewer processors than nodes: no cluster to guess
        log.write_text(f"; MaxNodes: {nodes}\n; MaxProcs: 64\n" + "\n".join(jobs) + "\n")
        with pytest.raises(TraceError, match=f"header MaxProcs 64 is not a multiple of MaxNodes {nodes}: .*"
                                             "--processors_per_node"):
            read_queue_log(log)
    text = "; MaxNodes: 4\n" + "\n".join(jobs) + "\n"
    packed = gzip.compress(text.encode())
    for name, content in (("named_plain.swf", packed), ("upper.SWF.GZ", packed),
                          ("bom.swf", ("\ufeff" + text).encode()),
                          ("old_mac.swf", text.replace("\n", "\r").encode()),
                          ("mixed.swf", (text[:-1].replace("\n", "\r") + "\n").encode())):
        (tmp_path / name).write_bytes(content)  # gzip found by its content; a byte-order mark; \r line ends
        assert read_queue_log(tmp_path / name).counts["kept"] == 3, name
    long = tmp_path / "long.swf"  # each time below 2^36, but a sequence's run times add up past the kernel's 2^40
    long.write_text("; MaxNodes: 4\n" + "\n".join(swf_line(j, j, 2**36 - 1, 4) for j in range(1, 40)) + "\n")
    read = read_queue_log(long)
    with pytest.raises(ConfigError, match=r"submit, run, requested: a sequence's times could reach .* past 2\^40"):
        QueueEnv(read.config(sequence_length=20), read, batch_size=[1], starts=[0]).reset()
    with pytest.raises(ConfigError, match=r"load 1e-12: the log's arrivals would spread over .* past 2\^36"):
        read_queue_log(write_log(tmp_path / "ok.swf", jobs=50)).with_load(1e-12)


def test_bad_logs_and_sequences_are_refused_in_one_line(tmp_path):
    big = tmp_path / "big.swf"
    big.write_text("; MaxNodes: 4\n" + swf_line(1, 0, 10, 2) + "\n" + swf_line(2, 3, 10, 9) + "\n")
    with pytest.raises(TraceError, match=r"line 3, processors: job 2 asks for 9 processors, the cluster has 4 .*"
                                         r"1 job\(s\) do not fit \(--oversize drop, or oversize: drop in a training "
                                         r"config: dropped, counted\)"):
        read_queue_log(big)
    big.write_text("; MaxNodes: 4\n" + swf_line(1, 0, 10, 2) + "\n" + swf_line(2, 3, -1, 9, requested=0) + "\n")
    dropped = read_queue_log(big, oversize="drop")  # what happened to a dropped job is not counted as kept
    assert dropped.num_jobs == 1 and dropped.counts["dropped_larger_than_cluster"] == 1
    assert dropped.counts["negative_run_set_to_10"] == dropped.counts["requested_zero_from_run"] == 0
    procs = tmp_path / "procs.swf"  # MaxProcs alone: processors, so nodes = MaxProcs / processors_per_node
    procs.write_text("; MaxProcs: 128\n" + swf_line(1, 0, 10, 2) + "\n")
    assert (read_queue_log(procs).nodes, read_queue_log(procs, processors_per_node=32).nodes) == (128, 4)
    with pytest.raises(TraceError, match="header MaxProcs 128 is not a multiple of processors_per_node 48"):
        read_queue_log(procs, processors_per_node=48)
    both = tmp_path / "both.swf"  # MaxNodes and MaxProcs: processors_per_node alone must agree with them
    both.write_text("; MaxNodes: 16\n; MaxProcs: 128\n" + swf_line(1, 0, 10, 2) + "\n")
    assert (read_queue_log(both, processors_per_node=8).nodes, read_queue_log(both, 32, 16).nodes) == (16, 32)
    with pytest.raises(TraceError, match=r"header MaxNodes 16 x processors_per_node 16 is 256 processors, but "
                                         r"MaxProcs is 128: give the nodes too \(--nodes"):
        read_queue_log(both, processors_per_node=16)
    for field, line in ((2, swf_line(2, "1e19", 10, 2)), (4, swf_line(2, 3, 10**19, 2)),
                        (5, swf_line(2, 3, 10, "1e19"))):
        huge = tmp_path / "huge.swf"  # beyond int64 (or any sane size): refused, not wrapped or counted as dropped
        huge.write_text("; MaxNodes: 4\n" + swf_line(1, 0, 10, 2) + "\n" + line + "\n")
        with pytest.raises(TraceError, match=rf"huge.swf, line 3, field {field} \(.*\): .* is out of range"):
            read_queue_log(huge)
    huge.write_text("; MaxNodes: 4\n" + swf_line(1, 0, 10, 2) + "\n" + swf_line(2, 3, 10, 2, requested=2**41) + "\n")
    with pytest.raises(TraceError, match=r"huge.swf, line 3: job 2's times .* reach 2\^36 seconds"):
        read_queue_log(huge)  # beyond the native step's packed sort keys
    log = read_queue_log(write_log(tmp_path / "ok.swf", jobs=50))
    with pytest.raises(ConfigError, match="sequence_length 64 is longer than the 50 jobs"):
        QueueEnv(log.config(sequence_length=64), log)
    with pytest.raises(ConfigError, match="sequence start 40 with sequence_length 16 runs past the 50 jobs"):
        QueueEnv(log.config(sequence_length=16), log, batch_size=[1], starts=[40])
    with pytest.raises(ConfigError, match="QueueConfig.backfill must be one of off, easy, got 'conservative'"):
        log.config(backfill="conservative")
    for field, value in (("nodes", 0), ("window", 2.5), ("processors_per_node", 10**30), ("sequence_length", 1 << 31)):
        with pytest.raises(ConfigError, match=rf"QueueConfig.{field} must be .*, got {value}$"):
            QueueConfig(**{field: value})
    QueueConfig(nodes=(1 << 31) - 1)  # the largest count the kernel's int32 slots hold
    env = QueueEnv(log.config(sequence_length=16), log, batch_size=[2], seed=0)
    td = env.reset()
    td["action"] = torch.tensor([0, 5])
    with pytest.raises(ValueError, match="row 1: action 5 is not a waiting job's slot"):
        env.step(td)


def stepped(log, cfg, native_at, seed: int, steps: int = 400):
    """States and observations of a random-pick rollout (fresh sequences at each partial reset),
    stepped by the kernel at the steps where native_at(step) holds, else by the torch step."""
    try:
        env = QueueEnv(cfg, log, batch_size=[24], seed=seed)
        g = torch.Generator().manual_seed(seed)
        td, seen = env.reset(), []
        for i in range(steps):
            os.environ[native.deeprm_native.SWITCH] = "1" if native_at(i) else "0"
            visible = td["action_mask"].sum(-1)
            td["action"] = (torch.rand(24, generator=g) * visible).long()
            td = env.step(td)["next"]
            seen.append((td.clone(), env.state.clone()))
            if i % 7 == 6:
                td["_reset"] = td["done"].clone()
                td = env.reset(td)
        return seen
    finally:
        os.environ.pop(native.deeprm_native.SWITCH, None)


# the kernel throughout; and in turns with the torch step, which leaves the kernel's kept orders
# of the window behind (the kernel must bring them up to date)
@pytest.mark.parametrize(("native_at", "steps"), [(lambda i: True, 400), (lambda i: i % 5 < 2, 120)],
                         ids=["native", "in_turns"])
@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_native_kernel_and_torch_step_agree(tmp_path, backfill, native_at, steps):
    if native.kernel() is None:
        pytest.skip("no C compiler: only the torch step exists here")
    log = read_queue_log(write_log(tmp_path / "log.swf"))
    # a small window: queues overflow it; stepped by the kernel alone, the fit delay (the kernel's, step.fit_delay's
    # torch ops) as the last feature
    fit_delay = steps == 400
    cfg = log.config(sequence_length=64, window=8, backfill=backfill, fit_delay=fit_delay)
    a, b = stepped(log, cfg, native_at, 3, steps), stepped(log, cfg, lambda i: False, 3, steps)
    overflowed, delayed = False, False
    for (td_a, s_a), (td_b, s_b) in zip(a, b):
        for f in fields(s_a):  # but the kernel's kept orders, which the torch step does not keep
            assert f.name in KERNEL_ORDERS or torch.equal(getattr(s_a, f.name), getattr(s_b, f.name)), f.name
        for key in td_a.keys(True, True):  # and the finished episodes' results ("episode", NaN elsewhere)
            torch.testing.assert_close(td_a[key], td_b[key], rtol=0, atol=0, equal_nan=True, msg=str(key))
        overflowed |= bool((td_a["queue_length"] > cfg.window).any())
        delayed |= fit_delay and bool((td_a["job_features"][..., -1] > 0).any())
    assert overflowed and delayed == fit_delay  # the window's SJF/smallest-first alternation ran, jobs waited to fit


def test_a_rollout_keeps_each_steps_jobs_across_partial_resets(tmp_path):
    # a partial reset replaces rows of the sequences the observation hands out: the steps a rollout
    # holds from before it must keep their own jobs (a record cloned at every step)
    log = read_queue_log(write_log(tmp_path / "log.swf"))
    cfg = log.config(sequence_length=24, window=8, backfill="easy")  # rows end at different steps

    def first_slot(td):
        td["action"] = torch.zeros(td.shape[0], dtype=torch.long)
        return td

    env = QueueEnv(cfg, log, batch_size=[8], seed=4)
    rollout = env.rollout(120, first_slot, break_when_any_done=False)
    again = QueueEnv(cfg, log, batch_size=[8], seed=4)
    td, record = again.reset(), []
    for _ in range(120):
        record.append(td.clone())
        _, td = again.step_and_maybe_reset(first_slot(td))
    assert bool(rollout["next", "done"].any()) and not bool(rollout["next", "done"].all())
    for key in ("job_submit", "job_requested", "job_processors", "window_job", "time"):
        assert torch.equal(rollout[key], torch.stack([r[key] for r in record], 1)), key


def test_a_reset_given_only_its_mask_returns_the_other_rows_as_they_stand(tmp_path):
    """SerialEnv and ParallelEnv reset their envs with a TensorDict of "_reset" alone: the rows not
    reset must come back as they stand (TorchRL's merge would zero them: no visible job), so a
    SerialEnv of queue envs runs, with the project's policies acting on its [workers, B] batch."""
    from functools import partial

    from tensordict import TensorDict
    from torchrl.envs import ActionMask, SerialEnv, StepCounter, TransformedEnv

    log = read_queue_log(write_log(tmp_path / "log.swf"))
    cfg = log.config(sequence_length=24, window=8, backfill="easy")
    env = QueueEnv(cfg, log, batch_size=[3], seed=2)
    before = env.reset()
    after = env.reset(TensorDict({"_reset": torch.tensor([[True], [False], [False]])}, [3]))
    assert torch.equal(after["time"].squeeze(-1), env.state.time) and bool(after["action_mask"].any(-1).all())
    for key in ("time", "action_mask", "job_features", "window_job"):
        assert torch.equal(after[key][1:], before[key][1:]), key
    whole = log.config(sequence_length=24, window=24, backfill="easy")  # the rules see the whole queue
    for policy, config in ((QueueHeuristic("random", torch.Generator().manual_seed(0)), cfg),
                           (QueueHeuristic("f1"), whole), (ReservingRule("f1"), reserving_config(whole))):
        make = partial(QueueEnv, config, log, batch_size=[3])
        serial = SerialEnv(2, [partial(make, seed=5), partial(make, seed=6)])
        rollout = serial.rollout(100, policy, break_when_any_done=False)  # rows end apart: partial resets
        assert rollout.batch_size[:2] == (2, 3) and bool(rollout["next", "done"].any())
        assert bool(rollout["action_mask"].gather(-1, rollout["action"].unsqueeze(-1)).all())
    masked = TransformedEnv(QueueEnv(cfg, log, batch_size=[3], seed=7), ActionMask())
    drawn = masked.rollout(100, break_when_any_done=False)  # rand_action draws from the mask the env keeps current
    assert bool(drawn["action_mask"].gather(-1, drawn["action"].unsqueeze(-1)).all())
    assert len(drawn["action"].unique()) > 4  # the draws spread over the visible jobs, not the first one
    # without ActionMask the transformed env's copy of the spec holds a stale mask: TorchRL refuses to
    # draw (its copy differs from the env's), where it used to draw slot 0 of the first reset's mask
    stale = TransformedEnv(QueueEnv(cfg, log, batch_size=[3], seed=7), StepCounter())
    with pytest.raises(RuntimeError, match="rand_action method from the base env QueueEnv"):
        stale.rollout(100, break_when_any_done=False)
    # the sequences left out (as docs/hpc_queue.md shows for networks): a rule says what it lacks
    from torchrl.envs import ExcludeTransform

    for rule, config in ((QueueHeuristic("f1"), whole), (ReservingRule("f1"), reserving_config(whole))):
        lean = TransformedEnv(QueueEnv(config, log, batch_size=[3], seed=7),
                              ExcludeTransform("job_submit", "job_requested"))
        with pytest.raises(ConfigError, match="a queue rule reads the observation's job_submit, job_requested, which"):
            lean.rollout(5, rule)


def test_env_specs_and_episode_metrics(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    env = QueueEnv(log.config(sequence_length=32, window=16, backfill="easy"), log, batch_size=[4], seed=1)
    check_env_specs(env)
    td = env.reset()
    policy = QueueHeuristic("random", torch.Generator().manual_seed(0))
    while not td["done"].all():
        td = env.step(policy(td))["next"]
    m = env.episode_metrics()
    s = env.state
    assert bool(m["finished"].all()) and bool((s.start >= s.submit).all())
    wait = (s.start - s.submit).double()
    bsld = torch.maximum((wait + s.run) / s.run.clamp(min=10), torch.ones(()))
    torch.testing.assert_close(m["mean_bounded_slowdown"], bsld.mean(1))
    torch.testing.assert_close(m["mean_wait"], wait.mean(1))
    # a rollout that resets finished rows (as a collector does) keeps each finished episode's results
    # on its last step, NaN elsewhere: with fixed starts and a rule, every episode of a row is the same
    fixed = partial(QueueEnv, log.config(sequence_length=32, window=32, backfill="easy"), log, batch_size=[4],
                    starts=torch.tensor([0, 50, 100, 150]))
    env = fixed()
    collect(env, QueueHeuristic("sjf"))
    once = env.episode_metrics()
    rollout = fixed(episode_results=True).rollout(120, QueueHeuristic("sjf"), break_when_any_done=False)
    ended = rollout["next", "done"].squeeze(-1)
    assert int(ended.sum(1).min()) >= 2  # every row finished two episodes or more
    for key in EPISODE_KEYS:
        values = rollout["next", "episode", key].squeeze(-1)
        assert bool(values[ended].isfinite().all()) and bool(values[~ended].isnan().all()), key
        torch.testing.assert_close(values[ended], once[key].repeat_interleave(ended.sum(1)), msg=key)
    lean = fixed()  # the default: a caller that plays rows to their end reads episode_metrics()
    check_env_specs(lean)
    assert set(QueueEnv.POLICY_KEYS) < set(lean.observation_spec.keys())  # what a policy may read is observed
    assert "episode" not in lean.rollout(5, QueueHeuristic("sjf")).keys()


def test_a_torchrl_collector_plays_random_valid_picks_and_its_own_random_policy_is_told_how(tmp_path):
    from torchrl.collectors import Collector
    from torchrl.envs import StepCounter, TransformedEnv

    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    cfg = log.config(sequence_length=32, window=16, backfill="easy")
    env = TransformedEnv(QueueEnv(cfg, log, batch_size=[4], seed=1, episode_results=True), StepCounter(max_steps=20))
    collector = Collector(env, QueueHeuristic("random", torch.Generator().manual_seed(0)), frames_per_batch=240,
                          total_frames=480)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and all(b.shape == (4, 60) for b in batches)
    for batch in batches:  # every pick a visible job's slot, through truncations and resets
        assert bool(batch["action_mask"].gather(-1, batch["action"].unsqueeze(-1)).all())
        # the episodes that ended keep their results on their last step, through the collector's resets
        ended = batch["next", "terminated"].squeeze(-1)
        bsld = batch["next", "episode", "mean_bounded_slowdown"].squeeze(-1)
        assert bool(ended.any()) and bool((bsld[ended] >= 1).all()) and bool(bsld[~ended].isnan().all())
    assert int(batches[1]["next", "truncated"].sum()) > 0
    # TorchRL's own random policy copies the action spec once, so it draws hidden slots: the error says what to use
    with pytest.raises(ValueError, match=r"draw from the observation's action_mask \(QueueHeuristic\('random'\)"):
        list(Collector(QueueEnv(cfg, log, batch_size=[4], seed=1), None, frames_per_batch=240, total_frames=240))


def test_torchrl_users_paths_masks_transforms_groups_and_faults(tmp_path, monkeypatch):
    """What a TorchRL user meets: ActionMask keeps a TransformedEnv's spec mask current (its copy is
    taken when the spec is first read, before any reset); a group of episodes_per_sequence rows
    keeps one sequence through partial resets; a step before reset, a one-hot action or a rollout
    too large for memory are one line each."""
    from torchrl.envs import ActionMask, TransformedEnv

    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    cfg = log.config(sequence_length=32, window=16)
    env = TransformedEnv(QueueEnv(cfg, log, batch_size=[4], seed=1), ActionMask())
    env.action_spec  # read before any reset, as check_env_specs or an actor's spec= does
    check_env_specs(env)
    td = env.reset()
    for _ in range(40):  # rand_action draws visible slots only
        td = env.step(env.rand_action(td))["next"]
    # a row's n-th episode plays its group's n-th sequence, however its group's rows reset
    grouped = QueueEnv(cfg, log, batch_size=[6], seed=2, episodes_per_sequence=3)

    def reset(*rows):
        td["_reset"] = torch.tensor([r in rows for r in range(6)]).unsqueeze(-1)
        return grouped.reset(td)["job_submit"].clone()

    td = grouped.reset()
    first = td["job_submit"].clone()
    second = reset(0, 1)  # rows 0 and 1 on group 0's second sequence, row 2 still on its first
    assert torch.equal(second[0], second[1]) and not torch.equal(second[0], first[0])
    assert torch.equal(second[2], first[2]) and torch.equal(second[3:], first[3:])
    third = reset(0)  # row 0 ahead: group 0's third sequence
    assert not torch.equal(third[0], second[0]) and not torch.equal(third[0], first[0])
    caught_up = reset(1, 2)  # row 1 to the third, row 2 to the second: the ones row 0 played
    assert torch.equal(caught_up[1], third[0]) and torch.equal(caught_up[2], second[0])
    whole = reset(3, 4, 5)  # group 1's second sequence, shared
    assert torch.equal(whole[3], whole[4]) and torch.equal(whole[4], whole[5]) and not torch.equal(whole[3], first[3])
    # reset() without "_reset" starts every group on a new sequence together
    again = grouped.reset()["job_submit"]
    assert all(torch.equal(again[g * 3], again[g * 3 + k]) for g in (0, 1) for k in (1, 2))
    fresh = QueueEnv(cfg, log, batch_size=[4], seed=1)
    with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\): call env.reset\(\) first"):
        fresh.step(fresh.fake_tensordict())
    td = fresh.reset()
    td["action"] = torch.nn.functional.one_hot(torch.zeros(4, dtype=torch.long), 16)
    with pytest.raises(ConfigError, match=r'"action" must be one slot index a row, 4 in all, got shape \[4, 16\]'):
        fresh.step(td)
    monkeypatch.setenv("LIGHTNING_SCHED_MEMORY_BYTES", str(2**20))
    with pytest.raises(ConfigError, match=r"QueueEnv.rollout\(1000\) would need about .*max_steps=1000, "
                                          r"batch_size=4, sequence_length=32, window=16"):
        fresh.rollout(1000)


def test_final_and_per_job_rewards_return_minus_the_mean_bsld(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    for reward in ("per_job", "final"):
        cfg = log.config(sequence_length=32, window=16, reward=reward)
        env = QueueEnv(cfg, log, batch_size=[3], starts=[0, 100, 200])
        td, total = env.reset(), torch.zeros(3, 1)
        while not td["done"].all():
            td["action"] = torch.zeros(3, dtype=torch.long)
            td = env.step(td)["next"]
            total += td["reward"]
        torch.testing.assert_close(total.squeeze(1).double(), -env.episode_metrics()["mean_bounded_slowdown"],
                                   rtol=1e-5, atol=1e-5)


def test_collect_keeps_the_steps_rows_first_and_plays_every_row_to_its_end(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=400))
    env = QueueEnv(log.config(sequence_length=32, window=16, backfill="easy"), log, batch_size=[3],
                   starts=[0, 100, 200])
    traj = collect(env, QueueHeuristic("sjf"), ("action", "action_mask", "done", ("next", "reward"), "absent"))
    steps = traj.shape[1]
    assert traj.shape == (3, steps) and traj["action_mask"].shape == (3, steps, 16) and "absent" not in traj.keys()
    assert bool(env.episode_metrics()["finished"].all())
    # "done": the row had ended before the step; every row decides first, and some row last
    assert not bool(traj["done"][:, 0].any()) and not bool(traj["done"][:, -1].all())
    torch.testing.assert_close(traj["next", "reward"].sum((1, 2)).double(),
                               -env.episode_metrics()["mean_bounded_slowdown"], rtol=1e-5, atol=1e-5)
    played = collect(env, QueueHeuristic("sjf"))  # nothing kept: the steps taken alone
    assert played.shape == (3, steps) and not played.keys()


def test_rules_rank_the_whole_queue_and_refuse_a_partial_view(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=600))
    cfg = log.config(sequence_length=128, window=4)
    starts = torch.tensor([0, 200, 400])
    results = {n: evaluate_queue(p, c, log, starts) for n, (p, c) in heuristic_policies(["fcfs", "sjf"], cfg).items()}
    assert all(r.summary["num_sequences"] == 3 for r in results.values())
    with pytest.raises(ConfigError, match="hides waiting jobs"):
        evaluate_queue(QueueHeuristic("sjf"), cfg, log, starts)  # window 4 on a busy log


def test_heldout_protocol_draws_only_from_the_last_fifth(tmp_path):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=6000))
    starts = protocol_starts(log, "heldout", 100)
    assert len(starts) == 100 and int(starts.min()) >= 4800 and int(starts.max()) + 1024 <= 6000
    recent = protocol_starts(log, "recent", 100)  # the training range's last quarter, never the test's jobs
    assert len(recent) == 100 and int(recent.min()) >= 3600 and int(recent.max()) + 1024 <= 4800
    # disjoint: the whole log in sequences that share no job, and the note says so
    from lightning_sched.queue.evaluation import overlap, overlap_note

    disjoint = protocol_starts(log, "disjoint", length=1024)
    assert disjoint.tolist() == [0, 1024, 2048, 3072, 4096]
    assert overlap_note(overlap(disjoint, 1024), 1024, 5) == "covering 5120 jobs (the sequences share no job)"
    assert "at most 1.2 independent stretches" in overlap_note(overlap(starts, 1024), 1024, 100)
    with pytest.raises(ConfigError, match="protocol disjoint: log.swf has 6000 jobs, not two sequences of 4000"):
        protocol_starts(log, "disjoint", length=4000)
    from lightning_sched.queue.evaluation import run_protocol
    from lightning_sched.queue.sites import SiteModel

    printed = []  # the jobs past the last whole sequence are said to be left out
    run_protocol(str(tmp_path / "log.swf"), "disjoint", ["fcfs"], echo=printed.append, sequence_length=1024)
    assert any(line.startswith("protocol disjoint: 5 sequences (the log's last 880 jobs left out: less than a "
                               "sequence) of 1024 jobs") for line in printed)
    # this log's jobs are 3.16 times what its cluster can run: a note that the cluster may be misread
    assert printed[1].startswith("note: an offered load of 3.16: more work than the cluster could ever run")
    printed.clear()
    run_protocol(str(tmp_path / "log.swf"), "disjoint", ["fcfs"], echo=printed.append, site=SiteModel("load", load=0.9))
    assert not any(line.startswith("note: an offered load") for line in printed)


def test_sjf_holds_the_head_job_and_backfilling_starts_around_it():
    # 4 nodes: job 0 (2 nodes, 100 s); job 1 (4 nodes) must wait for it; job 2 (1 node, 30 s) fits in
    # the hole before 100 only with EASY.
    jobs = torch.tensor([[(0, 100, 100, 2), (10, 200, 200, 4), (20, 30, 30, 1)]])
    cols = {k: jobs[..., i] for i, k in enumerate(("submit", "run", "requested", "processors"))}
    for backfill, starts in (("off", [0, 100, 300]), ("easy", [0, 100, 20])):
        cfg = QueueConfig(nodes=4, window=4, sequence_length=3, backfill=backfill)
        state = init_state(cols, cfg.nodes, cfg.processors_per_node)
        while not state.done.all():
            window = step_and_observe(state, torch.tensor([-1]), cfg)["window_job"]
            step_and_observe(state, window[:, 0], cfg)  # FCFS: the first visible job
        assert state.start[0].tolist() == starts, backfill


def test_utilization_counts_the_nodes_jobs_hold():
    # 2 nodes of 4 processors: a 1-processor job (takes a node) and a 4-processor one, both 100 s from 0
    jobs = torch.tensor([[(0, 100, 100, 1), (0, 100, 100, 4)]])
    cols = {k: jobs[..., i] for i, k in enumerate(("submit", "run", "requested", "processors"))}
    cfg = QueueConfig(nodes=2, processors_per_node=4, window=2, sequence_length=2)
    state = init_state(cols, cfg.nodes, cfg.processors_per_node)
    while not state.done.all():
        window = step_and_observe(state, torch.tensor([-1]), cfg)["window_job"]
        step_and_observe(state, window[:, 0], cfg)
    m = episode_metrics(state, cfg)
    assert state.start[0].tolist() == [0, 0] and float(m["makespan"][0]) == 100
    assert float(m["utilization"][0]) == 1.0  # both nodes busy all along (5 of 8 processors)


def test_evaluate_says_when_the_range_holds_fewer_sequences_than_asked(tmp_path, capsys):
    from conftest import script_main

    log = write_log(tmp_path / "log.swf", jobs=600, nodes=64)  # held out: its last 120 jobs
    script_main("evaluate")(["--env", "queue", "--trace", str(log), "--protocol", "heldout", "--sequence_length", "100",
                             "--sequences", "500", "--policy", "fcfs", "--threads", "1"])
    assert "21 sequences (of 500 asked: the range has no more distinct starts) of 100 jobs" in capsys.readouterr().out


def test_evaluate_says_when_a_protocol_or_a_load_leaves_nothing_to_compare(tmp_path, capsys):
    from conftest import script_main

    evaluate = script_main("evaluate")
    long = write_log(tmp_path / "long.swf", jobs=9900, nodes=64)
    evaluate(["--env", "queue", "--trace", str(long), "--policy", "fcfs", "--threads", "1"])
    assert "note: RLScheduler's protocol is its 10 start positions in the Lublin logs; on long.swf" in \
        capsys.readouterr().out
    idle = tmp_path / "idle.swf"  # a job every hour, each 10 s on one node: none ever waits
    idle.write_text("; MaxNodes: 4\n" + "\n".join(swf_line(j, 3600 * j, 10, 1) for j in range(1, 301)) + "\n")
    evaluate(["--env", "queue", "--trace", str(idle), "--protocol", "heldout", "--sequence_length", "20",
              "--sequences", "4", "--policy", "fcfs", "sjf", "--threads", "1"])
    assert "note: every job's bounded slowdown is 1 under every policy (offered load 0.00: no job waited" in \
        capsys.readouterr().out
    unzipped = tmp_path / "lublin_256.swf"  # RLScheduler's own file name, not gzipped: no note
    unzipped.write_text(long.read_text())
    evaluate(["--env", "queue", "--trace", str(unzipped), "--policy", "fcfs", "--threads", "1"])
    assert "RLScheduler's protocol is its 10 start positions" not in capsys.readouterr().out
    one = tmp_path / "one.swf"  # one held-out sequence: no halves (nothing to split), valid JSON
    one.write_text(long.read_text().replace("\n".join(long.read_text().splitlines()[2:]), "\n".join(
        long.read_text().splitlines()[2:502])))
    evaluate(["--env", "queue", "--trace", str(one), "--protocol", "heldout", "--sequence_length", "100",
              "--policy", "fcfs", "sjf", "--threads", "1", "--json"])
    printed = capsys.readouterr().out
    assert "(paired 95% CI, 1 sequences)" in printed and "; halves" not in printed and "NaN" not in printed


def test_overlap_counts_the_jobs_sequences_and_their_halves_share():
    from lightning_sched.queue.evaluation import overlap

    assert overlap(torch.tensor([30, 0, 20, 10]), 15) == {  # jobs 0..44; halves [0, 25) and [20, 45)
        "covered_jobs": 45, "independent_stretches": 3.0, "halves_shared_jobs": 5}
    assert overlap(torch.tensor([100, 0]), 50) == {"covered_jobs": 100, "independent_stretches": 2.0,
                                                   "halves_shared_jobs": 0}
    assert overlap(torch.tensor([7]), 50)["halves_shared_jobs"] == 0  # no halves


def test_evaluate_script_on_a_log(tmp_path):
    log = write_log(tmp_path / "log.swf", jobs=6000, nodes=64)
    out = conftest.run_script(ROOT / "scripts/evaluate.py", "--env", "queue", "--trace", log, "--protocol", "heldout",
                              "--sequences", "4", "--backfill", "easy", "--policy", "fcfs", "sjf", "f1", "--versus",
                              "sjf", "--threads", "1", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert [x["policy"] for x in lines] == ["fcfs", "sjf", "f1"]
    best = min(lines, key=lambda x: x["mean_bounded_slowdown"])
    assert all(x["best_heuristic"] == best["policy"] for x in lines if x is not best)
    for x in lines:  # --versus: each other policy's paired difference to sjf, the mean of the differences
        assert ("minus_versus" in x) == (x["policy"] != "sjf")
        if x["policy"] != "sjf":
            assert x["minus_versus"] == pytest.approx(x["mean_bounded_slowdown"] - lines[1]["mean_bounded_slowdown"])
            assert sum(x["minus_versus_halves"]) / 2 == pytest.approx(x["minus_versus"])  # two halves of 2
    for x in lines:  # the halves of the range's starts, each alone: together the whole difference
        if x is not best:
            first, later = x["minus_best_heuristic_halves"]
            assert (first + later) / 2 == pytest.approx(x["minus_best_heuristic"])
            assert f"halves {first:+.2f} / {later:+.2f})" in out.stdout
    assert all(x["num_sequences"] == 4 and x["log"]["kept"] == 6000 for x in lines)
    # 4 starts in [4800, 4976], 1024 jobs each: 1,200 jobs, and halves that share most of theirs
    spread = lines[0]["covered_jobs"], lines[0]["independent_stretches"], lines[0]["halves_shared_jobs"]
    assert spread[:2] == (1200, 1.17) and 900 < spread[2] < 1024, spread
    assert f"half of the starts, sharing {spread[2]} jobs, show" in out.stdout
    bad = conftest.run_script(ROOT / "scripts/evaluate.py", "--env", "queue", "--trace", log, "--policy", "lifo",
                              cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'lifo'" in bad.stderr  # the command line's form
    from conftest import script_main

    evaluate = script_main("evaluate")  # the other refusals in this process: the same code, no start-up
    for flags, message in ((["--policy", "f1", "--versus", "sjf"], "--versus 'sjf' is not one of"),
                           (["--policy", "sjf", "f1", "sjf"], "--policy 'sjf' is given twice"),
                           (["--protocol", "rlscheduler", "--sequences", "3"], "has its own 10 sequences"),
                           (["--protocol", "disjoint", "--sequences", "3"], "the disjoint protocol takes every"),
                           (["--figure", str(tmp_path / "f.txt")], "matplotlib cannot write .txt")):
        with pytest.raises(ConfigError) as refused:
            evaluate(["--env", "queue", "--trace", str(log), *flags])
        assert message in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_bench_env_queue_prints_rates_and_an_iteration(tmp_path):
    log = write_log(tmp_path / "log.swf", jobs=3000)
    out = conftest.run_script(ROOT / "scripts/bench_env.py", "--env", "queue", "--trace", log, "--batch_sizes", "8",
                              "--steps", "3", "--repeats", "1", "--threads", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["decisions_per_s"]) == {f"queue/{b}/{p}/native/8" if native.kernel() else f"queue/{b}/{p}/torch/8"
                                               for b in ("off", "easy") for p in ("random", "fcfs")}
    assert all(v > 0 for v in result["decisions_per_s"].values())
    assert result["queue/easy/ppo_iteration"]["iteration_s"] > 0


def test_an_env_too_large_for_memory_is_refused_before_it_allocates(tmp_path, monkeypatch):
    log = read_queue_log(write_log(tmp_path / "log.swf", jobs=300))
    with pytest.raises(ConfigError, match=r"QueueEnv would need about .*batch_size=100000000, sequence_length=128"):
        QueueEnv(log.config(sequence_length=128, window=16), log, batch_size=[100_000_000])
    from tasks.queue_ppo import (  # a training run checks its envs and rollout together, at construction
        QueuePPO,
        QueueValidation,
    )

    with pytest.raises(ConfigError, match=r"QueuePPO would need about .*largest part=rollout"):
        QueuePPO(str(tmp_path / "log.swf"), window=16, sequence_length=128, batch_size=10_000_000)
    monkeypatch.setenv("LIGHTNING_SCHED_WORK_SECONDS", "1")
    with pytest.raises(ConfigError, match=r"QueuePPO would take at least .*validation.sequences=1000"):
        QueuePPO(str(tmp_path / "log.swf"), window=16, sequence_length=128,
                 validation=QueueValidation(sequences=1000, sequence_length=128))



def test_an_evaluation_names_the_sequences_a_checkpoint_trained_on(tmp_path):
    from lightning_sched.queue.evaluation import training_notes
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicyRecord, QueuePolicySpec

    log = read_queue_log(write_log(tmp_path / "site.swf", jobs=1000))
    record = QueuePolicyRecord.of(QueueNetwork(QueuePolicySpec()), log.config(backfill="off"),
                                  log=[str(tmp_path / "site.swf")], train_fraction=0.5)
    for ckpt in (tmp_path / "p.ckpt", tmp_path / "p.pt"):  # any file name: adapt.py and ensemble.py write .pt too
        record.save(ckpt)
        notes, read_note, read = training_notes(str(ckpt), log, torch.tensor([100, 499, 500, 900]), "easy")
        assert read == 2 and notes == [f"note: {ckpt} trained with backfilling off, runs here with easy"]
        assert read_note == (f"note: {ckpt} trained on the first 50% of site.swf's jobs (a log of that file "
                             "name, gzipped or not): 2 of these 4 sequences hold jobs it read")
    assert training_notes(str(ckpt), log, torch.tensor([500, 900]), "off") == ([], None, 0)
    import gzip  # the same log gzipped: the same note
    (tmp_path / "site.swf.gz").write_bytes(gzip.compress((tmp_path / "site.swf").read_bytes()))
    zipped = read_queue_log(tmp_path / "site.swf.gz")
    assert training_notes(str(ckpt), zipped, torch.tensor([100, 900]), "off").read == 1
    # one share a log (a policy adapted on this site after training elsewhere on whole logs): this log's
    adapted = QueuePolicyRecord.of(QueueNetwork(QueuePolicySpec()), log.config(backfill="off"),
                                   log=["other.swf", str(tmp_path / "site.swf")], train_fraction=(1.0, 0.5))
    assert training_notes(str(ckpt), log, torch.tensor([100, 499, 500, 900]), "off", adapted).read == 2
    with pytest.raises(ConfigError, match="train_fraction holds 1 shares for 2 logs"):
        QueuePolicyRecord.of(QueueNetwork(QueuePolicySpec()), log.config(), log=["a.swf", "b.swf"],
                             train_fraction=[0.5])
    other = read_queue_log(write_log(tmp_path / "other.swf", jobs=1000))
    assert training_notes(str(ckpt), other, torch.tensor([0]), "off") == ([], None, None)  # never read this log
    assert training_notes("f1", log, torch.tensor([0]), "off") == ([], None, None)
    from lightning_sched.queue.evaluation import run_protocol
    # a run over both backfilling settings says which sequences hold its jobs once
    printed, said = [], set()
    for backfill in ("off", "easy"):
        run_protocol(str(tmp_path / "site.swf"), "disjoint", [str(ckpt)], backfill=backfill, sequence_length=250,
                     echo=printed.append, said=said)
    assert sum(line.endswith("sequences hold jobs it read") for line in printed) == 1
    assert sum(line.endswith("runs here with easy") for line in printed) == 1


def test_a_small_log_without_a_header_evaluates_with_its_cluster_and_sequence_length_given(tmp_path, capsys):
    from conftest import script_main

    path = write_log(tmp_path / "site.swf", jobs=1500, nodes=32)
    path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith(";")) + "\n")
    main = script_main("evaluate")
    with pytest.raises(TraceError, match="header gives neither MaxNodes nor MaxProcs: add '; MaxNodes: N'"):
        main(["--env", "queue", "--trace", str(path), "--protocol", "heldout", "--policy", "f1", "--threads", "1"])
    assert main(["--env", "queue", "--trace", str(path), "--protocol", "heldout", "--sequence_length", "200",
                 "--sequences", "4", "--nodes", "32", "--policy", "fcfs", "f1", "--threads", "1", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(line["policy"], line["jobs"], line["log"]["nodes"]) for line in lines] == [("fcfs", 800, 32),
                                                                                        ("f1", 800, 32)]
    # a larger threshold bounds more slowdowns at 1: the same schedules score lower
    assert main(["--env", "queue", "--trace", str(path), "--protocol", "heldout", "--sequence_length", "200",
                 "--sequences", "4", "--nodes", "32", "--policy", "fcfs", "f1", "--threads", "1", "--json",
                 "--bsld_threshold", "100000"]) == 0
    bounded = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    for low, high in zip(lines, bounded, strict=True):
        assert high["mean_bounded_slowdown"] < low["mean_bounded_slowdown"] and high["mean_wait"] == low["mean_wait"]
    with pytest.raises(ConfigError, match="the rlscheduler protocol's sequences are 1024 jobs"):
        main(["--env", "queue", "--trace", str(path), "--sequence_length", "200", "--policy", "f1"])


def test_a_damaged_read_share_is_named(tmp_path):
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicyRecord, QueuePolicySpec, read_queue_record

    log = read_queue_log(write_log(tmp_path / "site.swf", jobs=100))
    record = QueuePolicyRecord.of(QueueNetwork(QueuePolicySpec()), log.config(), log=["site.swf"]).to_dict()
    for bad in ("0.8", [0.8, 2.0], True, []):
        torch.save({"lightning_sched": {**record, "train_fraction": bad}}, tmp_path / "bad.ckpt")
        with pytest.raises(ConfigError, match=r"bad.ckpt: QueuePolicyRecord.train_fraction must be a share in "
                                              r"\(0, 1\] or one a log, got"):
            read_queue_record(tmp_path / "bad.ckpt")
