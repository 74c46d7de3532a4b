"""MAML: a meta-iteration on a tiny config changes the meta-parameters, and its second-order
gradient differs from the first-order one on the same data; adaptation and scripts/adapt.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, Trainer

from lightning_sched import ClusterConfig, ConfigError, DeepRMWorkload, WorkloadFamily
from lightning_sched.evaluation import make_jobsets
from lightning_sched.learning.adaptation import AdaptationSettings, adapt, scale_gradients
from lightning_sched.learning.baselines import ClusterTimeBaseline
from lightning_sched.policies.networks import PolicySpec, make_policy
from tasks.base import EvaluationSettings
from tasks.maml import MAML

ROOT = Path(__file__).resolve().parent.parent


class GradientProbe(Callback):
    """Keeps the meta-gradient of the first meta-iteration (just before Adam's step)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if not hasattr(self, "grads"):
            self.grads = [p.grad.detach().clone() for p in pl_module.net.parameters()]


def one_meta_iteration(first_order: bool, steps: int = 1):
    torch.manual_seed(0)
    module = MAML(family=WorkloadFamily(simu_len=10, load=(0.8, 1.2)), meta_batch=2, inner_steps=2, inner_jobsets=2,
                  inner_episodes=3, outer_jobsets=2, outer_episodes=3, evaluation=EvaluationSettings(val_jobsets=4),
                  first_order=first_order, seed=3)
    before = [p.detach().clone() for p in module.net.parameters()]
    probe = GradientProbe()
    trainer = Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      limit_val_batches=0, callbacks=[probe], enable_model_summary=False)
    trainer.fit(module)
    return module, before, probe.grads


def test_meta_iteration_changes_the_meta_parameters():
    module, before, grads = one_meta_iteration(first_order=False)
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.net.parameters()))


def test_second_order_gradient_differs_from_first_order():
    _, _, second = one_meta_iteration(first_order=False)
    _, _, first = one_meta_iteration(first_order=True)
    flat2, flat1 = torch.cat([g.flatten() for g in second]), torch.cat([g.flatten() for g in first])
    assert flat1.abs().sum() > 0 and flat2.abs().sum() > 0
    assert not torch.allclose(flat1, flat2, rtol=1e-4, atol=1e-7)  # the inner steps' curvature counts
    # same data, same adapted weights: the two estimates still point the same way
    assert torch.nn.functional.cosine_similarity(flat1, flat2, dim=0) > 0.5


def test_adaptation_steps_update_the_policy_and_report_each_step():
    cfg = ClusterConfig(observation="none")
    torch.manual_seed(0)
    net = make_policy(PolicySpec(masked=True), cfg)
    before = net.first.weight.detach().clone()
    workload = DeepRMWorkload(load=1.1, simu_len=12)
    seen = []
    summaries = adapt(net, cfg, workload, AdaptationSettings(steps=2, jobsets=3, episodes=3, lr=0.05),
                      make_jobsets(workload, 6, 12345), report=lambda step, s, result: seen.append(step))
    assert seen == [0, 1, 2] and [s["step"] for s in summaries] == [0, 1, 2]
    assert not torch.equal(before, net.first.weight)
    assert all(s["mean_slowdown"] >= 1 for s in summaries)


def test_adaptation_optimizers_take_their_own_first_step():
    """One step on the same draws: SGD moves each weight by -lr x its gradient, Adam's first step by
    about -lr x the gradient's sign (its moments hold one gradient); both downhill alike."""
    cfg = ClusterConfig(observation="none")
    workload = DeepRMWorkload(load=1.1, simu_len=12)
    eval_jobs = make_jobsets(workload, 2, 12345)

    def one_step(optimizer: str, lr: float):
        torch.manual_seed(0)
        net = make_policy(PolicySpec(masked=True), cfg)
        before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
        adapt(net, cfg, workload, AdaptationSettings(steps=1, jobsets=3, episodes=3, lr=lr, optimizer=optimizer),
              eval_jobs)
        return torch.cat([p.detach().flatten() for p in net.parameters()]) - before

    sgd, adam = one_step("sgd", 0.05), one_step("adam", 0.001)
    moved = sgd.abs() > 1e-9
    assert int(moved.sum()) > 100 and torch.equal(sgd[moved].sign(), adam[moved].sign())
    assert float(adam.abs().max()) <= 0.001 * (1 + 1e-4)
    assert float(adam[sgd.abs() > 1e-5].abs().min()) > 0.0009  # |g| >> Adam's eps: a full lr step
    assert not torch.allclose(sgd / sgd.abs().max(), adam / adam.abs().max())


