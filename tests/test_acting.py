"""How a network acts (`Acting`) and the checkpoint record that carries it (`PolicyRecord`): a round
trip through a file, old files and old rule names read as they meant, the script flags on top,
files read with torch.load(weights_only=True) only."""
import json
import re
from pathlib import Path

import conftest
import pytest
import torch

from lightning_sched import ClusterConfig, ConfigError
from lightning_sched.policies.acting import RENAMED_RULES, Acting, acting_modes
from lightning_sched.policies.checkpoints import (
    CHECKPOINT_KEY,
    RECORD_VERSION,
    PolicyRecord,
    load_policy,
    read_checkpoint,
    read_record,
    with_acting,
)
from lightning_sched.policies.networks import PolicySpec, make_policy

ROOT = Path(__file__).resolve().parent.parent
CFG = ClusterConfig(observation="none")
SLOTS = PolicySpec(kind="slots", masked=True, hidden=(8,))


class Marker:
    """A class of this test module: pickled into a file, it would be code run by loading it."""


def version_1_entry(net, **acting) -> dict:
    """A lightning_sched entry as files were written before the record: loose acting keys, no version."""
    return {"cluster": net.cfg.to_dict(), "policy": net.spec.to_dict(), **acting,
            "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()}}


def test_acting_round_trips_through_a_checkpoint(tmp_path):
    net = make_policy(SLOTS, CFG)
    acting = Acting(greedy=True, idle_rule="while_frequent", wait_rate=0.2)
    record = PolicyRecord.of(net, acting, selected={"metric": "mean_slowdown", "loads": [0.1, 0.9]})
    record.save(tmp_path / "p.ckpt")
    data = torch.load(tmp_path / "p.ckpt", weights_only=True)  # plain dicts, tensors, strings, numbers
    assert data[CHECKPOINT_KEY]["acting"] == {"greedy": True, "idle_rule": "while_frequent", "wait_rate": 0.2}
    back = read_record(tmp_path / "p.ckpt")
    assert (back.acting, back.cluster, back.policy, back.selected) == (acting, CFG, SLOTS, record.selected)
    assert back.state_dict.keys() == record.state_dict.keys()
    assert all(torch.equal(back.state_dict[k], v) for k, v in record.state_dict.items())
    policy, cfg = load_policy(tmp_path / "p.ckpt")
    assert policy.acting == acting and cfg == CFG.replace(observation="compact")  # keys its network reads
    assert str(acting) == "greedy, while_frequent (wait_rate 0.2)" and str(Acting(False)) == "sampled, always"
    # every mode a selection tries prints apart, and reads back from its own to_dict
    assert len({str(mode) for mode in acting_modes()}) == len(acting_modes()) == 9
    assert all(Acting.from_dict(mode.to_dict()) == mode for mode in acting_modes())


def test_the_record_has_a_version_and_reads_the_files_written_before_it(tmp_path):
    net = make_policy(SLOTS, CFG)
    assert PolicyRecord.of(net).to_dict()["version"] == RECORD_VERSION == 2
    # version 1: no version key, the acting mode as loose keys, absent ones at their defaults
    old = PolicyRecord.from_dict(version_1_entry(net, greedy=True))
    assert old.version == 1 and old.acting == Acting(greedy=True, idle_rule="not_when_idle", wait_rate=0.11)
    assert PolicyRecord.from_dict(version_1_entry(net, greedy=False)).acting == Acting(False, "always")
    assert PolicyRecord.from_dict(version_1_entry(net)).acting == Acting(greedy=True)
    # copied with another acting mode, a version 1 file is written as the record (Lightning's keys kept)
    torch.save({CHECKPOINT_KEY: version_1_entry(net, greedy=True, idle_void="while_frequent", wait_rate=0.2,
                                                wait_rate_selected={"winner": "tau 10, rho 0.2"}),
                "global_step": 7}, tmp_path / "old.ckpt")
    with_acting(tmp_path / "old.ckpt", tmp_path / "new.ckpt", Acting(greedy=True, idle_rule="while_arriving"))
    new = read_record(tmp_path / "new.ckpt")
    assert new.version == 2 and new.acting.idle_rule == "while_arriving"
    assert new.wait_rate_selected is None  # how the rate was chosen no longer describes how it acts
    assert read_checkpoint(tmp_path / "new.ckpt")["global_step"] == 7
    with pytest.raises(ConfigError, match="PolicyRecord.version must be 1 or 2, got 3"):
        PolicyRecord.from_dict({**PolicyRecord.of(net).to_dict(), "version": 3})
    with pytest.raises(ConfigError, match="PolicyRecord has no field 'notes'"):
        PolicyRecord.from_dict({**PolicyRecord.of(net).to_dict(), "notes": "?"})
    with pytest.raises(ConfigError, match="Acting has no field 'idle_void'"):
        PolicyRecord.from_dict({**PolicyRecord.of(net).to_dict(), "acting": {"idle_void": "always"}})


def test_old_rule_names_load_meaning_what_they_meant(tmp_path):
    net = make_policy(SLOTS, CFG)
    assert RENAMED_RULES == {"never": "not_when_idle"}  # "never" meant: never void on an idle cluster
    torch.save({CHECKPOINT_KEY: version_1_entry(net, greedy=False, idle_void="never")}, tmp_path / "never.ckpt")
    policy, _ = load_policy(tmp_path / "never.ckpt")
    assert policy.acting == Acting(greedy=False, idle_rule="not_when_idle")
    assert not set(RENAMED_RULES) & {mode.idle_rule for mode in acting_modes()}  # no old name names a rule now
    # the shipped files, all written before the record: the rule each one meant
    shipped = {name: read_record(ROOT / "checkpoints" / f"{name}.ckpt").acting
               for name in ("best_slowdown", "best_deadline", "slots_slowdown", "maml")}
    assert shipped == {"best_slowdown": Acting(True, "while_frequent", 0.11), "best_deadline": Acting(True),
                       "slots_slowdown": Acting(False), "maml": Acting(False, "always")}
    assert shipped["best_deadline"].idle_rule == "not_when_idle"


def test_every_shipped_checkpoint_loads_with_weights_only():
    from lightning_sched.queue.linear_rule import load_linear_rule
    from lightning_sched.queue.policy import load_queue_policy

    files = sorted((ROOT / "checkpoints").glob("*.ckpt"))
    assert len(files) >= 25
    for path in files:
        data = torch.load(path, map_location="cpu", weights_only=True)
        kind = data["lightning_sched"].get("kind")
        if kind == "queue":  # the queue env's policies have their own readers
            assert load_queue_policy(path)[1].nodes in (128, 256), path  # Lublin logs; NASA iPSC/860
        elif kind == "queue_linear_rule":
            assert load_linear_rule(path)[1]["backfill"] in ("off", "easy"), path
        else:
            assert read_record(path, data).version in (1, RECORD_VERSION), path


def test_flags_override_the_saved_acting():
    saved = Acting(greedy=True, idle_rule="while_frequent", wait_rate=0.11)
    assert saved.override() == saved
    assert saved.override(wait_rate=0.5) == Acting(True, "while_frequent", 0.5)
    assert saved.override(idle_rule="while_arriving") == Acting(True, "while_arriving", 0.11)
    # a mode given without a rule acts by that mode's default: the saved rule was chosen for the saved mode
    assert saved.override(greedy=False) == Acting(False, "always", 0.11)
    assert saved.override(greedy=True) == Acting(True, "not_when_idle", 0.11)
    with pytest.raises(ConfigError, match="Acting.idle_rule 'always' with greedy"):
        saved.override(idle_rule="always")


def test_evaluate_flags_reach_the_policy(capsys, monkeypatch):
    """--wait_rate above any arrival rate makes while_frequent work-conserving; the old flag and rule
    name act as the new ones."""
    from conftest import script_main

    main = script_main("evaluate")  # in this process: the same code as the command, without its start-up
    monkeypatch.chdir(ROOT)

    def evaluate_json(*flags) -> dict:
        assert main(["--policy", "checkpoints/best_slowdown.ckpt", "--load", "0.5", "--jobsets", "4", "--json",
                     "--threads", "1", *flags]) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        return {k: v for k, v in json.loads(last).items() if k != "seconds"}

    conserving = evaluate_json("--wait_rate", "1000")
    not_when_idle = evaluate_json("--idle_void", "never")
    assert conserving == evaluate_json("--idle_rule", "work_conserving")
    assert not_when_idle == evaluate_json("--idle_rule", "not_when_idle")
    saved = evaluate_json()  # the checkpoint's own acting: both flags change what the policy does
    assert saved["mean_slowdown"] not in (conserving["mean_slowdown"], not_when_idle["mean_slowdown"])
    # a mode alone acts with that mode's default rule (--help); sampling is seeded, and not the argmax
    greedy, sampled = evaluate_json("--greedy"), evaluate_json("--sample")
    assert greedy == evaluate_json("--greedy", "--idle_rule", "not_when_idle")
    assert sampled == evaluate_json("--sample", "--idle_rule", "always") == evaluate_json("--sample")
    assert sampled["mean_slowdown"] != greedy["mean_slowdown"]
    proc = conftest.run_script(ROOT / "scripts/evaluate.py", "--policy", "tetris", "--idle_rule", "sometimes", cwd=ROOT)
    assert proc.returncode == 2 and "--idle_rule" in proc.stderr and "not_when_idle" in proc.stderr


def test_a_checkpoint_with_pickled_objects_is_refused_in_one_line(tmp_path):
    path = tmp_path / "pickled.ckpt"
    net = make_policy(SLOTS, CFG)
    torch.save({CHECKPOINT_KEY: {**PolicyRecord.of(net).to_dict(), "provenance": Marker()}}, path)
    with pytest.raises(ConfigError) as error:
        load_policy(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: holds a pickled ")
    assert re.search(r"Marker object; .*torch.load\(weights_only=True\)", message)
    proc = conftest.run_script(ROOT / "scripts/evaluate.py", "--policy", path, "--jobsets", "2", "--threads", "1",
                               cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and str(path) in lines[0] and "Marker" in lines[0]
