"""The decision service (lightning_sched.decide, scripts/decide.py): snapshots in, decisions out, the
same schedule as the queue environment, an ONNX export that decides as its checkpoint, one-line errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from test_queue_env import swf_line

from lightning_sched.config import ConfigError
from lightning_sched.decide import MAX_JOBS, SnapshotError, decide, export_onnx, load_scorer, read_snapshot
from lightning_sched.decide.replay import replay
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.evaluation import resolve
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import QueuePolicy, load_queue_policy

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "checkpoints" / "queue_bsld_easy.ckpt"
MINIMAL = {"now": 86400, "capacity": {"processors": 256},
           "running": [{"id": "a1", "processors": 16, "expected_end": 90000}],
           "waiting": [{"id": "b7", "submit": 86000, "requested_time": 3600, "processors": 32}]}


@pytest.fixture(scope="module")
def scorer():
    return load_scorer(POLICY)


@pytest.fixture(scope="module")
def onnx_policy(tmp_path_factory):
    return export_onnx(POLICY, tmp_path_factory.mktemp("onnx") / "policy.onnx")


def site_log(path: Path, jobs: int, nodes: int, seed: int) -> Path:
    """A busy log whose requested times overstate run times (so EASY's estimates differ from the
    actual ends), with ties in submit times and identical jobs."""
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(25, jobs).astype(np.int64) * rng.integers(0, 2, jobs))
    run = np.exp(rng.uniform(0, 8, jobs)).astype(np.int64) + 1
    requested = run * rng.choice([1, 2, 10], jobs)
    procs = 2 ** rng.integers(0, 6, jobs)
    lines = [f"; MaxNodes: {nodes}", f"; MaxProcs: {nodes}"]
    lines += [swf_line(i + 1, int(submit[i]), int(run[i]), int(procs[i]), requested=int(requested[i]))
              for i in range(jobs)]
    path.write_text("\n".join(lines) + "\n")
    return path


def env_starts(log, backfill: str, window: int, start: int, length: int) -> np.ndarray:
    net, _ = load_queue_policy(POLICY)
    cfg = log.config(window=window, backfill=backfill, sequence_length=length)
    env = QueueEnv(cfg, log, batch_size=[1], starts=[start])
    td, policy = env.reset(), QueuePolicy(net)
    while not bool(td["done"].all()):
        td = env.step(policy(td))["next"]
    return env.state.start[0].numpy()


def sequence(log, start: int, length: int) -> dict:
    return {k: v[0].numpy() for k, v in log.sequences(torch.tensor([start]), length).items()}


def test_minimal_snapshot_gets_the_minimal_answer(scorer):
    answer = decide(MINIMAL, scorer)
    assert answer["order"] == ["b7"] and answer["start_now"] == ["b7"] and answer["held"] is None
    assert len(answer["scores"]) == 1 and np.isfinite(answer["scores"][0])


@pytest.mark.parametrize("backfill", ["off", "easy"])
@pytest.mark.parametrize("window", [128, 6])  # 6: a crowded window, RLScheduler's alternation
def test_replay_through_decide_gives_the_environments_schedule(tmp_path, scorer, backfill, window):
    log = read_queue_log(site_log(tmp_path / "site.swf", jobs=700, nodes=64, seed=window))
    for start in (0, 300):
        snapshots = []
        ours = replay(sequence(log, start, 400), log.nodes, log.processors_per_node, scorer, backfill, window,
                      on_decision=lambda s, a: snapshots.append((s, a)))
        np.testing.assert_array_equal(ours, env_starts(log, backfill, window, start, 400))
        assert (ours >= 0).all()
        assert any(len(s["waiting"]) > window for s, _ in snapshots) or window == 128
        assert any(a["held"] for _, a in snapshots)
        assert any(a["backfilled"] for _, a in snapshots) == (backfill == "easy")


RULES_AND_SEARCHED = [("f1", "off", None), ("f1", "easy", None), ("sjf", "easy", None), ("wfp3+reserve", "off", None),
                      ("f1+reserve", "off", None), ("checkpoints/queue_bsld_rule.ckpt", "off", None),
                      ("checkpoints/queue_bsld_easy_rule.ckpt", "easy", None),
                      ("checkpoints/queue_bsld_reserve.ckpt", "off", None),
                      ("checkpoints/queue_bsld_reserve.ckpt", "off", 6)]  # 6: a crowded window


@pytest.mark.parametrize(("policy", "backfill", "window"), RULES_AND_SEARCHED)
def test_rules_searched_rules_and_reserving_networks_decide_as_in_the_environment(tmp_path, policy, backfill, window):
    """decide() builds the environment's own observation of each snapshot, so a replay gives the schedule
    evaluate.py's policy makes in the environment, on the log's clock (clock_start 0)."""
    spec = str(ROOT / policy) if policy.endswith(".ckpt") else policy
    log = read_queue_log(site_log(tmp_path / "site.swf", jobs=600, nodes=64, seed=3))
    cfg = log.config(backfill=backfill, sequence_length=300)
    rule, run_cfg = resolve(spec, cfg)
    env = QueueEnv(run_cfg if window is None else replace(run_cfg, window=window), log, batch_size=[1], starts=[250])
    td = env.reset()
    while not bool(td["done"].all()):
        td = env.step(rule(td))["next"]
    answers = []
    ours = replay(sequence(log, 250, 300), log.nodes, log.processors_per_node, load_scorer(spec), backfill, window,
                  on_decision=lambda s, a: answers.append(a))
    np.testing.assert_array_equal(ours, env.state.start[0].numpy())
    assert window is None or any(None in a["scores"] for a in answers)  # jobs beyond the window, scored null
    assert any(a["held"] for a in answers)
    assert any(a["backfilled"] for a in answers) == (backfill == "easy")
    if "reserve" in policy or "bsld_rule" in policy:  # the reservation starts a job the ranking does not put first
        assert any(a["start_now"] and a["start_now"][0] != a["order"][0] for a in answers)


def test_a_policy_reading_submit_times_needs_the_clocks_start():
    """F1 weighs log10(submit time): on a live clock (seconds since 1970) its order differs from the log's,
    so the policies that read it refuse to guess where the log's time 0 is; the others need no start."""
    assert decide(MINIMAL, load_scorer("sjf"))["order"] == ["b7"]
    for policy in ("f1", "f1+reserve", str(ROOT / "checkpoints" / "queue_bsld_easy_rule.ckpt"),
                   str(ROOT / "checkpoints" / "queue_bsld_reserve.ckpt")):
        scorer = load_scorer(policy)
        with pytest.raises(ConfigError, match=r"reads .*submit times.*: give --clock_start SECONDS, where your log's"):
            decide(MINIMAL, scorer)
        assert decide(MINIMAL, scorer, clock_start=86000)["start_now"] == ["b7"]
        with pytest.raises(SnapshotError, match=r"^clock_start: 86001 is after the earliest submit \(86000\)$"):
            decide(MINIMAL, scorer, clock_start=86001)
    for rule in ("random", "wfp3_rlscheduler", "unicep_rlscheduler"):  # the last two read -1 - submit as the wait
        with pytest.raises(ConfigError, match=f"^--policy {rule} (draws at random|is kept only to reproduce "
                                              "RLScheduler's published cells): it does not decide for a scheduler"):
            load_scorer(rule)


