"""The queue env's per-job policy (lightning_sched.queue.policy) and its PPO task (tasks.queue_ppo):
any window size, empty slots never picked, the value head's shape and pooling, checkpoints read with
weights_only=True, and real training runs (scripts/fit.py with configs/queue_smoke.yaml; EASY
backfilling in process) on a small log the tests write."""
from __future__ import annotations

import math
import os
import random
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import run_in_process
from tensordict import TensorDict

from lightning_sched.config import ConfigError
from lightning_sched.queue.env import QueueEnv
from lightning_sched.queue.log import read_queue_log
from lightning_sched.queue.policy import (
    QueueNetwork,
    QueuePolicy,
    QueuePolicyRecord,
    QueuePolicySpec,
    job_inputs,
    load_queue_policy,
    make_actor,
    make_critic,
)

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "queue_smoke.yaml"


def observation(b: int, w: int, seed: int = 0) -> TensorDict:
    """Random observations of B rows and a window of W slots, each row with 1..W jobs (row 0: one)."""
    g = torch.Generator().manual_seed(seed)
    jobs = torch.randint(1, w + 1, (b,), generator=g)
    jobs[0] = 1
    mask = torch.arange(w).unsqueeze(0) < jobs.unsqueeze(1)
    mask = mask.gather(1, torch.rand(b, w, generator=g).argsort(1))  # jobs anywhere in the window
    features = torch.rand(b, w, 4, generator=g) * 3 * mask.unsqueeze(-1)
    return TensorDict({"job_features": features, "cluster_features": torch.rand(b, 2, generator=g),
                       "action_mask": mask}, [b])


@pytest.mark.parametrize("window", [1, 3, 16, 128])
def test_any_window_size_and_empty_slots_are_never_picked(window):
    net = QueueNetwork(QueuePolicySpec(hidden=(16, 8)))
    td = observation(64, window)
    mask = td["action_mask"]
    logits = net(td["job_features"], td["cluster_features"], mask)
    assert logits.shape == (64, window)
    assert torch.isinf(logits[~mask]).all() and torch.isfinite(logits[mask]).all()
    greedy = QueuePolicy(net)(td.clone())["action"]
    assert mask.gather(1, greedy.unsqueeze(1)).all()
    sampled = QueuePolicy(net, greedy=False, generator=torch.Generator().manual_seed(1))(td.clone())["action"]
    assert mask.gather(1, sampled.unsqueeze(1)).all()
    actor = make_actor(net)
    for _ in range(20):  # the TorchRL actor's draws (MaskedCategorical) stay on jobs too
        out = actor(td.clone())
        assert mask.gather(1, out["action"].unsqueeze(1)).all()
        assert torch.isfinite(out["action_log_prob"]).all()
    assert (out["action"][0] == mask[0].nonzero().squeeze()).all()  # one job: no choice


def test_a_job_scores_the_same_whatever_window_it_sits_in():
    net = QueueNetwork()
    td = observation(8, 16)
    mask = torch.ones(8, 16, dtype=torch.bool)
    wide = net.scorer(td["job_features"], td["cluster_features"], mask)
    narrow = net.scorer(td["job_features"][:, :5], td["cluster_features"], mask[:, :5])
    torch.testing.assert_close(wide[:, :5], narrow)
    holes = mask.clone()
    holes[:, 5:] = False  # slots without a job take -inf and change nothing else
    masked = net.scorer(td["job_features"], td["cluster_features"], holes)
    torch.testing.assert_close(masked[:, :5], narrow)
    assert bool(torch.isinf(masked[:, 5:]).all())


def test_context_scorer_reads_the_rest_of_the_window_but_not_empty_slots_or_slot_order():
    net = QueueNetwork(QueuePolicySpec(context=True, job_area=True))
    assert QueuePolicySpec.from_dict(net.spec.to_dict()).context and not QueuePolicySpec().context
    with pytest.raises(ConfigError, match="context must be true or false"):
        QueuePolicySpec(context=1)
    td = observation(8, 16)
    mask = torch.ones(8, 16, dtype=torch.bool)
    wide = net.scorer(td["job_features"], td["cluster_features"], mask)
    narrow = net.scorer(td["job_features"][:, :5], td["cluster_features"], mask[:, :5])
    assert not torch.allclose(wide[:, :5], narrow)  # other jobs change a job's score
    holes = mask.clone()
    holes[:, 5:] = False
    garbage = td["job_features"].clone()
    garbage[:, 5:] = 7.0
    torch.testing.assert_close(net.scorer(garbage, td["cluster_features"], holes)[:, :5], narrow)
    order = torch.randperm(16)
    shuffled = net.scorer(td["job_features"][:, order], td["cluster_features"], mask)
    torch.testing.assert_close(shuffled, wide[:, order])


