"""Files as attack surface and as outputs: a checkpoint or JobSet file never runs the code it may
carry (torch.load(weights_only=True) everywhere), outputs never replace a file unless --overwrite
is given (checked as the file is written, not only at start), every output is written whole, and
non-finite weights are neither loaded nor written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import conftest
import pytest
import torch
from conftest import script_main
from test_fit import SMOKE

from lightning_sched import ConfigError, DeepRMWorkload, JobSet
from lightning_sched.files import OutputExists, clean_temp_files, write_file, write_text, write_torch
from lightning_sched.learning.adaptation import AdaptationSettings
from lightning_sched.policies.checkpoints import CHECKPOINT_KEY, load_policy, read_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "checkpoints" / "reinforce_slowdown.ckpt"


class Payload:
    """Unpickling it creates `marker`: a stand-in for a shell command hidden in a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def script(name: str, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    return conftest.run_script(ROOT / "scripts" / name, *args, cwd=cwd)


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


@pytest.fixture
def planted(tmp_path):
    """(a checkpoint whose policy entry carries the payload, a file with no policy entry carrying
    it, a JobSet file carrying it, the marker file the payload would create)."""
    marker = tmp_path / "payload_ran"
    data = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    data[CHECKPOINT_KEY]["provenance"] = Payload(marker)
    policy, other, jobs = tmp_path / "policy.ckpt", tmp_path / "other.ckpt", tmp_path / "jobs.pt"
    torch.save(data, policy)
    torch.save({"state_dict": {}, "note": Payload(marker)}, other)
    torch.save({"arrival": torch.zeros(1, 2), "duration": torch.ones(1, 2), "demand": torch.ones(1, 2, 2),
                "meta": Payload(marker)}, jobs)
    return policy, other, jobs, marker


def test_a_planted_payload_never_runs(planted, fit_main, capsys, monkeypatch):
    policy, other, jobs, marker = planted
    for path, load in [(policy, load_policy), (other, read_checkpoint), (jobs, JobSet.load)]:
        with pytest.raises(ConfigError, match=re.escape(f"{path}: holds a pickled io.open")):
            load(path)
    line = one_line_error(script("evaluate.py", "--policy", str(policy), "--jobsets", "2", "--threads", "1"))
    assert str(policy) in line and "weights_only=True" in line
    with pytest.raises(ConfigError, match=re.escape(str(other))):  # the refused case: before any unpickling
        script_main("evaluate")(["--policy", str(other), "--jobsets", "2", "--threads", "1"])
    for flags in (["--model.init_from", str(policy)], ["--ckpt_path", str(policy)]):
        with pytest.raises(SystemExit) as stopped:
            fit_main(["fit", "--config", SMOKE, "--trainer.logger", "false", *flags])
        lines = capsys.readouterr().err.strip().splitlines()
        assert stopped.value.code == 2 and len(lines) == 1 and str(policy) in lines[0], lines
    # Lightning loads --ckpt_path again after fit.py's check: that load reads weights only too, whatever it
    # is asked and whatever TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD says (a file swapped in between runs nothing)
    from callbacks.checkpoints import AtomicCheckpointIO

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    for asked in (None, False):
        with pytest.raises(ConfigError, match=re.escape(f"{other}: holds a pickled io.open")):
            AtomicCheckpointIO().load_checkpoint(other, weights_only=asked)
    with pytest.raises(SystemExit) as stopped:
        fit_main(["fit", "--config", SMOKE, "--trainer.logger", "false", "--weights_only", "false"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1 and "--weights_only false: a checkpoint here" in lines[0]
    assert not marker.exists()


def test_outputs_are_never_replaced_without_overwrite(tmp_path):
    mine = tmp_path / "keep.ckpt"
    mine.write_text("mine")
    with pytest.raises(OutputExists, match=re.escape(f"{mine} exists; name another file or pass --overwrite")):
        write_text(mine, "new")
    assert write_text(mine, "new", numbered=True) == tmp_path / "keep-2.ckpt"
    assert write_text(mine, "newer", numbered=True) == tmp_path / "keep-3.ckpt"
    assert mine.read_text() == "mine"

    def racing(file):  # another process creates the file while this one writes: checked at the last step
        file.write(b"ours")
        (tmp_path / "late.txt").write_text("theirs")

    with pytest.raises(OutputExists):
        write_file(tmp_path / "late.txt", racing)
    assert (tmp_path / "late.txt").read_text() == "theirs"
    write_text(mine, "replaced", overwrite=True)
    assert mine.read_text() == "replaced" and not list(tmp_path.glob(".*.tmp"))
    (tmp_path / ".keep.ckpt.123.0badcafe.tmp").write_bytes(b"cut")  # a write killed midway
    assert [p.name for p in clean_temp_files(tmp_path)] == [".keep.ckpt.123.0badcafe.tmp"]
    assert write_text(tmp_path / "gz" / "log.swf.gz", "x", numbered=True).name == "log.swf.gz"
    assert write_text(tmp_path / "gz" / "log.swf.gz", "x", numbered=True).name == "log-2.swf.gz"


def test_scripts_refuse_to_replace_a_file(tmp_path):
    keep = tmp_path / "keep.ckpt"
    keep.write_text("mine")
    for name, args in [("evaluate", ["--policy", "tetris", "--jobsets", "2", "--threads", "1",
                                     "--save_jobsets", str(keep)]),
                       ("make_swf", [str(keep), "--jobs", "10", "--processors", "4"]),
                       ("select_checkpoint", ["--ckpt", str(SHIPPED), "--write", str(keep), "--threads", "1"])]:
        with pytest.raises(OutputExists, match=re.escape(str(keep)) + ".*--overwrite"):
            script_main(name)(args)
    with pytest.raises(ConfigError, match="one of the script's inputs"):
        script_main("select_checkpoint")(["--ckpt", str(SHIPPED), "--write", str(SHIPPED)])
    assert keep.read_text() == "mine"
    script_main("make_swf")([str(keep), "--jobs", "10", "--processors", "4", "--overwrite"])
    assert keep.read_text().startswith("; Version")
    jobs = DeepRMWorkload(simu_len=5).sample(2, torch.Generator().manual_seed(0))
    with pytest.raises(OutputExists):
        jobs.save(keep)
    jobs.save(keep, overwrite=True)
    assert JobSet.load(keep).batch_size == 2


def test_non_finite_weights_are_neither_written_nor_loaded(tmp_path, capsys):
    data = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    name = next(iter(data[CHECKPOINT_KEY]["state_dict"]))
    data[CHECKPOINT_KEY]["state_dict"][name][0] = float("nan")
    with pytest.raises(ConfigError, match=rf"nan.ckpt: \S*state_dict\.\S*{name} holds NaN"):
        write_torch(data, tmp_path / "nan.ckpt")
    assert not (tmp_path / "nan.ckpt").exists()
    torch.save(data, tmp_path / "nan.ckpt")  # written by hand
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'nan.ckpt'}: ") + rf"\S*{name} holds NaN"):
        load_policy(tmp_path / "nan.ckpt")
    moments = {"optimizer_states": [{"state": {0: {"exp_avg": torch.tensor([float("nan")])}}}], "state_dict": {}}
    with pytest.raises(ConfigError, match=r"optimizer_states\.0\.state\.0\.exp_avg holds NaN .* never written"):
        write_torch(moments, tmp_path / "moments.ckpt")  # its next step would make the weights NaN
    for lr in (float("inf"), float("nan"), 0.0):
        with pytest.raises(ConfigError, match="adaptation lr must be a finite number > 0"):
            AdaptationSettings(lr=lr)
    with pytest.raises(SystemExit):  # the flag's own check, as argparse parses it
        script_main("adapt")(["--ckpt", str(SHIPPED), "--lr", "inf", "--threads", "1"])
    assert "--lr: must be a finite number > 0, got inf" in capsys.readouterr().err


def test_damaged_queue_and_cluster_records_are_one_line_errors(tmp_path, capsys):
    """Queue policies, linear rules and cluster policies with damaged contents: NaN weights, weights
    that are not a dict of tensors, a network too large to build, a rule's provenance or an ONNX
    graph's metadata of the wrong type; each refused naming the file, before anything runs on them."""
    from lightning_sched.decide import SnapshotError, load_scorer
    from lightning_sched.queue.linear_rule import load_linear_rule
    from lightning_sched.queue.policy import load_queue_policy

    queue = torch.load(ROOT / "checkpoints" / "queue_bsld_easy.ckpt", map_location="cpu", weights_only=True)
    entry = queue[CHECKPOINT_KEY]

    def saved(name: str, **changes) -> Path:
        path = tmp_path / name
        torch.save({**queue, CHECKPOINT_KEY: {**entry, **changes}}, path)
        return path

    weights = dict(entry["state_dict"])
    first = next(iter(weights))
    weights[first] = torch.full_like(weights[first], float("nan"))
    for path, message in ((saved("nan.ckpt", state_dict=weights), f"{first} holds NaN"),
                          (saved("text.ckpt", state_dict="weights"), "QueuePolicyRecord.state_dict: expected the "
                                                                     "network's weights (names to tensors), got str"),
                          (saved("huge.ckpt", policy={**entry["policy"], "hidden": [10**6, 10**6]}),
                           "the queue policy network (about 1,0")):
        with pytest.raises(ConfigError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
            load_queue_policy(path)
        line = one_line_error(script("decide.py", "--policy", str(path), "--snapshot", str(path)))
        assert str(path) in line and message in line
    with pytest.raises(ConfigError, match=r"text.ckpt: QueueConfig: expected a mapping of its fields, got str"):
        load_queue_policy(saved("text.ckpt", queue="window 128"))
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((ROOT / "checkpoints" / "queue_bsld_easy.ckpt").read_bytes()[:20_000])
    with pytest.raises(ConfigError, match=r"cut.ckpt: not a queue policy checkpoint \(torch.load failed: a zip "
                                          r"archive cut short \(truncated\?\)"):
        load_queue_policy(cut)
    # fields of another type, as a hand edit leaves them: named with the file, never a traceback
    for name, changes in (("fraction.ckpt", {"train_fraction": "x"}), ("version.ckpt", {"version": torch.ones(2)})):
        with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / name}: ")):
            load_queue_policy(saved(name, **changes))
    line = one_line_error(script("decide.py", "--policy", str(tmp_path / "fraction.ckpt"), "--snapshot", "x.json"))
    assert str(tmp_path / "fraction.ckpt") in line
    cluster = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    for name, change in (("idle.ckpt", ("idle_void", ["x"])),  # a version 1 record's loose acting key
                         ("masked.ckpt", ("policy", {**cluster[CHECKPOINT_KEY]["policy"], "masked": torch.ones(2)}))):
        torch.save({**cluster, CHECKPOINT_KEY: {**cluster[CHECKPOINT_KEY], change[0]: change[1]}}, tmp_path / name)
        with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / name}: ")):
            load_policy(tmp_path / name)
    cluster[CHECKPOINT_KEY]["state_dict"] = ["not", "weights"]
    torch.save(cluster, tmp_path / "list.ckpt")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'list.ckpt'}: PolicyRecord.state_dict: expected")):
        load_policy(tmp_path / "list.ckpt")
    rule = torch.load(ROOT / "checkpoints" / "queue_bsld_rule.ckpt", map_location="cpu", weights_only=True)
    rule[CHECKPOINT_KEY]["provenance"] = "searched"
    torch.save(rule, tmp_path / "rule.ckpt")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'rule.ckpt'}: provenance must be a mapping")):
        load_linear_rule(tmp_path / "rule.ckpt")
    onnx = pytest.importorskip("onnx")
    exported = tmp_path / "policy.onnx"
    script_main("decide")(["--policy", str(ROOT / "checkpoints" / "queue_bsld_easy.ckpt"), "--export", str(exported)])
    graph = onnx.load(str(exported))
    for value, message in (("{not json", "without lightning_sched's queue-policy metadata"),
                           ('{"kind": "queue"}', "queue settings are a NoneType"),
                           ('{"kind": "queue", "queue": {"window": -1, "max_wait": 1, "max_requested": 1}}',
                            "queue.window must be a positive integer, got -1")):
        graph.metadata_props[0].value = value
        onnx.save(graph, str(tmp_path / "meta.onnx"))
        with pytest.raises(SnapshotError, match=re.escape(f"{tmp_path / 'meta.onnx'}: ") + ".*" + re.escape(message)):
            load_scorer(tmp_path / "meta.onnx")


