"""Meta-learning across queue sites: QueueMAML through fit.py, and adapt.py --env queue on a site."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_script, script_main
from test_queue_env import swf_line, write_log

from lightning_sched.cli import ScriptParser, add_site_flags, site_from_args
from lightning_sched.config import ConfigError
from lightning_sched.files import load_torch_file
from lightning_sched.queue.adaptation import adaptation_curve
from lightning_sched.queue.evaluation import RULES, network_config
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import load_queue_policy, read_queue_record
from tasks.queue_maml import QueueMAML

ROOT = Path(__file__).resolve().parent.parent
# a GPU machine gets no ../shared: scripts/gpu_check.sh brings the logs and names their folder
TRACES = Path(os.environ.get("LIGHTNING_SCHED_TEST_TRACES", ROOT.parent / "shared" / "traces"))
POLICY = ROOT / "checkpoints" / "queue_bsld.ckpt"


def run(script: str, *args, cwd: Path, inherit: bool = False, env: dict | None = None):
    """`script` as a user runs it: fit.py in a fresh process, with a minimal environment (`inherit`:
    on top of this one's, which a GPU machine may need to find CUDA; `env`: more variables); a
    run_main script in this process (conftest.run_script)."""
    if script != "fit.py":
        return run_script(ROOT / "scripts" / script, *args, cwd=cwd, env=env)
    env = {**(os.environ if inherit else {}), "OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(cwd), "WANDB_DIR": str(cwd),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


TINY = ["--model.init_args.meta_batch", "2", "--model.init_args.sequences", "1", "--model.init_args.episodes", "2",
        "--model.init_args.sequence_length", "32", "--model.init_args.validation_length", "64",
        "--model.init_args.iterations_per_epoch", "2", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
        "--trainer.logger", "false"]
META_SGD = ["--model.init_args.learn_step_sizes", "true", "--model.init_args.step_size_lr", "0.05"]


def test_a_resumed_meta_training_ends_with_the_weights_of_one_that_ran_through(tmp_path, fit_main, monkeypatch):
    # fit.py in this process: the resumed run starts from the state the first one left, as a new process would
    flags = ["fit", "--config", ROOT / "configs" / "base" / "queue_maml.yaml", "--threads", "1",
             "--model.init_args.init_from", POLICY, "--model.init_args.traces", TRACES, *TINY]
    for folder in ("through", "resumed"):
        (tmp_path / folder).mkdir()
    checkpoints = Path("runs") / "queue_maml" / "checkpoints"
    runs = [("through", ["--trainer.max_steps", "4"]), ("resumed", []),
            ("resumed", ["--trainer.max_steps", "4", "--ckpt_path", checkpoints / "last.ckpt"])]
    for folder, more in runs:
        monkeypatch.chdir(tmp_path / folder)
        fit_main([str(a) for a in (*flags, *more)])
    a, b = (load_torch_file(tmp_path / folder / checkpoints / "last.ckpt", "a checkpoint", weights_only=True)
            for folder in ("through", "resumed"))
    assert a["global_step"] == b["global_step"] == 4
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key


@pytest.mark.parametrize("order", ["false", "true"], ids=["second_order", "first_order"])
def test_queue_maml_under_ddp_keeps_the_ranks_parameters_identical(tmp_path, order):
    """Two CPU processes (gloo): each rank meta-trains on its own sites and sequences; the ranks'
    meta-gradients are averaged (by DDP's backward, or by hand where first order sets them). The
    critic, which MAML does not train, gets no gradient and is not waited for."""
    probe = tmp_path / "probe"
    probe.mkdir()
    proc = run("fit.py", "fit", "--config", ROOT / "configs" / "base" / "queue_maml.yaml", "--threads", "1",
               "--model.init_args.init_from", POLICY, "--model.init_args.traces", TRACES, *TINY,
               "--model.init_args.first_order", order,
               "--trainer.max_steps", "3", "--trainer.strategy", "ddp", "--trainer.devices", "2",
               "--trainer.accelerator", "cpu", "--trainer.callbacks+=tests.ddp_probe.ParameterProbe",
               cwd=tmp_path, env={"DDP_PROBE_DIR": str(probe)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["step"] for r in ranks] == [3, 3]
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], rel=0, abs=1e-6)
    start, _ = load_queue_policy(POLICY)
    scorer = [p.detach().double() for p in start.scorer.parameters()]
    assert ranks[0]["params"][:len(scorer)] != pytest.approx([float(p.sum()) for p in scorer], rel=0, abs=1e-9)


@pytest.mark.parametrize("mode", [["--model.init_args.first_order", "false"],
                                  ["--model.init_args.inner_steps", "0", "--model.init_args.rollouts_per_site", "2"],
                                  META_SGD],
                         ids=["second_order", "mixture", "meta_sgd"])
def test_queue_maml_trains_validates_and_saves_its_inner_loop(tmp_path, mode):
    proc = run("fit.py", "fit", "--config", ROOT / "configs" / "base" / "queue_maml.yaml", "--threads", "1",
               "--model.init_args.init_from", POLICY, "--model.init_args.traces", TRACES, *TINY, *mode, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluate = next(line for line in proc.stdout.splitlines() if line.startswith("evaluate it"))
    assert "scripts/adapt.py --env queue --site nasa-exact" in evaluate  # a meta-policy is measured adapted
    folder = tmp_path / "runs" / "queue_maml"
    header = (folder / "metrics.csv").read_text().splitlines()[0]
    assert "eval/mean_bounded_slowdown" in header and "train/meta_loss" in header
    last = folder / "checkpoints" / "last.ckpt"
    record = read_queue_record(last)
    assert record.log[0] == "lublin_256.swf.gz:lublin1-exact" and record.train_fraction == 0.8
    assert record.adaptation["steps"] == (0 if "0" in mode else 1)
    start, _ = load_queue_policy(POLICY)
    trained, _ = load_queue_policy(last)
    moved = [not torch.equal(a, b) for a, b in zip(start.scorer.parameters(), trained.scorer.parameters())]
    assert all(moved)  # the meta-gradient reaches every weight of the scorer
    assert load_torch_file(last, "checkpoint", weights_only=True)["global_step"] == 2
    if mode == META_SGD:  # the learned step sizes: one per scorer weight, moved by the outer steps, saved
        sizes = record.adaptation["step_sizes"]
        assert {k: v.shape for k, v in sizes.items()} == {k: p.shape for k, p in trained.scorer.named_parameters()}
        # the weight matrices' sizes move (a bias can get ~0 gradient: the last one shifts every slot's
        # score alike, which the softmax ignores)
        assert all(float((a - 1).abs().max()) > 0.01 for name, a in sizes.items() if name.endswith("weight"))
        log = write_log(tmp_path / "site.swf", jobs=6000, nodes=64)
        proc = run("adapt.py", "--env", "queue", "--trace", log, "--policy", last, "--steps", "1",
                   "--sequences", "1", "--episodes", "2", "--eval_sequences", "2", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"{last}: adapting with its recorded per-weight step sizes (times lr 0.03" in proc.stdout
    else:
        assert "step_sizes" not in record.adaptation


@pytest.mark.gpu
def test_queue_maml_trains_on_cuda(tmp_path):  # the network there, the sites' envs on the CPU
    proc = run("fit.py", "fit", "--config", ROOT / "configs" / "base" / "queue_maml.yaml", "--threads", "1",
               "--model.init_args.init_from", POLICY, "--model.init_args.traces", TRACES, *TINY,
               "--trainer.accelerator", "gpu", cwd=tmp_path, inherit=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert load_torch_file(tmp_path / "runs" / "queue_maml" / "checkpoints" / "last.ckpt", "checkpoint",
                           weights_only=True)["global_step"] == 2


def test_rule_gap_sampling_draws_sites_with_replacement_by_the_policys_gap_to_the_best_rule():
    module = QueueMAML(str(POLICY), traces=str(TRACES), site_sampling="rule_gap", gap_sequences=1,
                       validation_length=64)
    assert module.site_weights.shape == (5,) and bool((module.site_weights > 0).all())
    assert len(set(module.site_weights.tolist())) == 5  # measured per site, not a constant
    module.site_weights = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0])
    assert module.draw_sites(torch.Generator().manual_seed(0)) == [3] * 5
    uniform = QueueMAML(str(POLICY), traces=str(TRACES))
    report = uniform.data_report()  # what fit.py prints at the start: each training site's log and model
    assert len(report) == 5 and "site lublin2-over-busy; gaps between arrivals x" in report[3], report
    assert sorted(uniform.draw_sites(torch.Generator().manual_seed(0))) == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="site_sampling must be uniform or rule_gap, got 'gap'"):
        QueueMAML(str(POLICY), traces=str(TRACES), site_sampling="gap")


def test_learned_step_sizes_scale_each_weights_adaptation_step(tmp_path):
    log = read_queue_log(write_log(tmp_path / "site.swf", jobs=3000, nodes=64))
    net, trained = load_queue_policy(POLICY)
    cfg = network_config(log.config(sequence_length=64), trained)
    starts = torch.tensor([2000])

    def adapted(lr, step_sizes=None):
        _, moved = adaptation_curve(net, log, cfg, starts, 1, lr, 1, 2, 1500, seed=4, train_length=32,
                                    measure_at=[], step_sizes=step_sizes)
        return dict(moved.scorer.named_parameters())

    names = [name for name, _ in net.scorer.named_parameters()]
    doubled = adapted(0.01, {name: torch.full_like(p, 2.0) for name, p in net.scorer.named_parameters()})
    plain = adapted(0.02)
    assert all(torch.allclose(doubled[n], plain[n], atol=1e-7) for n in names)
    frozen = {name: torch.zeros_like(p) for name, p in net.scorer.named_parameters()}
    frozen[names[0]] = torch.ones_like(frozen[names[0]])  # only the first tensor may move
    only_first = adapted(0.02, frozen)
    start = dict(net.scorer.named_parameters())
    assert not torch.equal(only_first[names[0]], start[names[0]])
    assert all(torch.equal(only_first[n], start[n]) for n in names[1:])
    with pytest.raises(ConfigError, match="step_sizes has no entry for the network's"):
        adapted(0.02, {names[0]: torch.ones_like(start[names[0]])})


def test_adapt_queue_prints_paired_differences_and_saves_the_adapted_policy(tmp_path, capsys):
    log = write_log(tmp_path / "site.swf", jobs=6000, nodes=64)
    out = tmp_path / "adapted.ckpt"
    proc = run("adapt.py", "--env", "queue", "--trace", log, "--request_factors", "0.5:1:2", "0.5:2:10",
               "--size_length_correlation", "0.5", "--policy", POLICY, "scratch", "--reference", "scratch",
               "--steps", "1", "--sequences", "1", "--episodes", "2", "--eval_sequences", "3", "--json", "--out", out,
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    history, *lines = lines  # the rule a site would pick from its own history, without learning
    chosen = history["policy"].split(" ")[0]
    assert history["policy"] == f"{chosen} (best rule on the site's history)" and chosen in RULES
    assert history["minus_best_rule"] >= 0 and (history["minus_best_rule"] == 0) == (chosen == history["best_rule"])
    assert [(line["policy"].split("/")[-1], line["step"]) for line in lines] == [
        ("queue_bsld.ckpt", 0), ("queue_bsld.ckpt", 1), ("scratch", 0), ("scratch", 1)]
    assert all(line["sequences"] == 3 and "minus_best_rule_ci95" in line for line in lines)
    assert "minus_reference" in lines[0] and "minus_reference" not in lines[2]
    assert lines[0]["site"]["site"]["request_buckets"] == [[0.5, 1.0, 2.0], [0.5, 2.0, 10.0]]
    net, cfg = load_queue_policy(out)
    assert cfg.nodes == 64
    saved, source = read_queue_record(out), read_queue_record(POLICY)  # it read the site and what its start read
    assert saved.log == (*source.log, "site.swf"), saved.log  # one share a log: its start's, and the site's 80%
    assert saved.train_fraction == (*[source.train_fraction] * len(source.log), 0.8), saved.train_fraction
    adapt = script_main("adapt")  # the refusals in this process: the same code, no start-up
    with pytest.raises(ConfigError, match="exists"):
        adapt(["--env", "queue", "--trace", str(log), "--policy", str(POLICY), "--steps", "0", "--out", str(out)])
    with pytest.raises(ConfigError, match=r"^--eval_sequence_length 2000 is longer than the 1200 jobs after the "
                                          r"first 80% of site.swf: give a shorter one$"):  # the flag that sets it
        adapt(["--env", "queue", "--trace", str(log), "--policy", str(POLICY), "--eval_sequence_length", "2000"])
    with pytest.raises(ConfigError, match=r"^--measure 5 is beyond --steps 1$"):  # a measurement that never comes
        adapt(["--env=queue", "--trace", str(log), "--policy", str(POLICY), "--steps", "1", "--measure", "0", "5"])
    # sequences longer than the history it adapts on: refused before the rules run on the site
    with pytest.raises(ConfigError, match=r"^--sequence_length 5000 is longer than the site's history, its first "
                                          r"4800 jobs \(80% of site.swf\)$"):
        adapt(["--env=queue", "--trace", str(log), "--policy", str(POLICY), "--sequence_length", "5000"])
    assert "best rule" not in capsys.readouterr().out


def test_adapt_queue_adapts_on_sequences_of_the_given_length(tmp_path, capsys):
    log = write_log(tmp_path / "site.swf", jobs=6000, nodes=64)
    weights = {}
    for length in (32, 96):
        out = tmp_path / f"adapted_{length}.ckpt"
        script_main("adapt")(["--env", "queue", "--trace", str(log), "--policy", str(POLICY), "--steps", "1",
                              "--sequences", "1", "--episodes", "2", "--sequence_length", str(length),
                              "--eval_sequences", "2", "--measure", "0", "--out", str(out), "--threads", "1"])
        assert f"jobs (sequences of {length}); measured on 2 sequences of 1024 jobs" in capsys.readouterr().out
        weights[length] = list(load_queue_policy(out)[0].scorer.parameters())
    # the same seed and step size: only the rollouts' length differs, and the step with it
    assert any(not torch.equal(a, b) for a, b in zip(weights[32], weights[96]))


@pytest.mark.parametrize("flags,message", [
    (["--site", "nowhere"], "--site must be one of"),
    (["--site", "lublin2-tight", "--max_request", "60"], "--max_request cannot change them"),
    (["--request_factors", "1:2"], "--request_factors: '1:2' is not P:LOW:HIGH"),
    (["--request_factors", "0.5:1:2"], "--request_factors' probabilities must sum to 1, got 0.5"),  # the flag's name
    (["--size_length_correlation", "1.5"], "--size_length_correlation must be in [-1, 1]"),
    (["--site_seed", "5"], "--site_seed 5 seeds the draws of a site model given by"),
    (["--site", "lublin2-tight", "--site_seed", "5"], "(a declared --site has its own)"),
    (["--traces_dir", "/nonexistent"], "--traces_dir /nonexistent is where a declared --site's log is read"),
])
def test_site_flags_refuse_bad_values(flags, message):
    parser = ScriptParser()
    add_site_flags(parser)
    with pytest.raises(ConfigError) as error:
        site_from_args(parser.parse_args(flags))
    assert message in str(error.value)


def test_declared_site_flags_name_the_log_and_the_model():
    parser = ScriptParser()
    add_site_flags(parser)
    path, model = site_from_args(parser.parse_args(["--site", "nasa-exact", "--traces_dir", "logs"]))
    assert path == str(Path("logs") / "NASA-iPSC-1993-3.1-cln.swf.gz") and model.load == 1.0
    assert site_from_args(parser.parse_args([])) == (None, None)


def test_a_meta_iteration_too_large_for_memory_is_refused_at_construction():
    with pytest.raises(ConfigError, match=r"QueueMAML would need about .*sequences=100000"):
        QueueMAML(init_from=str(POLICY), traces=str(TRACES), sequences=100_000)


def test_a_meta_policy_over_rule_weights_adapts_only_them(tmp_path):
    """inner_params prior_weights: a fresh reserving network whose prior weighs the five rules' ranks;
    the outer step trains every weight, the inner steps (in training and in adapt.py, through the
    checkpoint's step sizes) only the R rule weights."""
    from lightning.pytorch import Trainer

    from lightning_sched.queue.policy import QueuePolicySpec

    spec = QueuePolicySpec(hidden=(4,), rule_ranks=RULES, prior="f1", prior_mix=True, fit_delay=True, reserve=True)
    for kwargs, message in (({"init_from": str(POLICY), "policy": spec}, "needs one of init_from .* and policy"),
                            ({"init_from": str(POLICY), "inner_params": "prior_weights"},
                             "inner_params prior_weights needs a policy with prior_mix: true"),
                            ({"policy": spec, "inner_params": "prior"}, "inner_params must be all or prior_weights"),
                            ({"policy": spec, "inner_params": "prior_weights", "learn_step_sizes": True},
                             "fixes the step sizes; learn_step_sizes learns them")):
        with pytest.raises(ConfigError, match=message):
            QueueMAML(traces=str(TRACES), **kwargs)
    module = QueueMAML(policy=spec, traces=str(TRACES), window=64, meta_batch=2, sequences=1, episodes=2,
                       sequence_length=32, validation_length=64, iterations_per_epoch=1, inner_lr=1.0, meta_lr=0.01,
                       inner_params="prior_weights")
    start = {name: p.detach().clone() for name, p in module.net.scorer.named_parameters()}
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, num_sanity_val_steps=0,
                      limit_val_batches=0, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.fit(module)
    moved_outer = {name for name, p in module.net.scorer.named_parameters() if not torch.equal(p, start[name])}
    assert "prior_weights" in moved_outer and len(moved_outer) > 1  # the outer step moves the rule weights and more
    trainer.save_checkpoint(tmp_path / "mix.ckpt")
    record = read_queue_record(tmp_path / "mix.ckpt")
    sizes = record.adaptation["step_sizes"]
    assert all(bool((s == float(name == "prior_weights")).all()) for name, s in sizes.items())
    net, trained = load_queue_policy(tmp_path / "mix.ckpt")
    log = read_queue_log(write_log(tmp_path / "site.swf", jobs=3000, nodes=64))
    cfg = network_config(log.config(sequence_length=64, backfill="off"), trained)
    _, moved = adaptation_curve(net, log, cfg, torch.tensor([2000]), 1, 1.0, 2, 4, 1500, seed=4, train_length=64,
                                measure_at=[], step_sizes=sizes)
    after = dict(moved.scorer.named_parameters())
    changed = {name for name, p in net.scorer.named_parameters() if not torch.equal(p, after[name])}
    assert changed == {"prior_weights"}


def test_validation_replays_the_same_sequences_whatever_the_inner_steps(monkeypatch):
    # MAML and its mixture baseline (inner_steps 0) are validated on one set of sequences: the
    # adaptation's draws before them must not move where they start
    import lightning_sched.queue.adaptation as adaptation  # validation adapts and measures there (adaptation_curve)
    starts, real_env = [], adaptation.QueueEnv

    def recording_env(*args, **kwargs):
        if "starts" in kwargs:
            starts[-1].append(kwargs["starts"].tolist())
        return real_env(*args, **kwargs)

    monkeypatch.setattr(adaptation, "QueueEnv", recording_env)
    for inner_steps in (0, 1, 2):
        module = QueueMAML(str(POLICY), traces=str(TRACES), inner_steps=inner_steps, sequences=1, episodes=2,
                           sequence_length=32, validation_length=64)
        module.log = lambda *args, **kwargs: None
        starts.append([])
        module.validation_step(0, 0)
    assert starts[0] == starts[1] == starts[2] and len(starts[0]) == 5


def test_a_small_log_with_an_oversized_job_adapts_and_trains_when_told_to_drop_it(tmp_path):
    # 800 jobs (sequences of 1024 fit neither its first 80% nor its last 20%) and one larger than the cluster
    log = write_log(tmp_path / "small.swf", jobs=800, nodes=64, extra=[swf_line(801, 10**7, 100, 128)])
    refused = run("adapt.py", "--env", "queue", "--trace", log, "--policy", POLICY, "--steps", "1", cwd=tmp_path)
    assert refused.returncode == 2 and "1 job(s) do not fit (--oversize drop" in refused.stderr
    proc = run("adapt.py", "--env", "queue", "--trace", log, "--policy", POLICY, "--steps", "1", "--sequences", "1",
               "--episodes", "2", "--eval_sequences", "3", "--eval_sequence_length", "128", "--sequence_length", "64",
               "--oversize", "drop", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines[-1]["site"]["dropped_larger_than_cluster"] == 1 and lines[-1]["sequences"] == 3
    from tasks.queue_ppo import QueuePPO
    from tasks.queue_ppo_settings import QueueValidation
    module = QueuePPO(str(log), oversize="drop", sequence_length=32, batch_size=2,
                      validation=QueueValidation(sequence_length=64))
    assert module.logs[0].counts["dropped_larger_than_cluster"] == 1
    assert "--oversize=drop" in module.evaluation_command("x.ckpt")[1]


def test_the_inner_loop_record_reads_back_as_written_and_refuses_damage():
    from lightning_sched.queue.adaptation import QueueInnerLoop
    for name in ("queue_maml.ckpt", "queue_maml_mixture.ckpt"):  # the shipped meta-policies' records, unchanged
        recorded = read_queue_record(ROOT / "checkpoints" / name).adaptation
        assert QueueInnerLoop.of(recorded).to_record() == recorded
    assert QueueInnerLoop.of(None) == QueueInnerLoop()  # a policy without one adapts with the defaults
    for damaged, message in (({"lr": "0.1"}, "lr must be a finite number > 0, got '0.1'"),
                             ({"episodes": 0}, "episodes must be an integer >= 1, got 0"),
                             ({"rate": 1}, "unknown fields: rate")):
        with pytest.raises(ConfigError, match=message):
            QueueInnerLoop.of(damaged)


def test_adapt_refuses_a_damaged_inner_loop_record_before_any_rollout_naming_its_file(tmp_path):
    from lightning_sched.config import CHECKPOINT_KEY
    from lightning_sched.queue.adaptation import QueueInnerLoop

    record = read_queue_record(ROOT / "checkpoints" / "queue_maml.ckpt")
    log = write_log(tmp_path / "site.swf", jobs=800, nodes=64)
    for damaged, message in (({**record.adaptation, "lr": "fast"}, "the inner loop's lr must be a finite number"),
                             ([1, 2], "the inner loop's record must be a dict, got list"),
                             ({"step_sizes": [0.1]}, "the inner loop's step_sizes must map weight names to tensors")):
        ckpt = tmp_path / "damaged.pt"
        torch.save({CHECKPOINT_KEY: {**record.to_dict(), "adaptation": damaged}}, ckpt)  # as a hand edit leaves it
        with pytest.raises(ConfigError, match=f"{ckpt}: {message}"):
            QueueInnerLoop.of(read_queue_record(ckpt).adaptation, ckpt)
        proc = run("adapt.py", "--env", "queue", "--trace", log, "--policy", ckpt, "--steps", "1", cwd=tmp_path)
        assert proc.returncode == 2 and f"error: {ckpt}: {message}" in proc.stderr
        assert "adapting on its first" not in proc.stdout  # refused with the records, before the rules run