@pytest.mark.parametrize("dense", [True, False])
def test_value_head_shape_ignores_empty_slots_and_slot_order(dense):
    net = QueueNetwork()
    td = observation(32, 12)
    value = make_critic(net, dense)(td.clone())["state_value"]
    assert value.shape == (32, 1) and torch.isfinite(value).all()
    for filler in (7.0, float("inf")):  # whatever the empty slots hold: the same values, finite gradients
        garbage = td.clone()
        garbage["job_features"] = torch.where(td["action_mask"].unsqueeze(-1), td["job_features"], filler)
        out = make_critic(net, dense)(garbage)["state_value"]
        torch.testing.assert_close(out, value)
        net.zero_grad()
        out.sum().backward()
        assert all(bool(p.grad.isfinite().all()) for p in net.value.parameters() if p.grad is not None)
    order = torch.randperm(12)
    shuffled = td.clone()
    shuffled["job_features"], shuffled["action_mask"] = td["job_features"][:, order], td["action_mask"][:, order]
    torch.testing.assert_close(make_critic(net, dense)(shuffled)["state_value"], value)


def test_torchrls_value_estimators_and_ppo_loss_take_the_critic(tmp_path):
    """TorchRL's GAE and ClipPPOLoss run the critic under torch.vmap, which takes no data-dependent
    shapes: make_critic's dense pooling gives the sparse pooling's values and runs there."""
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(0)
    net = QueueNetwork(QueuePolicySpec(context=True))
    td = observation(32, 12)
    torch.testing.assert_close(make_critic(net)(td.clone())["state_value"],
                               make_critic(net, dense=False)(td.clone())["state_value"])
    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    env = QueueEnv(log.config(sequence_length=24, window=8, **net.spec.observation()), log, batch_size=[4], seed=0)
    with torch.no_grad():
        rollout = env.rollout(12, make_actor(net), break_when_any_done=False)
    GAE(gamma=1.0, lmbda=0.95, value_network=make_critic(net))(rollout)  # vmapped over the steps
    assert rollout["advantage"].shape == (4, 12, 1) and torch.isfinite(rollout["advantage"]).all()
    loss = ClipPPOLoss(make_actor(net), make_critic(net))(rollout.exclude("advantage", "value_target"))
    sum(v for k, v in loss.items() if k.startswith("loss_")).backward()
    assert all(p.grad is not None for p in net.value.parameters())


def test_spec_round_trip_and_bad_sizes():
    spec = QueuePolicySpec(hidden=(8,), embedding=4, value_hidden=(6, 3))
    assert QueuePolicySpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="QueuePolicySpec.hidden"):
        QueuePolicySpec(hidden=(0,))
    with pytest.raises(ConfigError, match="unknown field"):
        QueuePolicySpec.from_dict({"hidden": [4], "width": 3})


def test_job_area_input_lets_one_linear_layer_rank_jobs_by_f1_area():
    """With job_area the fifth input is log requested time x processor share: a scorer that reads
    only it ranks jobs by F1's first term (log requested x processors), which 4 inputs cannot."""
    spec = QueuePolicySpec(hidden=(1,), job_area=True)
    assert QueuePolicySpec.from_dict(spec.to_dict()) == spec and QueuePolicySpec().job_area is False
    with pytest.raises(ConfigError, match="job_area must be true or false"):
        QueuePolicySpec(job_area="yes")
    net = QueueNetwork(spec)
    layer = net.scorer.mlp
    assert layer.job_in.in_features == 5
    with torch.no_grad():
        for p in net.scorer.parameters():
            p.zero_()
        layer.job_in.weight[0, 4] = -1.0  # the hidden unit is minus the area: smaller areas score higher
        layer.job_in.bias[0] = 10.0  # keep the ReLU open
        layer.rest[1][0].weight.fill_(1.0)
    td = observation(16, 12)
    mask = torch.ones(16, 12, dtype=torch.bool)
    logits = net.scorer(td["job_features"], td["cluster_features"], mask)
    inputs = job_inputs(td["job_features"])
    area = inputs[..., 1] * inputs[..., 2]
    torch.testing.assert_close(logits, 10.0 - area)
    assert (logits.argmax(-1) == area.argmin(-1)).all()
    assert make_critic(net)(td.clone())["state_value"].shape == (16, 1)