def test_rule_names_scores_and_limits_of_the_policies_that_observe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("sjf").write_text("a file named like a rule")  # a rule's name is the rule, as in evaluate.py
    snapshot = {"now": 0, "capacity": {"processors": 64}, "running": [],
                "waiting": [{"id": "century", "submit": 0, "requested_time": 3.2e9, "processors": 1},
                            {"id": "hour", "submit": 0, "requested_time": 3600, "processors": 1}]}
    answer = decide(snapshot, load_scorer("sjf"))  # 3.2e9 s would overflow SJF's packed key
    assert answer["order"] == ["hour", "century"] and answer["scores"] == [-3600.0, -3.2e9]
    assert answer["start_now"] == ["hour", "century"]
    fcfs = decide({**snapshot, "waiting": snapshot["waiting"][1:]}, load_scorer("fcfs"))
    assert json.dumps(fcfs["scores"]) == "[0.0]"  # not -0.0
    f1 = load_scorer("f1")
    messages = {  # clock_start: the one-line refusal
        1e300: "clock_start: 1e+300 is after now (0)", 1: "clock_start: 1 is after now (0)",
        -1e19: "now: 0 is 2^40 s or more after clock_start (-1e+19), the environment's limit"}
    for start, message in messages.items():
        with pytest.raises(SnapshotError) as refused:
            decide(snapshot, f1, clock_start=start)
        assert str(refused.value) == message
    far = {**snapshot, "waiting": [{**snapshot["waiting"][1], "requested_time": 1.2e12}]}
    with pytest.raises(SnapshotError, match=r"^waiting\[0\].requested_time: 1.2e\+12 ends past 2\^40 s after "
                                            r"clock_start, the environment's limit \(job 'hour'\)$"):
        decide(far, f1, clock_start=0)
    assert decide(snapshot, f1, clock_start=np.int64(0))["order"] == ["hour", "century"]
    fractional = {"now": 10, "capacity": {"processors": 1},
                  "running": [{"id": "r", "processors": 1, "expected_end": 99}],
                  "waiting": [{"id": "a", "submit": 0, "requested_time": 9.9, "processors": 1},
                              {"id": "b", "submit": 5, "requested_time": 9.3, "processors": 1}]}
    sjf = decide(fractional, load_scorer("sjf"))  # the policy's view in whole seconds: 10 s each, FCFS breaks ties
    assert sjf["order"] == ["a", "b"] and sjf["scores"] == [-10.0, -10.0]
    Path("reserve.pt").write_bytes((ROOT / "checkpoints" / "queue_bsld_reserve.ckpt").read_bytes())
    assert decide(MINIMAL, load_scorer("reserve.pt"), clock_start=0)["start_now"] == ["b7"]  # any file name
    with pytest.raises(ConfigError, match="^--export: f1 is a rule: only a network's checkpoint exports to ONNX"):
        export_onnx("f1", tmp_path / "f1.onnx")


def test_sjf_key_is_the_lexicographic_order_whatever_the_times():
    from lightning_sched.queue.heuristics import sjf_key

    gen = torch.Generator().manual_seed(0)
    for high in (1000, 2**33, 2**40):  # within the packed key, and past it
        requested = torch.randint(1, high, (4, 50), generator=gen)
        requested[:, ::7] = requested[:, :1]  # ties, broken by submit
        submit = torch.randint(0, high, (4, 50), generator=gen)
        key = sjf_key(requested, submit)
        for row in range(4):
            expected = sorted(range(50), key=lambda j: (int(requested[row, j]), int(submit[row, j]), j))
            assert torch.sort(key[row], stable=True).indices.tolist() == expected, high