def test_adapt_script_on_a_maml_checkpoint(tmp_path):
    module = MAML(family=WorkloadFamily(simu_len=10), meta_batch=2, inner_jobsets=2, inner_episodes=2, outer_jobsets=2,
                  outer_episodes=2, evaluation=EvaluationSettings(val_jobsets=4), inner_lr=0.07)
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, limit_val_batches=0,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module)
    ckpt = tmp_path / "maml.ckpt"
    trainer.save_checkpoint(ckpt)
    out = tmp_path / "adapted.ckpt"
    proc = subprocess.run([sys.executable, "scripts/adapt.py", "--ckpt", str(ckpt), "--steps", "2", "--load", "1.2",
                           "--short_prob", "0.5", "--dominant_units", "3", "7", "--simu_len", "10",
                           "--eval_jobsets", "8", "--json", "--threads", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [line["step"] for line in lines] == [0, 1, 2]
    for key in ("mean_slowdown", "mean_completion_time", "makespan", "utilization", "slo_hit_rate"):
        assert isinstance(lines[-1][key], float) and lines[-1][key + "_ci95"] >= 0
    assert "lr=0.07" in proc.stdout and "jobsets=2" in proc.stdout  # the meta-policy's inner loop
    from lightning_sched.policies.checkpoints import load_policy

    policy, cfg = load_policy(out)
    assert cfg.objective == "slowdown"
    start, _ = load_policy(ckpt)  # two steps moved the meta-policy: the file is the adapted one, not a copy
    assert any(not torch.equal(a, b) for a, b in zip(policy.net.parameters(), start.net.parameters(), strict=True))


def test_meta_sgd_learns_a_step_size_per_weight_and_adapt_uses_them(tmp_path):
    module = MAML(family=WorkloadFamily(simu_len=10, load=(0.8, 1.2)), meta_batch=2, inner_steps=2, inner_jobsets=2,
                  inner_episodes=3, outer_jobsets=2, outer_episodes=3, evaluation=EvaluationSettings(val_jobsets=4),
                  seed=3, inner_lr=1.0, learn_step_sizes=True, step_size_lr=0.05)
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, limit_val_batches=0,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module)
    # the meta-gradient reached every tensor's step sizes through the inner SGD steps (Adam's first
    # step moves a weight with any gradient by ~lr; image cells a tiny run never fills get none)
    assert all(float(s.detach().abs().max()) > 0.04 for s in module.log_step_sizes)
    ckpt = tmp_path / "meta_sgd.ckpt"
    trainer.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=True)["lightning_sched"]["adaptation"]
    assert {k: tuple(v.shape) for k, v in saved["step_sizes"].items()} == {
        k: tuple(p.shape) for k, p in module.net.named_parameters()}
    proc = subprocess.run([sys.executable, "scripts/adapt.py", "--ckpt", str(ckpt), "--steps", "3", "--load", "1.2",
                           "--simu_len", "10", "--eval_jobsets", "4", "--jobsets", "2", "--episodes", "2", "--json",
                           "--eval_every", "2", "--threads", "1", "--out", str(tmp_path / "a.ckpt")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "with learned per-weight step sizes" in proc.stdout and "optimizer='sgd'" in proc.stdout
    assert [json.loads(line)["step"] for line in proc.stdout.splitlines() if line.startswith("{")] == [0, 2, 3]


def test_step_sizes_scale_each_weights_sgd_step():
    cfg = ClusterConfig(observation="none")
    workload = DeepRMWorkload(load=1.1, simu_len=12)
    eval_jobs = make_jobsets(workload, 2, 12345)
    torch.manual_seed(0)
    start = make_policy(PolicySpec(masked=True), cfg)

    def adapted(lr, step_sizes=None):
        net = make_policy(PolicySpec(masked=True), cfg)
        net.load_state_dict(start.state_dict())
        adapt(net, cfg, workload, AdaptationSettings(steps=1, jobsets=3, episodes=3, lr=lr, step_sizes=step_sizes),
              eval_jobs)
        return dict(net.named_parameters())

    doubled = adapted(0.1)
    sized = adapted(0.05, {n: torch.full_like(p, 2.0) for n, p in start.named_parameters()})
    assert all(torch.allclose(doubled[n], sized[n], atol=1e-7) for n in doubled)  # s = 2 is twice the lr
    frozen = adapted(0.05, {n: torch.zeros_like(p) if n == "first.weight" else torch.ones_like(p)
                            for n, p in start.named_parameters()})
    assert torch.equal(frozen["first.weight"], start.first.weight)  # s = 0: that weight stays
    assert not torch.equal(frozen["first.bias"], start.first.bias)


def test_meta_sgd_settings_errors_name_the_field():
    import pytest

    from lightning_sched import ConfigError

    with pytest.raises(ConfigError, match="learn_step_sizes.*inner_optimizer 'sgd'.*'adam'"):
        MAML(learn_step_sizes=True, inner_optimizer="adam")
    with pytest.raises(ConfigError, match="learn_step_sizes needs second-order"):
        MAML(learn_step_sizes=True, first_order=True)
    with pytest.raises(ConfigError, match="step_sizes.*'sgd'.*'rmsprop'"):
        AdaptationSettings(optimizer="rmsprop", step_sizes={})
    net = make_policy(PolicySpec(masked=True), ClusterConfig(observation="none"))
    sizes = {n: torch.ones_like(p) for n, p in net.named_parameters()}
    with pytest.raises(ConfigError, match=r"step_sizes has no entry for the network's 'first.bias'"):
        missing = {n: v for n, v in sizes.items() if n != "first.bias"}
        scale_gradients(net, AdaptationSettings(step_sizes=missing).step_sizes)
    with pytest.raises(ConfigError, match=r"step_sizes\['first.bias'\] has shape \(3,\), the network's \(20,\)"):
        scale_gradients(net, AdaptationSettings(step_sizes={**sizes, "first.bias": torch.ones(3)}).step_sizes)


def test_settings_from_a_checkpoint_keep_its_inner_loop_under_overrides():
    saved = {"jobsets": 10, "episodes": 10, "lr": 3.0, "optimizer": "sgd", "normalize_advantage": True,
             "step_sizes": {"w": torch.ones(2)}}  # a PolicyRecord's adaptation
    own = AdaptationSettings.from_checkpoint(saved, 5, jobsets=20, episodes=None)
    assert (own.lr, own.optimizer, own.jobsets, own.episodes, own.steps) == (3.0, "sgd", 20, 10, 5)
    assert own.step_sizes is not None
    adam = AdaptationSettings.from_checkpoint(saved, 5, optimizer="adam", lr=0.003)
    assert adam.step_sizes is None and adam.optimizer == "adam"  # learned sizes scale SGD only
    plain = AdaptationSettings.from_checkpoint(None, 2)  # a checkpoint without an inner loop
    assert (plain.optimizer, plain.lr, plain.jobsets) == ("sgd", 0.05, 20)


def test_tasks_with_objectives_each_roll_out_under_their_own_reward():
    """With `objectives` every task draws one; each task's rewards follow its objective (SPEC's
    return identities on the finished episodes), though tasks of one objective share an env."""
    from lightning_sched.deeprm.objectives import episode_metrics

    module = MAML(family=WorkloadFamily(simu_len=10, load=(1.0, 1.5)), objectives=["slowdown", "deadline"],
                  meta_batch=8, policy=PolicySpec(masked=True), seed=1)
    module.trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    tasks = module.draw_tasks()
    assert {t.objective for t in tasks} == {"slowdown", "deadline"}
    parts = module.rollout([module.net] * len(tasks), tasks, jobsets=2, episodes=2, stream=1)
    assert len(parts) == len(tasks) and all(p.reward.shape[1] == 4 for p in parts)
    for task, part in zip(tasks, parts):
        m = episode_metrics(part.state)
        done = part.state.terminated & (m["num_jobs"] > 0)
        assert bool(done.any())
        returns, jobs = part.reward.double().sum(0)[done], m["num_jobs"][done].double()
        if task.objective == "slowdown":
            want = -m["mean_slowdown"][done] * jobs
        else:
            want = -(jobs - m["slo_hit_rate"][done] * jobs)
        torch.testing.assert_close(returns, want, rtol=1e-5, atol=1e-4)


def test_zero_inner_steps_is_reinforce_on_the_task_mixture():
    """inner_steps=0 (the mixture baseline): the outer REINFORCE step alone moves the parameters."""
    torch.manual_seed(0)
    module = MAML(family=WorkloadFamily(simu_len=10, load=(0.8, 1.2)), objectives=["slowdown", "completion_time"],
                  meta_batch=2, inner_steps=0, outer_jobsets=2, outer_episodes=3,
                  evaluation=EvaluationSettings(val_jobsets=4), seed=3)
    before = [p.detach().clone() for p in module.net.parameters()]
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      limit_val_batches=0, enable_model_summary=False)
    trainer.fit(module)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.net.parameters()))