def test_a_non_finite_gradient_stops_before_the_step_is_applied():
    from lightning_sched.learning.finite import NonFiniteUpdate, require_finite

    net = torch.nn.Linear(3, 2)
    before = net.weight.detach().clone()
    net(torch.ones(1, 3)).sum().backward()
    net.weight.grad[0, 0] = float("inf")
    with pytest.raises(NonFiniteUpdate, match="non-finite gradients of weight at step 1; training stops before"):
        require_finite(net, "at step 1", gradients=True)
    assert torch.equal(net.weight, before)  # the optimizer never ran
    assert issubclass(NonFiniteUpdate, FloatingPointError) and issubclass(NonFiniteUpdate, ConfigError)


def test_a_figure_and_its_json_are_written_as_a_pair(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from lightning_sched.files import write_figure_and_json

    fig = plt.figure()
    (tmp_path / "curve.json").write_text("mine")  # an unrelated file beside the figure's name
    with pytest.raises(OutputExists, match="curve.json exists"):
        write_figure_and_json(fig, tmp_path / "curve.png", "{}")
    assert not (tmp_path / "curve.png").exists()
    assert write_figure_and_json(fig, tmp_path / "curve.png", "{}", numbered=True) == tmp_path / "curve-2.png"
    assert (tmp_path / "curve.json").read_text() == "mine" and (tmp_path / "curve-2.json").read_text() == "{}"
    plt.close(fig)


def test_a_write_removes_what_a_killed_write_of_the_same_file_left(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a process that no longer runs: its temporary file is left over
    stale = tmp_path / f".out.json.{ended.pid}.0123abcd.tmp"
    live = tmp_path / f".out.json.{os.getpid()}.0123abcd.tmp"  # a write still under way
    other = tmp_path / f".other.json.{ended.pid}.0123abcd.tmp"  # another file's: not this write's to remove
    recent = tmp_path / f".out.json.{ended.pid}.89abcdef.tmp"  # maybe another machine's writer, under way
    for temp in (stale, live, other, recent):
        temp.write_text("partial")
    for temp in (stale, live, other):
        os.utime(temp, (time.time() - 7200,) * 2)  # two hours old
    write_text(tmp_path / "out.json", "{}")
    assert not stale.exists() and live.exists() and other.exists() and recent.exists()
    assert (tmp_path / "out.json").read_text() == "{}"


def test_damaged_training_checkpoints_are_refused_naming_the_key(tmp_path):
    """A resume's checkpoint whose keys Lightning restores are missing or of the wrong type is one
    line naming the key (Lightning's own restore gave tracebacks); a weights-only one says how to
    start from its weights; last.ckpt is never written weights-only."""
    from callbacks.checkpoints import LatestCheckpoint
    from callbacks.resume import read_training_checkpoint

    data = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    read_training_checkpoint(str(SHIPPED))
    path = tmp_path / "bad.ckpt"
    for key, value, message in (("global_step", True, "its 'global_step' is a bool, not a int"),
                                ("optimizer_states", None, "its 'optimizer_states' is a NoneType, not a list"),
                                ("loops", "x", "its 'loops' is a str, not a dict"),
                                ("pytorch-lightning_version", 3, "its 'pytorch-lightning_version' is a int"),
                                ("hyper_parameters", None, "its 'hyper_parameters' is a NoneType"),
                                (CHECKPOINT_KEY, None, f"its '{CHECKPOINT_KEY}' is a NoneType")):
        torch.save({**data, key: value}, path)
        with pytest.raises(ConfigError, match=re.escape(f"--ckpt_path {path}: {message}")):
            read_training_checkpoint(str(path))
    torch.save({k: v for k, v in data.items() if k not in ("optimizer_states", "loops", "lr_schedulers")}, path)
    with pytest.raises(ConfigError, match=re.escape(f"holds weights only (checkpoint.save_weights_only): no training "
                                                    f"state to resume; start a new run from its weights with "
                                                    f"--model.init_from {path}")):
        read_training_checkpoint(str(path))
    assert read_training_checkpoint(str(path), resume=False)["global_step"] == data["global_step"]  # validate, test
    with pytest.raises(ConfigError, match="last_checkpoint.save_weights_only: last.ckpt is what a run resumes from"):
        LatestCheckpoint(save_weights_only=True)