def test_a_policy_on_an_env_without_its_inputs_is_refused_in_one_line(tmp_path):
    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    net = QueueNetwork(QueuePolicySpec(rule_ranks=("f1",), fit_delay=True))
    plain = QueueEnv(log.config(sequence_length=24, window=8), log, batch_size=[2], seed=0)
    with pytest.raises(ConfigError, match=r"reads 6 job and 2 row features .* the env gives 4 and 2: build the env"):
        QueuePolicy(net)(plain.reset())
    built = QueueEnv(log.config(sequence_length=24, window=8, **net.spec.observation()), log, batch_size=[2], seed=0)
    assert QueuePolicy(net)(built.reset())["action"].shape == (2,)


def test_checkpoint_round_trip_with_weights_only(tmp_path):
    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    cfg = log.config(window=8, sequence_length=16)
    net = QueueNetwork(QueuePolicySpec(hidden=(8, 4)))
    path = tmp_path / "policy.ckpt"
    torch.save({"lightning_sched": QueuePolicyRecord.of(net, cfg, log="tiny.swf").to_dict()}, path)
    loaded, saved_cfg = load_queue_policy(path)
    assert saved_cfg == cfg and loaded.spec == net.spec and not loaded.training
    td = observation(4, 8)
    torch.testing.assert_close(loaded(*td.select("job_features", "cluster_features", "action_mask").values()),
                               net(*td.select("job_features", "cluster_features", "action_mask").values()))
    torch.save({"something": 1}, tmp_path / "other.ckpt")
    with pytest.raises(ConfigError, match="not a queue policy checkpoint"):
        load_queue_policy(tmp_path / "other.ckpt")
    entry = QueuePolicyRecord.of(net, cfg).to_dict()
    assert entry["version"] == 1 and QueuePolicyRecord.from_dict(entry).queue == cfg
    for bad, message in (({**entry, "version": 7}, "version must be 1, got 7"),
                         ({**entry, "colour": "red"}, "unknown field.s. colour")):
        torch.save({"lightning_sched": bad}, tmp_path / "bad.ckpt")
        with pytest.raises(ConfigError, match=message):
            load_queue_policy(tmp_path / "bad.ckpt")