def test_onnx_export_decides_as_its_checkpoint_on_10000_snapshots(tmp_path, scorer, onnx_policy):
    recorded = []
    for seed, (backfill, window) in enumerate([("easy", 8), ("off", 8), ("easy", 128), ("off", 32)] * 3):
        log = read_queue_log(site_log(tmp_path / f"site{seed}.swf", jobs=1200, nodes=64, seed=seed))
        replay(sequence(log, 0, 1200), log.nodes, log.processors_per_node, scorer, backfill, window,
               on_decision=lambda s, a, b=backfill, w=window: recorded.append((s, a, b, w)))
        if len(recorded) >= 10_000:
            break
    assert len(recorded) >= 10_000
    exported = load_scorer(onnx_policy)
    for snapshot, answer, backfill, window in recorded[:10_000]:
        theirs = decide(snapshot, exported, backfill, window)
        assert (theirs["start_now"], theirs["held"]) == (answer["start_now"], answer["held"])
        # the ranking may swap jobs whose scores differ in the last float digits, nothing more
        np.testing.assert_allclose(theirs["scores"], answer["scores"], rtol=1e-5, atol=1e-5)


class Widest:
    """A scorer that prefers the widest job (the processor share feature): a fixed rule to test decide()'s rules."""

    config = {"window": 128, "max_wait": 43200.0, "max_requested": 43200.0, "backfill": "off"}

    def __call__(self, job_features, cluster_features):
        return job_features[:, 2].copy()


def test_held_pick_waits_and_easy_backfills_around_it():
    now = 1000
    crowded = {"now": now, "capacity": {"processors": 8},
               "running": [{"id": "r", "processors": 6, "expected_end": now + 500}],
               "waiting": [{"id": "short", "submit": 10, "requested_time": 50, "processors": 2},
                           {"id": "wide", "submit": 0, "requested_time": 100, "processors": 8},
                           {"id": "long", "submit": 20, "requested_time": 5000, "processors": 2}]}
    first = decide(crowded, Widest(), backfill="easy")
    assert first["order"] == ["wide", "short", "long"]  # ties in FCFS (submit) order, not list order
    assert first["held"] == {"id": "wide", "shadow": now + 500}
    assert first["backfilled"] == ["short"] and first["start_now"] == ["short"]  # "long" would delay "wide"
    assert decide(crowded, Widest(), backfill="off")["start_now"] == []
    still_busy = decide({**crowded, "now": now + 100, "held": first["held"]}, Widest(), backfill="off")
    assert still_busy["start_now"] == [] and still_busy["held"] == first["held"]
    freed = decide({**crowded, "now": now + 500, "running": [], "held": first["held"]}, Widest(), backfill="easy")
    assert freed["start_now"] == ["wide"] and freed["held"] == {"id": "short", "shadow": now + 500 + 100}
    assert freed["backfilled"] == []  # "long" (5000 s) would end after the held job's reserved start
    # "r" outlives its expected end (now + 500): the passed shadow is stale, EASY reserves from now on
    overrun = decide({**crowded, "now": now + 700, "held": first["held"],
                      "waiting": [*crowded["waiting"], {"id": "tiny", "submit": 30, "requested_time": 60,
                                                        "processors": 2}]}, Widest(), backfill="easy")
    assert overrun["held"] == {"id": "wide", "shadow": now + 700} and overrun["start_now"] == []
    # the held job was cancelled (or started by the scheduler): let go and named, the queue decided afresh
    gone = decide({**crowded, "waiting": crowded["waiting"][:1], "held": first["held"]}, Widest(), backfill="easy")
    assert gone["held_not_waiting"] == "wide" and gone["start_now"] == ["short"] and gone["held"] is None