def test_maml_objectives_and_inner_steps_errors_name_the_field():
    import pytest

    from lightning_sched import ConfigError

    with pytest.raises(ConfigError, match="MAML.objectives holds 'throughput'"):
        MAML(objectives=["slowdown", "throughput"])
    with pytest.raises(ConfigError, match="MAML.objectives must name at least one"):
        MAML(objectives=[])
    with pytest.raises(ConfigError, match="MAML.inner_steps must be an integer >= 0, got -1"):
        MAML(inner_steps=-1)
    with pytest.raises(ConfigError, match="MAML.meta_batch must be an integer >= 1, got 2.5"):  # from Python
        MAML(meta_batch=2.5)
    with pytest.raises(ConfigError, match="learn_step_sizes needs inner_steps >= 1"):
        MAML(learn_step_sizes=True, inner_steps=0)
    with pytest.raises(ConfigError, match="MAML.entropy_weight must be a finite number >= 0, got -0.1"):
        MAML(entropy_weight=-0.1)


def test_entropy_bonus_keeps_the_outer_policy_stochastic():
    """The same meta-iteration with an entropy bonus ends with a higher-entropy policy than without."""
    def entropy_after(weight: float) -> float:
        torch.manual_seed(0)
        module = MAML(family=WorkloadFamily(simu_len=10, load=(0.8, 1.2)), meta_batch=2, inner_steps=0, outer_jobsets=2,
                      outer_episodes=3, evaluation=EvaluationSettings(val_jobsets=4), meta_lr=0.05,
                      entropy_weight=weight, seed=3)
        Trainer(max_steps=3, logger=False, enable_progress_bar=False, enable_checkpointing=False, limit_val_batches=0,
                enable_model_summary=False).fit(module)
        jobs = make_jobsets(DeepRMWorkload(load=1.0, simu_len=10), 4, 7)
        from lightning_sched.deeprm.rollout import collect
        from lightning_sched.learning.policy_gradient import policy_gradient
        traj = collect(module.net, module.cluster, jobs, generator=torch.Generator().manual_seed(1))
        return float(policy_gradient(module.net, traj, module.baseline, 1).entropy)

    assert entropy_after(1.0) > entropy_after(0.0)