# ----- training ------------------------------------------------------------------------------------
def write_log(path: Path, jobs: int = 600, nodes: int = 16, seed: int = 0) -> Path:
    """A small SWF log on `nodes` nodes, loaded enough that jobs wait."""
    rng = random.Random(seed)
    lines = ["; Version: 2.2", f"; MaxNodes: {nodes}", f"; MaxProcs: {nodes}", ";"]
    submit = 0
    for j in range(1, jobs + 1):
        submit += int(rng.expovariate(1 / 60))
        procs, run = rng.choice([1, 1, 2, 4, 8, 16]), max(1, int(rng.lognormvariate(5, 1.2)))
        lines.append(" ".join(str(f) for f in [j, submit, -1, run, procs, -1, -1, procs, run * 2, -1, 1, 1, 1, -1,
                                               1, -1, -1, -1]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_printed_evaluation_uses_a_protocol_whose_sequences_the_run_never_read(tmp_path):
    from tasks.queue_ppo import QueuePPO
    from tasks.queue_ppo_settings import QueueValidation

    def protocol(log, fraction) -> str:
        task = QueuePPO(log=str(log), train_fraction=fraction, window=16, sequence_length=32, batch_size=8,
                        validation=QueueValidation(sequences=2, sequence_length=64))
        arguments = task.evaluation_command("x.ckpt")[1]
        return arguments[arguments.index("--protocol") + 1]

    lublin = ROOT.parent / "shared" / "traces" / "lublin_256.swf.gz"
    # a whole log read: RLScheduler's protocol (its model read whole logs too); the first 80%: the last 20%;
    # a log too short for RLScheduler's sequences: held out, where evaluate.py names the sequences it read
    assert [protocol(lublin, 1.0), protocol(lublin, 0.8), protocol(write_log(tmp_path / "tiny.swf"), 1.0)] == \
        ["rlscheduler", "heldout", "heldout"]


def test_fit_smoke_trains_validates_and_writes_a_loadable_policy(tmp_path):
    log = write_log(tmp_path / "tiny.swf")
    env = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WANDB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = run_in_process(ROOT / "scripts" / "fit.py", ["fit", "--config", SMOKE, "--threads", "1",
                                                        "--trainer.logger", "false", "--model.init_args.log", log,
                                                        "--model.init_args.load", "1.5"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = next(line for line in proc.stdout.splitlines() if line.startswith("tiny.swf: "))  # what reading did
    assert read.startswith("tiny.swf: 600 jobs read, 600 kept; 16 nodes of 1 processor; offered load 1.50") \
        and "gaps between arrivals x" in read, read
    evaluate = next(line for line in proc.stdout.splitlines() if line.startswith("evaluate it"))
    assert "--env queue --protocol heldout" in evaluate and evaluate.endswith(".ckpt")  # the queue's protocol
    # the arrivals it trained on, and sequences that fit the log's last 120 jobs: the command runs as printed
    assert "--load=1.5" in evaluate and "--sequence_length=60" in evaluate
    script, *arguments = shlex.split(evaluate.split(": ", 1)[1])[1:]
    assert run_in_process(tmp_path / script, [*arguments, "--sequences", "5", "--threads", "1"], tmp_path,
                          env).returncode == 0
    run = tmp_path / "runs" / "queue_smoke"
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    assert "eval/mean_bounded_slowdown" in header and "train/loss_objective" in header
    best = list((run / "checkpoints").glob("best-*.ckpt"))
    assert best and (run / "checkpoints" / "last.ckpt").is_file()
    data = torch.load(best[0], map_location="cpu", weights_only=True)  # the whole file, not only the policy
    assert data["global_step"] >= 2
    net, cfg = load_queue_policy(best[0])
    assert (cfg.window, cfg.sequence_length, cfg.nodes) == (16, 32, 16)
    for key, value in net.state_dict().items():  # the policy record holds the trained weights, not the start's
        assert torch.equal(value, data["state_dict"][f"net.{key}"]), key
    # the loaded policy plays whole episodes of the log without the training code
    queue_log = read_queue_log(log)
    play = QueueEnv(cfg, queue_log, batch_size=[3], starts=torch.tensor([0, 100, 200]))
    td, policy = play.reset(), QueuePolicy(net)
    while not bool(td["done"].all()):
        td = play.step(policy(td))["next"]
    assert (play.episode_metrics()["mean_bounded_slowdown"] >= 1).all()


def test_a_resumed_run_ends_with_the_weights_of_one_that_ran_through(tmp_path, fit_main, monkeypatch, capsys):
    # the resume lands inside the warm start, before PPO's sampled iterations: their draws must be the run's
    # (fit.py in this process: the resumed run starts from the state the first one left, as a new process would)
    log = write_log(tmp_path / "tiny.swf")
    flags = ["--config", str(SMOKE), "--threads", "1", "--trainer.logger", "false", "--model.init_args.log", str(log),
             "--model.init_args.imitate", "sjf", "--model.init_args.imitation_iterations", "3"]

    def fit(folder, *more):
        (tmp_path / folder).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / folder)
        fit_main(["fit", *flags, *more])
        return tmp_path / folder / "runs" / "queue_smoke" / "checkpoints" / "last.ckpt"

    through = fit("through", "--trainer.max_steps", "4")
    fit("resumed", "--trainer.max_steps", "2")
    resumed = fit("resumed", "--trainer.max_steps", "4", "--ckpt_path", "runs/queue_smoke/checkpoints/last.ckpt")
    a, b = (torch.load(path, map_location="cpu", weights_only=True) for path in (through, resumed))
    assert a["global_step"] == b["global_step"] == 4
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    # a warm start that aggregates its data across iterations cannot resume inside it: said, not lost
    flags.extend(["--model.init_args.imitation_aggregate", "true"])
    fit("aggregated", "--trainer.max_steps", "2")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        fit("aggregated", "--ckpt_path", "runs/queue_smoke/checkpoints/last.ckpt")
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after Lightning's own start-up lines
    assert stopped.value.code == 2 and last.startswith("error: a resume at iteration 2, inside the warm start that "
                                                       "aggregates its imitation data"), last


def test_ppo_with_easy_backfilling_in_process(tmp_path):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    torch.manual_seed(0)
    model = QueuePPO(str(write_log(tmp_path / "tiny.swf")), train_fraction=0.8, backfill="easy", window=8,
                     sequence_length=24, batch_size=6, ppo=PPOSettings(epochs=2, minibatch_size=40),
                     validation=QueueValidation(sequences=2, sequence_length=48), iterations_per_epoch=3)
    assert model.positions[0][1] + 24 <= 480  # sequences from the first 80% of the 600 jobs
    trainer = Trainer(max_steps=3, val_check_interval=3, check_val_every_n_epoch=None, logger=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    trainer.fit(model)
    metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    assert trainer.global_step == 3  # an iteration is one step, whatever its PPO minibatches
    assert 0 < metrics["train/decisions"] <= 6 * 24  # backfilled jobs are no decisions
    assert metrics["eval/mean_bounded_slowdown"] >= 1 and metrics["train/mean_bounded_slowdown"] >= 1
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert any(not torch.equal(before[k], v) for k, v in model.net.state_dict().items())


def test_env_device_choice_and_bad_value(tmp_path, monkeypatch):
    from tasks.queue_ppo import QueuePPO, QueueValidation

    log = str(write_log(tmp_path / "tiny.swf"))
    small = dict(window=8, sequence_length=24, batch_size=2,
                 validation=QueueValidation(sequences=2, sequence_length=48))
    with pytest.raises(ConfigError, match="QueuePPO.env_device must be one of auto, cpu, module, got 'gpu'"):
        QueuePPO(log, env_device="gpu", **small)
    for choice in ("auto", "cpu", "module"):
        assert QueuePPO(log, env_device=choice, **small).env("train").device == torch.device("cpu")
    from lightning_sched.queue import native as queue_native

    model = QueuePPO(log, **small)
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("meta")))
    kernel = queue_native.kernel() is not None  # no compiler, or the switch off: the torch step
    assert model.env_device() == torch.device("cpu" if kernel else "meta")
    monkeypatch.setenv("LIGHTNING_SCHED_NATIVE", "0")
    assert model.env_device() == torch.device("meta")  # no kernel: the torch step, with the network
    model.hparams.env_device = "cpu"
    assert model.env_device() == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("backfill,reserve", [("off", False), ("easy", False), ("off", True)])
def test_ppo_on_cuda_with_the_env_on_the_cpu(tmp_path, backfill, reserve):
    from lightning.pytorch import Callback, Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    torch.manual_seed(0)
    spec = QueuePolicySpec(hidden=(8,), rule_ranks=("f1",), prior="f1", fit_delay=True, reserve=True) if reserve \
        else QueuePolicySpec(hidden=(8,))
    model = QueuePPO(str(write_log(tmp_path / "tiny.swf")), backfill=backfill, window=8, sequence_length=24,
                     batch_size=4, ppo=PPOSettings(epochs=1, minibatch_size=40), env_device="cpu", policy=spec,
                     validation=QueueValidation(sequences=2, sequence_length=48))
    devices = []

    class Where(Callback):  # during training: Lightning moves the module back to the CPU after fit
        def on_train_batch_end(self, trainer, module, *_):
            devices.append((module.env("train").device.type, next(module.net.parameters()).device.type))

    trainer = Trainer(accelerator="gpu", devices=1, max_steps=2, val_check_interval=2, check_val_every_n_epoch=None,
                      logger=False, enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path, callbacks=[Where()])
    trainer.fit(model)
    assert devices == [("cpu", "cuda")] * 2
    metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    assert metrics["eval/mean_bounded_slowdown"] >= 1 and metrics["train/mean_bounded_slowdown"] >= 1


def test_imitation_warm_start_then_ppo_with_the_sequence_baseline(tmp_path):
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    torch.manual_seed(0)
    log = str(write_log(tmp_path / "tiny.swf"))
    model = QueuePPO([log, log], window=8, sequence_length=24, batch_size=8, imitate="sjf", imitation_iterations=2,
                     ppo=PPOSettings(epochs=2, minibatch_size=40, advantage="sequence", episodes_per_sequence=4),
                     validation=QueueValidation(sequences=2, sequence_length=48), iterations_per_epoch=4)
    env = model.env("train")
    state = env.initial_state()
    assert torch.equal(state.submit[:4], state.submit[:1].expand(4, -1))  # 4 episodes of one sequence
    assert not torch.equal(state.submit[0], state.submit[4])
    teacher_picks = []
    original = model.imitation

    def spy(data):
        teacher_picks.append(data["label"])
        return original(data)

    model.imitation = spy
    trainer = Trainer(max_steps=4, val_check_interval=4, check_val_every_n_epoch=None, logger=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model)
    assert teacher_picks and trainer.global_step == 4  # two imitation iterations, then two of PPO
    data, _ = model.rollout()  # sampled: the episodes of one sequence differ, and so do their advantages
    assert float(data["advantage"].abs().sum()) > 0
    metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    with pytest.raises(ConfigError, match="episodes_per_sequence >= 2"):
        PPOSettings(advantage="sequence")
    with pytest.raises(ConfigError, match="validation.start_fraction must be in"):
        QueuePPO(log, validation=QueueValidation(sequences=2, sequence_length=48, start_fraction=0.9),
                 train_fraction=0.8)
    recent = QueuePPO(log, train_fraction=0.8, validation=QueueValidation(sequences=2, sequence_length=48,
                                                                         start_fraction=0.6))
    assert recent.val_positions[0] == (360, 480 - 48)  # the most recent part of the first 80% of 600 jobs
    unseen = QueuePPO(log, train_fraction=0.6, validation=QueueValidation(sequences=2, sequence_length=48,
                                                                         start_fraction=0.6, end_fraction=0.8))
    assert unseen.positions[0] == (0, 360 - 256) and unseen.val_positions[0] == (360, 480 - 48)
    assert unseen.read_fraction == 0.8 and recent.read_fraction == 0.8  # what the checkpoint says it read
    with pytest.raises(ConfigError, match="validation.start_fraction must be in .0, end_fraction=0.8."):
        QueuePPO(log, train_fraction=0.6, validation=QueueValidation(sequences=2, sequence_length=48,
                                                                     start_fraction=0.8, end_fraction=0.8))
    with pytest.raises(ConfigError, match="imitation_iterations must be > 0 with imitate"):
        QueuePPO(log, imitate="sjf", validation=QueueValidation(sequences=2, sequence_length=48))


def test_per_sequence_scaling_gives_every_sequence_the_same_weight():
    from lightning_sched.learning.policy_gradient import per_sequence_scaled
    from tasks.queue_ppo import PPOSettings

    torch.manual_seed(0)
    t, sequences, episodes = 50, 3, 4
    advantage = torch.randn(t, sequences * episodes) * torch.tensor([1.0, 100.0, 0.01]).repeat_interleave(episodes)
    active = torch.rand(t, sequences * episodes) < 0.8
    scaled = per_sequence_scaled(advantage, active, episodes)
    rms = (scaled.view(t, sequences, episodes) * active.view(t, sequences, episodes)).pow(2).sum((0, 2)) \
        / active.view(t, sequences, episodes).sum((0, 2))
    torch.testing.assert_close(rms, torch.ones(3))
    assert torch.equal(scaled.sign(), advantage.sign())  # a rescaling: no decision changes side
    with pytest.raises(ConfigError, match="scale_per_sequence needs advantage 'sequence'"):
        PPOSettings(scale_per_sequence=True)


# ----- rule ranks: the rules' orders of the window as inputs ---------------------------------------
@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_rule_ranks_put_each_rules_first_pick_at_zero_and_distinct_ranks_on_every_job(tmp_path, backfill):
    from lightning_sched.queue.heuristics import QueueHeuristic

    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    rules = ("f1", "sjf", "wfp3", "unicep", "fcfs")
    cfg = log.config(window=8, sequence_length=64, backfill=backfill, rule_ranks=list(rules))
    assert cfg.rule_ranks == rules and log.config(window=8).to_dict().get("rule_ranks") is None
    env = QueueEnv(cfg, log, batch_size=[6], seed=3)
    assert env.observation_spec["job_features"].shape == (6, 8, 4 + len(rules))
    td, steps, generator = env.reset(), 0, torch.Generator().manual_seed(0)
    while not bool(td["done"].all()):
        live, mask = ~td["done"].squeeze(-1), td["action_mask"]
        for i, rule in enumerate(rules):
            ranks = td["job_features"][..., 4 + i]
            pick = QueueHeuristic(rule, window_only=True)(td.clone())["action"]
            assert (ranks.gather(1, pick[:, None]).squeeze(1)[live] == 0).all()  # the rule's pick ranks first
            for b in live.nonzero().flatten().tolist():  # every visible job has its own place in the order
                visible = ranks[b][mask[b]]
                assert visible.unique().numel() == visible.numel() and float(visible.max()) <= 1.0
            assert (ranks[~mask] == 0).all()
        td = env.step(td.set("action", torch.multinomial(mask.double(), 1, generator=generator).squeeze(-1)))["next"]
        steps += 1
    assert steps > 10
    with pytest.raises(ConfigError, match="QueueConfig.rule_ranks must be distinct rules of .* got \\['f2'\\]"):
        log.config(rule_ranks=["f2"])
    with pytest.raises(ConfigError, match="QueuePolicySpec.rule_ranks must be distinct rules"):
        QueuePolicySpec(rule_ranks=("sjf", "sjf"))


def test_a_rank_reading_policy_trains_follows_its_rule_and_evaluates_from_its_checkpoint(tmp_path):
    """A scorer reading F1's rank can be exactly F1; a fit with rule ranks writes a checkpoint whose
    evaluation builds the same observation, and the decision service refuses it in one line."""
    from lightning.pytorch import Trainer

    from lightning_sched.decide.scorers import TorchScorer
    from lightning_sched.queue.evaluation import evaluate_queue, heuristic_policies, resolve
    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    path = str(write_log(tmp_path / "tiny.swf"))
    torch.manual_seed(0)
    model = QueuePPO(path, window=8, sequence_length=24, batch_size=4, imitate="f1", imitation_iterations=1,
                     policy=QueuePolicySpec(hidden=(4,), rule_ranks=("sjf", "f1")),
                     ppo=PPOSettings(epochs=1, minibatch_size=40), validation=QueueValidation(2, 48),
                     iterations_per_epoch=2)
    assert model.cfg.rule_ranks == ("sjf", "f1")
    trainer = Trainer(max_steps=2, val_check_interval=2, check_val_every_n_epoch=None, logger=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model)
    checkpoint = tmp_path / "ranks.ckpt"
    trainer.save_checkpoint(checkpoint)
    _, cfg = resolve(str(checkpoint), read_queue_log(path).config(sequence_length=48))
    assert cfg.rule_ranks == ("sjf", "f1") and cfg.window == 8
    with pytest.raises(ConfigError, match="reading rule ranks, fit delays or the clock decides through the env"):
        TorchScorer(checkpoint)
    from lightning_sched.decide import load_scorer
    from lightning_sched.decide.policies import ObservingPolicy

    served = load_scorer(checkpoint)
    assert isinstance(served, ObservingPolicy) and served.clock_reason == "F1's ranks (log10 of submit times)"
    # weights that read F1's rank alone act as F1 on the window: the same episodes, job for job
    net = model.net
    with torch.no_grad():
        for p in net.scorer.parameters():
            p.zero_()
        net.scorer.mlp.job_in.weight[0, 5] = -1.0  # inputs: 4 features, sjf's rank, f1's rank
        net.scorer.mlp.job_in.bias[0] = 1.0  # ranks are at most 1: the ReLU stays open
        net.scorer.mlp.rest[1][0].weight.fill_(1.0)
    log, starts = read_queue_log(path), torch.tensor([0, 150, 300])
    window_cfg = log.config(window=48, sequence_length=48)  # the window shows the whole queue, as rules see it
    learned = evaluate_queue(QueuePolicy(net.eval()), replace(window_cfg, rule_ranks=("sjf", "f1")), log, starts)
    f1, f1_cfg = heuristic_policies(["f1"], window_cfg)["f1"]
    rule = evaluate_queue(f1, f1_cfg, log, starts)
    torch.testing.assert_close(learned.sequences["mean_bounded_slowdown"], rule.sequences["mean_bounded_slowdown"])


@pytest.mark.parametrize("backfill", ["off", "easy"])
def test_fit_delay_is_the_wait_until_running_jobs_requested_ends_free_enough_nodes(tmp_path, backfill):
    """Against a direct reading of each visible job: running jobs sorted by start + requested time free
    their nodes one after another, and the job fits at the first end after which enough are free."""
    from lightning_sched.queue.state import RUNNING

    log = read_queue_log(write_log(tmp_path / "tiny.swf"))
    cfg = log.config(window=8, sequence_length=96, backfill=backfill, rule_ranks=["sjf"], fit_delay=True)
    assert cfg.job_features == 6 and QueuePolicySpec(rule_ranks=("sjf",), fit_delay=True).extra_inputs == 2
    env = QueueEnv(cfg, log, batch_size=[4], seed=1)
    td, generator, waited = env.reset(), torch.Generator().manual_seed(0), 0
    while not bool(td["done"].all()):
        s = env.state
        for b in (~s.done).nonzero().flatten().tolist():
            ends = sorted((int(s.start[b, j] + s.requested[b, j]), int(s.nodes[b, j]))
                          for j in (s.status[b] == RUNNING).nonzero().flatten().tolist())
            for slot, job in enumerate(td["window_job"][b].tolist()):
                need, free, seconds = (int(s.nodes[b, job]), int(s.free_nodes[b]), 0) if job >= 0 else (0, 0, 0)
                for end, nodes in ends if need > free else []:
                    free += nodes
                    if free >= need:
                        seconds = max(0, end - int(s.time[b]))
                        break
                waited += seconds > 0
                expected = math.log1p(seconds / 60) / 8
                assert float(td["job_features"][b, slot, 5]) == pytest.approx(expected, abs=1e-6)
        td = env.step(td.set("action", torch.multinomial(td["action_mask"].double(), 1, generator=generator)
                             .squeeze(-1)))["next"]
    assert waited > 20  # jobs that did not fit were seen
    with pytest.raises(ConfigError, match="QueueConfig.fit_delay must be true or false, got 'yes'"):
        log.config(fit_delay="yes")
    assert "fit_delay" not in log.config().to_dict() and cfg.to_dict()["fit_delay"] is True


def test_the_clock_is_the_time_of_day_beside_the_cluster_features_and_a_clock_policy_round_trips(tmp_path):
    """With QueueConfig.clock the row features end in sin, cos of the time of day; the first two are
    the clockless env's; a policy trained with it records it, evaluates with it, and the decision
    service refuses it (its snapshots carry no clock)."""
    from lightning.pytorch import Trainer

    from lightning_sched.decide.scorers import TorchScorer
    from lightning_sched.decide.snapshot import SnapshotError
    from lightning_sched.queue.evaluation import evaluate_queue, resolve
    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    path = write_log(tmp_path / "tiny.swf", jobs=600)
    log = read_queue_log(path)
    plain = log.config(window=8, sequence_length=96)
    timed = replace(plain, clock=True)
    assert (plain.cluster_features, timed.cluster_features) == (2, 4)
    envs = [QueueEnv(cfg, log, batch_size=[3], starts=torch.tensor([0, 200, 400])) for cfg in (plain, timed)]
    tds, generator, days = [env.reset() for env in envs], torch.Generator().manual_seed(0), set()
    while not bool(tds[0]["done"].all()):
        angle = (tds[1]["time"].squeeze(-1) % 86400).double() * 2 * math.pi / 86400
        clock = torch.stack([angle.sin(), angle.cos()], -1).float()
        torch.testing.assert_close(tds[1]["cluster_features"][:, 2:], clock)
        torch.testing.assert_close(tds[1]["cluster_features"][:, :2], tds[0]["cluster_features"])
        days.update((tds[1]["time"] // 3600 % 24).flatten().tolist())
        action = torch.multinomial(tds[0]["action_mask"].double(), 1, generator=generator).squeeze(-1)
        tds = [env.step(td.set("action", action))["next"] for env, td in zip(envs, tds)]
    assert len(days) >= 6  # the test log's sequences span several hours of the day
    with pytest.raises(ConfigError, match="QueueConfig.clock must be true or false, got 'yes'"):
        log.config(clock="yes")
    assert "clock" not in plain.to_dict() and timed.to_dict()["clock"] is True
    with pytest.raises(ConfigError, match="QueuePolicySpec.clock must be true or false, got 1"):
        QueuePolicySpec.from_dict({"clock": 1})

    spec = QueuePolicySpec(hidden=(8,), embedding=4, context=True, clock=True)
    model = QueuePPO(str(path), window=16, sequence_length=32, batch_size=4, policy=spec,
                     ppo=PPOSettings(epochs=1, minibatch_size=64), validation=QueueValidation(2, 32),
                     iterations_per_epoch=1)
    assert model.cfg.clock
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, num_sanity_val_steps=0,
                      limit_val_batches=0, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)
    trainer.fit(model)
    checkpoint = tmp_path / "clock.ckpt"
    trainer.save_checkpoint(checkpoint)
    policy, cfg = resolve(str(checkpoint), log.config(sequence_length=64))
    assert policy.net.spec.clock and cfg.clock and cfg.cluster_features == 4
    result = evaluate_queue(policy, cfg, log, torch.tensor([0, 300]))
    assert int(result.summary["jobs"]) == 2 * 64
    with pytest.raises(SnapshotError, match="clock.ckpt: a policy reading .* the clock decides through the env"):
        TorchScorer(checkpoint)
    from lightning_sched.decide import decide, load_scorer

    snapshot = {"now": 100, "capacity": {"processors": 64}, "running": [],
                "waiting": [{"id": 1, "submit": 50, "requested_time": 60, "processors": 4}]}
    with pytest.raises(ConfigError, match="reads the time of day, which depends on where the clock starts"):
        decide(snapshot, load_scorer(checkpoint))
    assert decide(snapshot, load_scorer(checkpoint), clock_start=0)["start_now"] == ["1"]


def test_logs_of_different_cluster_sizes_are_refused_unless_one_cluster_is_given(tmp_path):
    from tasks.queue_ppo import QueuePPO
    from tasks.queue_ppo_settings import QueueValidation

    small, large = write_log(tmp_path / "small.swf", nodes=16), write_log(tmp_path / "large.swf", nodes=32, seed=1)
    settings = {"window": 16, "sequence_length": 32, "batch_size": 8, "validation": QueueValidation(2, 64)}
    with pytest.raises(ConfigError, match=r"QueuePPO.log: small.swf is 16 nodes x 1, large.swf 32 x 1: one run"):
        QueuePPO(log=[str(small), str(large)], **settings)
    both = QueuePPO(log=[str(small), str(large)], nodes=32, **settings)  # both replayed on one cluster
    assert [one.nodes for one in both.logs] == [32, 32]
    assert not both.data_report()[-1].startswith("note:")
    light = QueuePPO(log=str(small), nodes=256, oversize="drop", **settings).data_report()
    assert light[-1].startswith("note: small.swf's offered load is 0.") and "--model.init_args.load 1.0" in light[-1]