BAD = [
    ({"now": -1}, "now: -1 must be >= 0"),
    ({"now": "soon"}, "now: 'soon' is not a finite number"),
    ({"capacity": {"processors": 0}}, "capacity.processors: 0 must be >= 1"),
    ({"capacity": {}}, "capacity: expected"),
    ({"waiting": [{"id": "x", "submit": 1, "processors": 1}]}, "waiting[0].requested_time: missing"),
    ({"waiting": [{"id": "x", "submit": 1, "requested_time": -5, "processors": 1}]},
     "waiting[0].requested_time: -5 must be > 0"),
    ({"waiting": [{"id": "x", "submit": 1, "requested_time": 5, "processors": 300}]},
     "waiting[0].processors: 300 is more than the cluster's 256 processors"),
    ({"waiting": [{"id": "b7", "submit": 1, "requested_time": 5, "processors": 1}] * 2},
     "waiting[1].id: 'b7' is a duplicate job id"),
    ({"waiting": [{"id": "a1", "submit": 1, "requested_time": 5, "processors": 1}]},
     "waiting[0].id: 'a1' is a duplicate job id"),
    ({"waiting": [{"id": "x", "submit": 99999, "requested_time": 5, "processors": 1}]},
     "waiting[0].submit: 99999 is after now (86400)"),
    ({"running": [{"id": "r", "processors": 250, "expected_end": 1}, {"id": "s", "processors": 20, "expected_end": 1}]},
     "running: the running jobs hold 270 nodes, the cluster has 256"),
    ({"running": [{"id": "r", "processors": 1.5, "expected_end": 1}]}, "running[0].processors: 1.5 is not an integer"),
    ({"waiting": [{"id": "x", "submit": float("nan"), "requested_time": 5, "processors": 1}]},
     "waiting[0].submit: nan is not a finite number"),
    ({"capacity": {"nodes": 16}}, "capacity.processors_per_node: missing beside nodes"),
    ({"capacity": {"processors": 8, "processors_per_node": 4}}, "capacity.processors_per_node: given without nodes"),
    ({"held": {"id": "zz", "shadow": "later"}}, "held.shadow: 'later' is not a finite number"),
    ({"now": 10**400}, "now: 10000000000000000000... (401 characters) is out of range"),
    ({"capacity": {"nodes": 1, "processors_per_node": 10**30}}, "capacity.processors_per_node: "),
    ({"waiting": [{"id": "x", "submit": 1, "requested_time": 5, "processors": 10**30}]},
     "waiting[0].processors: 1000000000000000000000000000000 is out of range (at most 2147483647)"),
    ({"running": [{"id": "r", "processors": 1, "expected_end": 1e300}]},
     "running[0].expected_end: 1e+300 is out of range"),
    ({"waiting": [{"id": str(i), "submit": 0, "requested_time": 1, "processors": 1} for i in range(MAX_JOBS + 1)]},
     f"more than the cap of {MAX_JOBS}"),
    # a field it does not know would change nothing silently: refused, the job named by its id
    ({"hold": {"id": "b7", "shadow": 1}}, "snapshot.hold: unknown field (a snapshot entry has now, capacity,"),
    ({"capacity": {"processors": 256, "gpus": 8}}, "capacity.gpus: unknown field"),
    ({"waiting": [{"id": "x", "submit": 1, "requested_time": 5, "processors": 1, "nodes": 2}]},
     "waiting[0].nodes: unknown field (a waiting entry has id, submit, requested_time, processors, memory, user) "
     "(job 'x')"),
    ({"waiting": [{"id": "x", "submit": 1, "requested_time": 5, "processors": 300}]}, "processors (job 'x')"),
    ({"running": [{"id": "r", "processors": 1.5, "expected_end": 1}]}, "1.5 is not an integer (job 'r')"),
    ({"capacity": {"nodes": 4, "processors_per_node": 16}, "running": [{"id": "r", "processors": 20, "nodes": 1,
                                                                        "expected_end": 1}]},
     "running[0].nodes: 1 nodes cannot hold its 20 processors at 16 a node (job 'r')"),
    # now in milliseconds, submit in seconds: 54 years of wait
    ({"now": 1_700_000_000_000, "waiting": [{"id": "x", "submit": 1_700_000_000, "requested_time": 5,
                                             "processors": 1}]},
     "waiting[0].submit: 1700000000 is 19656250 days before now (1700000000000), more than 365: are both seconds "
     "on one clock? (job 'x')"),
    ({"held": {"id": ["x"], "shadow": 1}}, "held.id: ['x'] is not a job id"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_snapshots_name_the_field(change, message):
    with pytest.raises(SnapshotError) as error:
        read_snapshot({**MINIMAL, **change})
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["running", "waiting"])
def test_a_snapshot_without_its_running_or_waiting_list_is_refused(name):
    # read as empty, a missing running list would make a full cluster look idle and start every job
    with pytest.raises(SnapshotError, match=re.escape(f"snapshot.{name}: missing")):
        read_snapshot({k: v for k, v in MINIMAL.items() if k != name})


def run_decide(*args, stdin: str | None = None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "decide.py"), *map(str, args)], input=stdin,
                           capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def test_cli_file_stdin_and_serve(tmp_path, onnx_policy):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(MINIMAL))
    from_file = run_decide("--policy", POLICY, "--snapshot", path)
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout)["start_now"] == ["b7"]
    bad = run_decide("--policy", onnx_policy, stdin=json.dumps({**MINIMAL, "now": -3}))
    assert bad.returncode == 2 and json.loads(bad.stdout) == {"error": "now: -3 must be >= 0"}
    assert bad.stderr.strip() == "error: now: -3 must be >= 0"
    huge = {**MINIMAL, "waiting": [{"id": 1, "submit": 1, "requested_time": 5, "processors": 10**30}]}
    lines = [json.dumps(MINIMAL), "not json", json.dumps({**MINIMAL, "waiting": [{"id": 1}]}), "[" * 100_000,
             json.dumps(huge), json.dumps(MINIMAL)]
    served = run_decide("--policy", onnx_policy, "--serve", stdin="\n".join(lines) + "\n")
    assert served.returncode == 0, served.stderr
    answers = [json.loads(line) for line in served.stdout.splitlines()]
    assert [("error" in a) for a in answers] == [False, True, True, True, True, False]  # every line answered
    assert answers[0] == answers[5] and answers[0]["start_now"] == ["b7"]
    assert answers[2]["error"] == "waiting[0].submit: missing (job '1')"
    assert len(served.stderr.strip().splitlines()) == 4
    assert answers[3]["error"] == "snapshot: nested too deeply to read" and "out of range" in answers[4]["error"]
    # bytes that are not UTF-8, an integer of 5,000 digits, an empty line: each answered, serving goes on
    lines = [json.dumps(MINIMAL).encode(), b'{"now": "\xe9"}', b'{"now": ' + b"9" * 5000 + b"}", b"",
             json.dumps(MINIMAL).encode()]
    served = subprocess.run([sys.executable, str(ROOT / "scripts" / "decide.py"), "--policy", str(onnx_policy),
                             "--serve"], input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8:strict"})
    assert served.returncode == 0, served.stderr
    answers = [json.loads(line) for line in served.stdout.splitlines()]
    assert [a.get("error") for a in answers] == [
        None, "snapshot: not UTF-8 text (byte 0xe9 at offset 9)",
        "snapshot: an integer of more digits than any time or size has", "snapshot: an empty line (one snapshot a "
        "line)", None]
    twice = json.dumps(MINIMAL).replace('"processors": 256', '"processors": 300, "processors": 256')
    assert twice != json.dumps(MINIMAL)
    bad = run_decide("--policy", onnx_policy, stdin=twice)
    assert bad.returncode == 2 and json.loads(bad.stdout) == {
        "error": "snapshot: the key 'processors' appears twice in one object"}
    # a reader that stops reading (`| head -1`) ends the service quietly
    reader = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "decide.py"), "--policy", str(onnx_policy),
                               "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    reader.stdin.write((json.dumps(MINIMAL) + "\n").encode())
    reader.stdin.flush()
    assert json.loads(reader.stdout.readline())["start_now"] == ["b7"]
    reader.stdout.close()
    try:  # the service may have gone before all of it is written
        reader.stdin.write(((json.dumps(MINIMAL) + "\n") * 20_000).encode())
        reader.stdin.close()
    except BrokenPipeError:
        pass
    assert reader.wait(timeout=120) == 0 and b"Traceback" not in reader.stderr.read()
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes(json.dumps({**MINIMAL, "now": 1}).encode()[:-1] + b', "x": "\xe9"}')
    bad = run_decide("--policy", onnx_policy, "--snapshot", not_utf8)
    assert bad.returncode == 2 and bad.stderr.startswith("error: snapshot: not UTF-8 text (byte 0xe9 at offset")
    both = run_decide("--policy", onnx_policy, "--serve", "--snapshot", not_utf8)
    assert both.returncode == 2 and "--serve reads snapshots from stdin" in both.stderr