def test_a_meta_policy_starts_from_a_trained_slot_policy_and_refuses_another_network():
    import pytest

    from lightning_sched.config import ConfigError
    from lightning_sched.policies.checkpoints import load_network

    root = Path(__file__).resolve().parent.parent
    shipped = str(root / "checkpoints" / "slots_slowdown.ckpt")
    spec = PolicySpec(kind="slots", hidden=(32,), masked=True)
    module = MAML(policy=spec, init_from=shipped, meta_batch=2)
    source, _, _ = load_network(shipped)
    for name, value in source.state_dict().items():
        assert torch.equal(module.net.state_dict()[name], value), name
    with pytest.raises(ConfigError, match=r"init_from=.*is not this run's .*; start from it with "
                                          r"--model.init_args.policy.hidden '\[32\]' "
                                          r"--model.init_args.policy.kind slots$"):
        MAML(policy=PolicySpec(masked=True), init_from=shipped, meta_batch=2)


def test_tasks_with_cluster_sizes_roll_out_on_their_own_cluster_and_train():
    """With `cluster_sizes` each task runs on a cluster of its size, its demands scaled to it
    (SPEC's slowdown return identity on each); a meta-iteration trains;
    DeepRM's image network is refused."""
    import pytest

    from lightning_sched import ConfigError
    from lightning_sched.deeprm.objectives import episode_metrics

    spec = PolicySpec(kind="slots", hidden=[8], masked=True)
    module = MAML(family=WorkloadFamily(simu_len=10, load=(0.8, 1.2)), cluster_sizes=[[5, 10], [3, 40]],
                  policy=spec, meta_batch=6, inner_jobsets=2, inner_episodes=2, outer_jobsets=2, outer_episodes=2,
                  evaluation=EvaluationSettings(val_jobsets=4), seed=2)
    module.trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    tasks = module.draw_tasks()
    assert {(t.cluster.num_slots, t.cluster.resource_units) for t in tasks} == {(5, 10), (3, 40)}
    for task in tasks:
        assert task.workload.resource_units == task.cluster.resource_units
        assert task.workload.dominant_units[1] <= task.cluster.max_job_units
    big = [t for t in tasks if t.cluster.resource_units == 40]
    assert all(t.workload.dominant_units[1] > 10 for t in big)  # scaled, not left at 10 units' demands
    parts = module.rollout([module.net] * len(tasks), tasks, jobsets=2, episodes=2, stream=1)
    for task, part in zip(tasks, parts):
        m = episode_metrics(part.state)
        done = part.state.terminated & (m["num_jobs"] > 0)
        assert bool(done.any())
        returns = part.reward.double().sum(0)[done]
        torch.testing.assert_close(returns, -m["mean_slowdown"][done] * m["num_jobs"][done].double(),
                                   rtol=1e-5, atol=1e-4)
    before = [p.detach().clone() for p in module.net.parameters()]
    Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False, limit_val_batches=0,
            enable_model_summary=False).fit(module)
    assert any(not torch.equal(a, p) for a, p in zip(before, module.net.parameters()))
    with pytest.raises(ConfigError, match="cluster_sizes needs the slot policy"):
        MAML(cluster_sizes=[[5, 10]])
    with pytest.raises(ConfigError, match=r"cluster_sizes holds \[5\]"):
        MAML(cluster_sizes=[[5]], policy=spec)