def test_export_refuses_to_replace_a_file_and_the_onnx_path_needs_no_torch(tmp_path, onnx_policy):
    keep = tmp_path / "keep.onnx"
    keep.write_text("mine")
    refused = run_decide("--policy", POLICY, "--export", keep)
    assert refused.returncode == 2 and "exists; name another file or pass --overwrite" in refused.stderr
    assert keep.read_text() == "mine"
    # decide tells an export from a checkpoint by its name's .onnx, in any case
    for args, message in ((("--policy", POLICY, "--export", tmp_path / "policy.bin"),
                           "--export: the file's name must end in .onnx, got"),
                          (("--policy", onnx_policy, "--export", tmp_path / "again.onnx"), "is an export already")):
        refused = run_decide(*args)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    upper = tmp_path / "POLICY.ONNX"
    upper.write_bytes(Path(onnx_policy).read_bytes())
    assert json.loads(run_decide("--policy", upper, stdin=json.dumps(MINIMAL)).stdout)["start_now"] == ["b7"]
    code = ("import json, sys; from lightning_sched.decide import decide, load_scorer; "
            f"a = decide(json.loads(sys.argv[1]), load_scorer({str(onnx_policy)!r})); "
            "assert 'torch' not in sys.modules, 'torch imported'; print(a['start_now'])")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(MINIMAL)], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and out.stdout.strip() == "['b7']", out.stderr