def test_a_meta_policys_record_names_its_inner_loops_baseline_and_adapt_uses_it(monkeypatch):
    from lightning_sched.learning import adaptation as adaptation_module
    from lightning_sched.learning.baselines import ClusterTimeBaseline, make_baseline
    record = MAML(baseline=ClusterTimeBaseline(), meta_batch=2).policy_record()
    settings = AdaptationSettings.from_checkpoint(record.adaptation, steps=1, jobsets=1, episodes=2)
    assert settings.baseline == "ClusterTimeBaseline"
    assert AdaptationSettings.from_checkpoint(None, steps=1).baseline == "TimeIndexedBaseline"  # older records
    used = []
    monkeypatch.setattr(adaptation_module, "make_baseline", lambda name: used.append(name) or make_baseline(name))
    cfg = ClusterConfig(observation="none")
    workload = DeepRMWorkload(simu_len=10)
    net = make_policy(PolicySpec(masked=True), cfg)
    adapt(net, cfg, workload, settings, make_jobsets(workload, 2, 12_345))
    assert used == ["ClusterTimeBaseline"]
    with pytest.raises(ConfigError, match="baseline 'MeanBaseline' is not one of TimeIndexedBaseline"):
        make_baseline("MeanBaseline")


def test_first_order_meta_gradients_need_full_precision():
    # they are set by hand, past the loss scaling that a mixed-precision plugin then undoes
    from types import SimpleNamespace
    module = MAML(first_order=True, meta_batch=2)
    module._trainer = SimpleNamespace(precision="16-mixed")
    with pytest.raises(ConfigError, match="trainer.precision 16-mixed: MAML trains in 32-true or 64-true "
                                          r"\(first-order meta-gradients"):
        module.configure_optimizers()
    module._trainer = SimpleNamespace(precision="32-true")
    assert isinstance(module.configure_optimizers(), torch.optim.Adam)
    with pytest.raises(ConfigError, match="baseline 'Custom' is not one of"):
        MAML(baseline=type("Custom", (ClusterTimeBaseline,), {})(), meta_batch=2)


def test_shipped_meta_policies_optimizer_state_loads_into_the_modules_optimizer():
    """A resume of a shipped meta-training run restores its Adam state: the groups and their sizes of
    the modules' (shared) configure_optimizers must be the ones the files were saved with."""
    from jsonargparse import ArgumentError, ArgumentParser

    from tasks.maml import MAML
    from tasks.queue_maml import QueueMAML

    loaded = []
    for path in sorted((ROOT / "checkpoints").glob("*maml*.ckpt")):
        data = torch.load(path, map_location="cpu", weights_only=True)
        if "optimizer_states" not in data:  # a policy-only file: nothing to resume
            continue
        module = QueueMAML if path.name.startswith("queue_") else MAML
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(module, "model")
        settings = {k: v for k, v in data["hyper_parameters"].items() if not k.startswith("_")}
        try:
            model = parser.instantiate(parser.parse_object({"model": settings})).model
        except ArgumentError:  # saved by an older signature: fit.py refuses its resume (tested elsewhere)
            continue
        model.configure_optimizers().load_state_dict(data["optimizer_states"][0])
        loaded.append(path.name)
    assert {"maml.ckpt", "queue_maml.ckpt", "queue_maml_mixture.ckpt"} <= set(loaded), loaded