def test_the_documented_squeue_example_gives_the_documented_answer(tmp_path):
    from conftest import run_in_process

    doc = (ROOT / "docs" / "deploy.md").read_text()
    block = doc[doc.index("python scripts/squeue_hook.py --policy checkpoints/queue_bsld_easy.ckpt"):]
    block = block[:block.index("```")]
    command, *answer = [line.rstrip(" \\") for line in block.splitlines()]
    args = (command + " " + answer.pop(0).strip()).split()[2:]  # the command's two lines, after "python script"
    out = run_in_process(ROOT / "scripts" / "squeue_hook.py", args, ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [line.removeprefix("# ") for line in answer if line.startswith("# scontrol")]
    for said in ("# the policy would start now: 104", "# not ranked: 106: JobHeldUser; 107: QOSMaxJobsPerUserLimit"):
        assert said in out.stderr and said in doc


def test_squeue_hook_turns_slurm_json_into_priorities(tmp_path, onnx_policy):
    now = 1_700_000_000

    def slurm(n):  # Slurm 23.11's integer form; the plain form below
        return {"set": True, "infinite": False, "number": n}

    jobs = [{"job_id": 11, "job_state": ["RUNNING"], "cpus": slurm(200), "end_time": slurm(now + 3600)},
            {"job_id": 12, "job_state": ["PENDING"], "cpus": slurm(128), "submit_time": slurm(now - 600),
             "time_limit": slurm(60), "user_name": "ada"},
            {"job_id": 13, "job_state": "PENDING", "cpus": 16, "submit_time": now - 60, "time_limit": 30},
            {"job_id": 14, "job_state": "PENDING", "cpus": 4, "submit_time": now - 30,
             "time_limit": {"set": True, "infinite": True, "number": 0}},
            {"job_id": 15, "job_state": "COMPLETED", "cpus": 8},
            {"job_id": 16, "job_state": "RUNNING", "cpus": 8, "start_time": now - 60,
             "end_time": {"set": True, "infinite": True, "number": 0}}]
    path = tmp_path / "squeue.json"
    path.write_text(json.dumps({"jobs": jobs}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", str(onnx_policy),
                          "--processors", "256", "--input", str(path), "--now", str(now)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sorted(line.split()[2] for line in lines) == ["JobId=12", "JobId=13", "JobId=14"]
    assert [int(line.split("Priority=")[1]) for line in lines] == [1_000_000, 999_999, 999_998]
    assert "would start now" in out.stderr
    hook = [sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", "f1", "--processors", "256",
            "--input", str(path), "--now", str(now)]
    refused = subprocess.run(hook, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.splitlines()) == 1
    assert "f1 reads log10 of submit times" in refused.stderr and "--clock_start SECONDS" in refused.stderr
    empty = tmp_path / "empty.json"  # refused at the start, not when jobs first pend
    empty.write_text(json.dumps({"jobs": []}))
    idle = subprocess.run([*hook[:-4], "--input", str(empty)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert idle.returncode == 2 and "f1 reads log10 of submit times" in idle.stderr
    millis = subprocess.run([*hook[:-1], str(now * 1000), "--clock_start", "0"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)  # --now in milliseconds: refused, not a hook that ranks nothing
    assert millis.returncode == 2 and "--now must be seconds since the epoch" in millis.stderr
    stale = subprocess.run([*hook[:-1], str(now + 400 * 86400), "--policy", "sjf"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)  # every pending job left out for the clocks: an error, not exit 0
    assert stale.returncode == 2 and "error: no pending job was ranked" in stale.stderr, stale.stderr
    negative = subprocess.run([*hook, "--clock_start", "-5"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert negative.returncode == 2 and "--clock_start must be a finite number of seconds >= 0" in negative.stderr
    f1 = subprocess.run([*hook, "--clock_start", str(now - 86400)], capture_output=True, text=True, timeout=60,
                        cwd=ROOT)
    assert f1.returncode == 0, f1.stderr
    # F1 on a day-old clock: log10(submit) barely differs, so the smallest area (processors x request) goes first
    assert [line.split()[2] for line in f1.stdout.splitlines()] == ["JobId=14", "JobId=13", "JobId=12"]
    path.write_text(json.dumps({"jobs": [{"job_id": 12, "job_state": "PENDING", "cpus": 300, "submit_time": now,
                                          "time_limit": 5}]}))
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", str(onnx_policy),
                          "--processors", "256", "--input", str(path), "--now", str(now)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    # a job that cannot start (larger than the partition) is left out and named; the others are ranked
    assert bad.returncode == 0 and bad.stdout == ""
    assert "# not ranked: 12: 300 processors, more than --processors 256" in bad.stderr
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from squeue_hook import snapshot_of
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    snapshot, _ = snapshot_of({"jobs": jobs}, 256, now, unlimited_minutes=60)
    assert snapshot["running"][1] == {"id": 16, "processors": 8, "expected_end": now - 60 + 3600}  # no limit: 60 min
    ending = {"job_id": 17, "job_state": ["COMPLETED", "COMPLETING"], "cpus": 8, "end_time": now, "partition": "gpu"}
    assert [j["id"] for j in snapshot_of({"jobs": [*jobs, ending]}, 256, now, 60)[0]["running"]] == [11, 16, 17]
    mixed = [{**jobs[1], "partition": "cpu,gpu"}, {**jobs[2], "partition": "cpu"}, ending]
    split, _ = snapshot_of({"jobs": mixed}, 256, now, 60, partition="gpu")
    assert [j["id"] for j in split["waiting"]] == [12] and [j["id"] for j in split["running"]] == [17]
    for odd, message in (([7], "squeue: jobs[0]: expected an object, got int"),
                         ([{**jobs[2], "submit_time": "soon"}], "job 13: submit_time: 'soon' is not a number")):
        with pytest.raises(SnapshotError, match=re.escape(message)):
            snapshot_of({"jobs": odd}, 256, now, unlimited_minutes=60)
    # jobs no priority can start are not ranked (a priority would release a held one); the wait of a job
    # with a begin time counts from its eligible time
    pending = {"job_state": "PENDING", "cpus": 4, "submit_time": now - 600, "time_limit": 10}
    cannot = [{**pending, "job_id": 21, "priority": slurm(0), "state_reason": "JobHeldUser"},
              {**pending, "job_id": 22, "priority": 0},
              {**pending, "job_id": 23, "state_reason": "Dependency"},
              {**pending, "job_id": 24, "state_reason": "BeginTime"},
              {**pending, "job_id": 25, "cpus": 300},
              {**pending, "job_id": 26, "state_reason": "QOSMaxJobsPerUserLimit"}]
    can = [{**pending, "job_id": 27, "priority": slurm(5000), "state_reason": "Priority",
            "eligible_time": slurm(now - 60)},
           {**pending, "job_id": 28, "state_reason": "Resources", "eligible_time": {"set": False, "number": 0},
            "priority": {"set": False, "number": 0}},
           {**pending, "job_id": 29, "time_limit": 0},  # Slurm's --time=0: no limit
           {**pending, "job_id": 30, "time_limit": {"set": False, "infinite": False, "number": 0}},
           {**pending, "job_id": 31, "submit_time": 0}]  # a wait the service refuses: named, the rest ranked
    snapshot, left_out = snapshot_of({"jobs": cannot + can}, 256, now, 60)
    assert [(j["id"], j["submit"], j["requested_time"]) for j in snapshot["waiting"]] == [
        (27, now - 60, 600), (28, now - 600, 600), (29, now - 600, 3600), (30, now - 600, 3600)]
    assert left_out == {21: "JobHeldUser", 22: "held (priority 0)", 23: "Dependency", 24: "BeginTime",
                        25: "300 processors, more than --processors 256", 26: "QOSMaxJobsPerUserLimit",
                        31: "waits more than 365 days (a submit time of 0, or clocks apart?)"}
    assert decide(snapshot, load_scorer(onnx_policy))["order"]  # the service takes every job it ranks
    # whole nodes: a running job spread over more nodes than its processors fill holds them all
    spread = {"job_id": 31, "job_state": "RUNNING", "cpus": 4, "node_count": 2, "end_time": now + 60}
    nodes, _ = snapshot_of({"jobs": [spread, {**pending, "job_id": 32, "cpus": 16}]}, 64, now, 60,
                           processors_per_node=16)
    assert nodes["capacity"] == {"nodes": 4, "processors_per_node": 16} and nodes["running"][0]["nodes"] == 2
    assert read_snapshot(nodes).free_nodes == 2
    # a pending job's node_count: it holds those nodes whole (or is too large for the partition)
    wide = {**pending, "job_id": 33, "cpus": 4, "node_count": 3}
    nodes, left_out = snapshot_of({"jobs": [spread, wide, {**wide, "job_id": 34, "node_count": 5}]}, 64, now, 60,
                                  processors_per_node=16)
    assert [(j["id"], j["processors"]) for j in nodes["waiting"]] == [(33, 48)]
    assert left_out == {34: "5 nodes of 16 processors, more than --processors 64"}
    assert read_snapshot(nodes).free_nodes == 2  # so 33 does not fit now
    unset = {**wide, "job_id": 35, "node_count": {"set": False, "infinite": False, "number": 0}}
    assert snapshot_of({"jobs": [unset]}, 64, now, 60, processors_per_node=16)[0]["waiting"][0]["processors"] == 4
    # a running job on fewer nodes than --processors_per_node needs: decide's refusal, not a silent fix
    crowded = {**spread, "cpus": 64, "node_count": 1}
    with pytest.raises(SnapshotError, match="running\\[0\\].nodes: 1 nodes cannot hold its 64 processors"):
        read_snapshot(snapshot_of({"jobs": [crowded]}, 128, now, 60, processors_per_node=32)[0])
    # eligible beyond a minute after --now: left out and named (a few seconds of skew count as now)
    soon, later = ({**pending, "job_id": 35, "eligible_time": now + 30},
                   {**pending, "job_id": 36, "eligible_time": now + 7200})
    snapshot, left_out = snapshot_of({"jobs": [soon, later]}, 256, now, 60)
    assert [(j["id"], j["submit"]) for j in snapshot["waiting"]] == [(35, now)]
    assert left_out == {36: "eligible 7200 s after --now (a begin time, or clocks apart?)"}
    gpu = {**pending, "partition": "gpu"}
    for odd, message in (([{**gpu, "job_id": [5]}], "squeue: jobs[0].job_id: expected a non-negative integer, got [5]"),
                         ([{**gpu, "job_id": "7; echo INJECTED"}], "got '7; echo INJECTED'")):
        with pytest.raises(SnapshotError, match=re.escape(message)):
            snapshot_of({"jobs": odd}, 256, now, 60, partition="gpu")
    idle = subprocess.run([sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", str(onnx_policy),
                           "--processors", "256", "--input", str(path), "--partition", "debug", "--now", str(now)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert idle.returncode == 0 and idle.stdout == "", idle.stderr  # an idle partition (or a typo) is named, not fatal
    assert "# no job of squeue's is in partition debug (its jobs' partitions: none)" in idle.stderr
    zero = subprocess.run([sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", str(onnx_policy),
                           "--processors", "256", "--input", str(path), "--unlimited_minutes", "0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert zero.returncode == 2 and "--unlimited_minutes must be >= 1, got 0" in zero.stderr
    # a job name in another encoding does not stop the hook (only numbers are read)
    named = json.dumps({"jobs": [{**pending, "job_id": 41, "name": "NAME"}]}).encode()
    path.write_bytes(named.replace(b"NAME", b"r\xe9s"))
    latin = subprocess.run([sys.executable, str(ROOT / "scripts" / "squeue_hook.py"), "--policy", str(onnx_policy),
                            "--processors", "256", "--input", str(path), "--now", str(now)],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert latin.returncode == 0 and latin.stdout == "scontrol update JobId=41 Priority=1000000\n", latin.stderr


def test_onnx_export_of_a_policy_with_the_job_area_input(tmp_path):
    from lightning_sched.queue.policy import QueueNetwork, QueuePolicyRecord, QueuePolicySpec

    _, cfg = load_queue_policy(POLICY)
    torch.manual_seed(0)
    net = QueueNetwork(QueuePolicySpec(job_area=True))
    path = tmp_path / "area.ckpt"
    torch.save({"lightning_sched": QueuePolicyRecord.of(net, cfg).to_dict()}, path)
    theirs, ours = load_scorer(export_onnx(path, tmp_path / "area.onnx")), load_scorer(path)
    rng = np.random.default_rng(0)
    jobs = rng.uniform(0, 1, (40, 4)).astype(np.float32)
    cluster = rng.uniform(0, 1, 2).astype(np.float32)
    np.testing.assert_allclose(theirs(jobs, cluster), ours(jobs, cluster), rtol=1e-5, atol=1e-5)


def test_a_linear_rule_checkpoint_is_named_as_such_where_a_network_is_needed(tmp_path):
    with pytest.raises(ConfigError, match=r"queue_bsld_rule.ckpt: a linear queue rule, not a network: evaluate.py"):
        export_onnx(str(ROOT / "checkpoints" / "queue_bsld_rule.ckpt"), tmp_path / "rule.onnx")


def test_the_window_read_from_the_orders_prefixes_is_the_whole_queues_alternation():
    """Window reads only the first `width` waiting jobs of each order; the alternation over every
    waiting job (keys min(2 x SJF rank, 2 x smallest rank + 1), the width smallest) gives the same."""
    from lightning_sched.decide.decision import Window

    rng = np.random.default_rng(0)
    for trial in range(200):
        q, width = int(rng.integers(1, 60)), int(rng.integers(1, 20))
        jobs = [{"id": k, "submit": 0, "requested_time": int(rng.integers(1, 6)), "processors": int(rng.integers(1, 6))}
                for k in range(q)]
        snap = read_snapshot({"now": 0, "capacity": {"processors": 8}, "running": [], "waiting": jobs})
        view = Window(snap, width)
        waiting = rng.random(q) < rng.random()
        queue = np.flatnonzero(waiting)
        key = np.full(q, np.iinfo(np.int64).max)
        for parity, order in enumerate(view.orders):
            ranked = order[waiting[order]]
            key[ranked] = np.minimum(key[ranked], 2 * np.arange(len(ranked)) + parity)
        expected = queue if len(queue) <= width else queue[np.argsort(key[queue])][:width]
        assert np.array_equal(view(waiting), expected), trial


def test_cli_serves_a_rule_and_a_searched_rule_from_the_clocks_start(tmp_path):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(MINIMAL))
    rule = ROOT / "checkpoints" / "queue_bsld_easy_rule.ckpt"
    for policy in ("f1", rule):
        refused = run_decide("--policy", policy, "--snapshot", path)
        assert refused.returncode == 2 and refused.stdout == "", refused.stdout
        assert re.fullmatch(r"error: \S+ reads log10 of submit times .* give --clock_start SECONDS, .*\)\n",
                            refused.stderr), refused.stderr
    early = {**MINIMAL, "waiting": [{**MINIMAL["waiting"][0], "submit": 85000}]}
    served = run_decide("--policy", rule, "--clock_start", "86000", "--serve",
                        stdin="\n".join(json.dumps(s) for s in (MINIMAL, early, MINIMAL)) + "\n")
    answers = [json.loads(line) for line in served.stdout.splitlines()]
    assert served.returncode == 0 and answers[0]["start_now"] == ["b7"] and answers[2] == answers[0], served.stderr
    assert answers[1] == {"error": "clock_start: 86000 is after the earliest submit (85000)"}
    window = run_decide("--policy", "sjf", "--window", "5", "--snapshot", path)
    assert window.returncode == 2 and window.stderr == "error: --window: sjf is a rule: it sees the whole queue, " \
        "as in the environment\n"


@pytest.mark.parametrize("flags", [["--window", "0"], ["--threads", "abc"], ["--backfill", "foo"],
                                   ["--window", "5", "--export", "p.onnx"], ["--serve", "--export", "p.onnx"],
                                   ["--clock_start", "nan"], ["--clock_start", "-1"],
                                   ["--clock_start", "0", "--export", "p.onnx"]])
def test_a_bad_flag_of_decide_is_one_line(flags, capsys):
    from conftest import script_main

    with pytest.raises(SystemExit) as stopped:
        script_main("decide")(["--policy", "x.onnx", *flags])
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1 and flags[0] in lines[0], lines


def test_a_served_policy_backfills_by_default_as_it_trained(tmp_path):
    from dataclasses import replace

    from lightning_sched.decide import load_scorer
    from lightning_sched.decide.policies import ObservingPolicy
    from lightning_sched.queue.policy import read_queue_record

    trained = {"queue_bsld.ckpt": "off", "queue_bsld_easy.ckpt": "easy", "queue_bsld_rule.ckpt": "off",
               "queue_bsld_easy_rule.ckpt": "easy", "queue_bsld_reserve.ckpt": "off"}
    for name, backfill in trained.items():
        path = str(ROOT / "checkpoints" / name)
        assert load_scorer(path).config["backfill"] == backfill, name
        assert ObservingPolicy(path).config["backfill"] == backfill, name  # the record read here too
    # a network that reads fit delays (served through the env's observation), trained with EASY
    record = read_queue_record(ROOT / "checkpoints" / "queue_bsld_reserve.ckpt")
    easy = replace(record, queue=replace(record.queue, backfill="easy")).save(tmp_path / "easy_reserve.ckpt")
    served = load_scorer(str(easy))
    assert isinstance(served, ObservingPolicy) and served.config["backfill"] == "easy"


def test_the_documented_snapshot_is_the_shipped_example_and_decides():
    import json

    doc = (ROOT / "docs" / "deploy.md").read_text()
    block = doc[doc.index("```json\n", doc.index("## The snapshot")) + len("```json\n"):]
    shipped = ROOT / "docs" / "examples" / "snapshot.json"
    assert json.loads(block[:block.index("```")]) == json.loads(shipped.read_text())
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "decide.py"), "--policy", "sjf", "--snapshot",
                          str(shipped)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and json.loads(out.stdout)["start_now"] == ["b7"], out.stderr
