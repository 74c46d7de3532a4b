"""The slot policy (PolicySpec kind "slots"): slot-equivariant, one set of weights for any cluster
size, the heuristic prior, greedy acting that cannot stall, and checkpoints across sizes."""
import json
from pathlib import Path

import conftest
import pytest
import torch

from lightning_sched import ClusterConfig, ConfigError, DeepRMWorkload, JobSet
from lightning_sched.deeprm.cluster import init_state, step_state
from lightning_sched.deeprm.observations import observe
from lightning_sched.evaluation import evaluate, make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.policies.acting import Acting, NetworkPolicy
from lightning_sched.policies.checkpoints import PolicyRecord, load_network, load_policy, warm_start
from lightning_sched.policies.networks import PolicySpec, SlotNetwork, make_policy

ROOT = Path(__file__).resolve().parent.parent
SLOTS = PolicySpec(kind="slots", masked=True, hidden=(8,))
CFG = ClusterConfig(observation="none")
BIG = ClusterConfig(observation="none", num_slots=20, resource_units=20, max_job_units=20, horizon=30,
                    max_job_len=20)


def features_mid_episode(cfg: ClusterConfig, load: float = 1.5) -> dict:
    """Features of states with waiting jobs: SJF plays a few steps first."""
    jobs = make_jobsets(DeepRMWorkload(load=load, num_resources=cfg.num_resources,
                                       resource_units=cfg.resource_units,
                                       dominant_units=(cfg.resource_units // 2, cfg.resource_units)), 16, 3)
    state = init_state(jobs, cfg)
    sjf = make_heuristic("sjf", cfg)
    for _ in range(40):
        step_state(state, sjf(observe(state, cfg))["action"], cfg)
    return observe(state, cfg)


def test_logits_follow_the_slots_when_they_are_permuted():
    torch.manual_seed(0)
    net = make_policy(SLOTS, CFG)
    features = net.encode(features_mid_episode(CFG))
    assert features["present"].sum() > features["present"].shape[0]  # several jobs waiting somewhere
    order = torch.randperm(CFG.num_slots)
    permuted = {k: v[:, order] if k in ("slots", "present") else v for k, v in features.items()}
    permuted["mask"] = torch.cat([features["mask"][:, order], features["mask"][:, -1:]], 1)
    base, moved = net(features), net(permuted)
    assert torch.allclose(moved[:, :-1], base[:, order], atol=1e-6)
    assert torch.allclose(moved[:, -1], base[:, -1], atol=1e-6)


def test_the_same_weights_run_on_another_cluster_size():
    torch.manual_seed(0)
    small = make_policy(SLOTS, CFG)
    big = make_policy(SLOTS, BIG)
    big.load_state_dict(small.state_dict())  # no weight depends on the cluster's size
    jobs = make_jobsets(DeepRMWorkload(load=0.9, resource_units=20, dominant_units=(10, 20), other_units=(1, 4),
                                       long_len=(10, 20)), 6, 1)
    result = evaluate(NetworkPolicy(big, Acting(greedy=True)), BIG, jobs)
    assert result.summary["unfinished_jobs"] == 0 and result.summary["num_jobs"] > 0


def test_with_the_prior_the_untrained_policy_acts_as_the_heuristic():
    jobs = make_jobsets(DeepRMWorkload(load=1.1), 20, 5)
    for prior in ("tetris", "sjf"):
        net = make_policy(PolicySpec(kind="slots", masked=True, hidden=(8,), prior=prior), CFG)
        mine = evaluate(NetworkPolicy(net, Acting(greedy=True)), CFG, jobs)
        theirs = evaluate(make_heuristic(prior, CFG), CFG, jobs)
        assert torch.equal(mine.episodes["mean_slowdown"], theirs.episodes["mean_slowdown"])
    # and the prior's scale is a weight that training moves
    assert "log_prior_scale" in dict(net.named_parameters())


def test_greedy_acting_never_stalls_on_an_idle_cluster():
    """A network whose argmax is always void would wait forever; greedy acting may not void while
    the cluster is idle and a job fits now."""
    net = make_policy(SLOTS, CFG)
    with torch.no_grad():
        net.void_out.bias.fill_(100.0)
    jobs = make_jobsets(DeepRMWorkload(load=0.5, simu_len=10), 4, 2)
    greedy = evaluate(NetworkPolicy(net, Acting(greedy=True)), CFG, jobs)
    assert greedy.summary["unfinished_jobs"] == 0

    def raw_argmax(obs):  # the same network without the guard
        obs["action"] = net(net.encode(obs)).argmax(-1)
        return obs

    assert evaluate(raw_argmax, CFG, jobs).summary["unfinished_jobs"] > 0
    # "while_arriving": the same network may wait while jobs are still to come, and still finishes
    # every job: once none is left to arrive, void on an idle cluster is forbidden
    waits = evaluate(NetworkPolicy(net, Acting(greedy=True, idle_rule="while_arriving")), CFG, jobs)
    assert waits.summary["unfinished_jobs"] == 0
    assert waits.summary["mean_slowdown"] > greedy.summary["mean_slowdown"]  # it did hold jobs back


def test_idle_rules_at_the_first_decision():
    """At time 0 on an empty cluster with a job in a slot, a void-loving network voids unless the
    rule forbids it: "while_arriving" only where another job is still to come, "not_when_idle" nowhere."""
    net = make_policy(SLOTS, CFG)
    with torch.no_grad():
        net.void_out.bias.fill_(100.0)
    # row 0: a job at 0 and one at 5; row 1: a job at 0 only
    jobs = JobSet(arrival=torch.tensor([[0, 5], [0, 0]]), duration=torch.tensor([[2, 2], [2, 0]]),
                  demand=torch.tensor([[[1, 1], [1, 1]], [[1, 1], [0, 0]]]))
    state = init_state(jobs.validate(CFG), CFG)
    assert observe(state, CFG)["to_arrive"].view(-1).tolist() == [1, 0]
    void = CFG.num_slots
    rules = ("always", "while_arriving", "not_when_idle", "work_conserving")

    def chosen(state):
        return {rule: NetworkPolicy(net, Acting(greedy=False, idle_rule=rule), torch.Generator().manual_seed(0))(
            observe(state, CFG))["action"].tolist() for rule in rules}

    assert chosen(state) == {"always": [void, void], "while_arriving": [void, 0], "not_when_idle": [0, 0],
                             "work_conserving": [0, 0]}
    # a busy cluster with a slot job that fits now: only "work_conserving" forbids the wait
    busy = JobSet(arrival=torch.tensor([[0, 0]]), duration=torch.tensor([[3, 2]]),
                  demand=torch.tensor([[[1, 1], [1, 1]]])).validate(CFG)
    state = init_state(busy, CFG)
    step_state(state, torch.tensor([0]), CFG)
    obs = observe(state, CFG)
    assert obs["used"].sum() > 0 and bool((obs["slot_offset"] == 0).any())
    assert chosen(state) == {"always": [void], "while_arriving": [void], "not_when_idle": [void],
                             "work_conserving": [0]}
    with pytest.raises(ConfigError, match="Acting.idle_rule 'always' with greedy"):
        Acting(greedy=True, idle_rule="always")
    with pytest.raises(ConfigError, match="Acting.idle_rule must be one of .*, got 'never'"):
        Acting(greedy=True, idle_rule="never")  # an old name is read from files and flags only


def test_while_frequent_waits_only_above_its_arrival_rate(tmp_path):
    """"while_frequent" acts as "while_arriving" while arrived / (time + RATE_DAMPING_STEPS) is at
    least wait_rate, and as "work_conserving" below it; the rate travels in the checkpoint."""
    torch.manual_seed(0)  # the untrained network's pick among equal jobs: its own draw, not an earlier test's
    net = make_policy(SLOTS, CFG)
    with torch.no_grad():
        net.void_out.bias.fill_(100.0)
    void = CFG.num_slots
    # at time 0: row 0 has one arrival and another job to come, row 1 three arrivals and one to come
    jobs = JobSet(arrival=torch.tensor([[0, 5, 9, 9], [0, 0, 0, 5]]), duration=torch.tensor([[2, 2, 2, 2]] * 2),
                  demand=torch.ones(2, 4, 2, dtype=torch.long)).validate(CFG)
    obs = observe(init_state(jobs, CFG), CFG)
    assert obs["arrived"].view(-1).tolist() == [1, 3] and obs["time"].view(-1).tolist() == [0, 0]

    def chosen(wait_rate):
        policy = NetworkPolicy(net, Acting(greedy=True, idle_rule="while_frequent", wait_rate=wait_rate))
        return policy(observe(init_state(jobs, CFG), CFG))["action"].tolist()

    # rates 1/10 and 3/10 jobs a step
    assert chosen(0.05) == [void, void] and chosen(0.2) == [0, void] and chosen(0.5) == [0, 0]
    PolicyRecord.of(net, Acting(True, "while_frequent", 0.2)).save(tmp_path / "f.ckpt")
    policy, _ = load_policy(tmp_path / "f.ckpt")
    assert policy.acting == Acting(True, "while_frequent", 0.2)
    assert load_policy(tmp_path / "f.ckpt", override={"wait_rate": 0.5})[0].acting.wait_rate == 0.5
    # a rate that changes nothing is refused in one line
    proc = conftest.run_script(ROOT / "scripts/evaluate.py", "--policy", "tetris", "--wait_rate", "0.2", "--jobsets",
                               "2", "--threads", "1", cwd=ROOT)
    assert proc.returncode != 0 and "--wait_rate" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(ConfigError, match="Acting.wait_rate must be a finite number > 0"):
        Acting(greedy=True, idle_rule="while_frequent", wait_rate=-1.0)


def test_checkpoints_across_cluster_sizes(tmp_path):
    slots = make_policy(SLOTS, CFG)
    PolicyRecord.of(slots, Acting(greedy=True)).save(tmp_path / "slots.ckpt")
    net, cfg, _ = load_network(tmp_path / "slots.ckpt", cluster=BIG)
    assert isinstance(net, SlotNetwork) and (cfg.num_slots, cfg.resource_units, cfg.horizon) == (20, 20, 30)
    policy, cfg = load_policy(tmp_path / "slots.ckpt")
    assert cfg.num_slots == 10  # no cluster given: its own
    image = make_policy(PolicySpec(), CFG)
    PolicyRecord.of(image, Acting(greedy=False)).save(tmp_path / "image.ckpt")
    with pytest.raises(ConfigError, match=r"image network runs only on the cluster .* num_slots \(10 -> 20\)"):
        load_network(tmp_path / "image.ckpt", cluster=BIG)
    load_network(tmp_path / "image.ckpt", cluster=CFG.replace(objective="completion_time"))  # same size: fine


def test_spec_errors_name_the_field():
    with pytest.raises(ConfigError, match="PolicySpec.masked must be true for kind 'slots'"):
        PolicySpec(kind="slots")
    with pytest.raises(ConfigError, match="PolicySpec.kind"):
        PolicySpec(kind="graph")
    with pytest.raises(ConfigError, match="PolicySpec.prior='tetris' needs kind 'slots'"):
        PolicySpec(prior="tetris")
    with pytest.raises(ConfigError, match="PolicySpec.prior_scale"):
        PolicySpec(kind="slots", masked=True, prior="sjf", prior_scale=0.0)


def test_evaluate_script_runs_a_slot_checkpoint_on_another_cluster(tmp_path):
    PolicyRecord.of(make_policy(SLOTS, CFG), Acting(greedy=True)).save(tmp_path / "s.ckpt")
    proc = conftest.run_script(
        ROOT / "scripts/evaluate.py", "--policy", tmp_path / "s.ckpt", "tetris", "--num_slots", "5",
        "--resource_units", "20", "--max_job_units", "20", "--dominant_units", "10", "20", "--other_units", "1", "4",
        "--simu_len", "10", "--jobsets", "3", "--json", "--threads", "1", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in rows] == [str(tmp_path / "s.ckpt"), "tetris"]
    assert rows[0]["num_jobs"] == rows[1]["num_jobs"] > 0 and rows[0]["unfinished_jobs"] == 0


def test_cluster_sizes_figure_runs_one_network_on_every_size(tmp_path):
    PolicyRecord.of(make_policy(SLOTS, CFG), Acting(greedy=True)).save(tmp_path / "s.ckpt")
    proc = conftest.run_script(
        ROOT / "scripts/figures.py", "cluster_sizes", "--ckpt", f"slots={tmp_path / 's.ckpt'}",
        "--heuristics", "tetris", "--loads", "0.9", "--jobsets", "2", "--threads", "1", "--out",
        tmp_path / "sizes.png", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "sizes.json").read_text())
    assert list(data["results"]) == ["5 slots, 10 units", "20 slots, 20 units", "50 slots, 40 units"]
    for label, row in data["versus_best_heuristic"]["slots"].items():
        assert row["0.9"]["best_heuristic"] == "tetris" and data["results"][label]["slots"]["0.9"][0] > 0


def test_a_slot_policy_distills_a_trained_checkpoint():
    """imitation.teacher may be a policy checkpoint: the slot policy learns to copy DeepRM's image
    network on the states it visits (the imitation loss falls)."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import Callback

    from tasks.base import EvaluationSettings
    from tasks.reinforce import Imitation, Reinforce, RMSpropSettings

    with pytest.raises(ConfigError, match="imitation.teacher='fifo' is neither a heuristic"):
        Imitation(teacher="fifo", iterations=1)
    module = Reinforce(workload=DeepRMWorkload(load=1.1, simu_len=20), policy=SLOTS, num_jobsets=4,
                       episodes_per_jobset=2, imitation=Imitation(teacher="checkpoints/image_best_slowdown.ckpt",
                                                                  iterations=6),
                       optimizer=RMSpropSettings(lr=0.01), evaluation=EvaluationSettings(val_jobsets=2))
    losses = []

    class Losses(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(trainer.callback_metrics["train/imitation_loss"]))

    Trainer(max_steps=6, logger=False, enable_progress_bar=False, enable_checkpointing=False, limit_val_batches=0,
            callbacks=[Losses()]).fit(module)
    assert len(losses) == 6 and losses[-1] < losses[0]


def test_select_checkpoint_ships_the_acting_mode_that_scores_best(tmp_path):
    """--acting both makes each checkpoint a candidate greedy and sampled; --write copies the winner
    with that mode recorded, as a whole file."""
    proc = conftest.run_script(
        ROOT / "scripts/select_checkpoint.py", "--ckpt", "checkpoints/image_best_slowdown.ckpt", "--acting", "both",
        "--loads", "1.5", "--jobsets", "6", "--heuristics", "tetris", "--threads", "1",
        "--write", tmp_path / "shipped.ckpt", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-2])
    modes = {"greedy, not_when_idle": Acting(greedy=True), "sampled, always": Acting(greedy=False)}
    assert set(result["scores"]) == {f"checkpoints/image_best_slowdown.ckpt@{mode}" for mode in modes}
    mode = modes[result["winner"].rpartition("@")[2]]
    _, _, record = load_network(tmp_path / "shipped.ckpt")
    assert record.acting == mode and record.selected["from"] == "checkpoints/image_best_slowdown.ckpt"
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*.tmp"))
    assert load_policy(tmp_path / "shipped.ckpt")[0].acting == mode


def test_select_checkpoint_acting_all_records_the_idle_rule(tmp_path):
    """--acting all also tries each idle rule; the winner's mode is written and read back."""
    proc = conftest.run_script(
        ROOT / "scripts/select_checkpoint.py", "--ckpt", "checkpoints/slots_slowdown.ckpt", "--acting", "all",
        "--loads", "0.9", "--jobsets", "4", "--heuristics", "sjf", "--threads", "1",
        "--write", tmp_path / "shipped.ckpt", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-2])
    # greedy x (while_arriving, not_when_idle, work_conserving, while_frequent) + sampled x (those and always)
    assert len(result["scores"]) == 9
    policy, _ = load_policy(tmp_path / "shipped.ckpt")
    assert str(policy.acting) == result["winner"].rpartition("@")[2]


def test_arrival_inputs_start_at_zero_and_then_change_the_void_score(tmp_path):
    """A slot network warm-started into one with arrival inputs acts exactly as before; once their
    weights move, the void logit depends on how fast jobs have arrived."""
    plain = make_policy(SLOTS, CFG)
    PolicyRecord.of(plain).save(tmp_path / "plain.ckpt")
    spec = PolicySpec(kind="slots", masked=True, hidden=SLOTS.hidden, arrival_inputs=True)
    net = make_policy(spec, CFG)
    warm_start(net, str(tmp_path / "plain.ckpt"))
    # row 0: one arrival at time 0; row 1: three
    jobs = JobSet(arrival=torch.tensor([[0, 5, 9, 9], [0, 0, 0, 5]]), duration=torch.tensor([[2, 2, 2, 2]] * 2),
                  demand=torch.ones(2, 4, 2, dtype=torch.long)).validate(CFG)
    obs = observe(init_state(jobs, CFG), CFG)
    features = net.encode(obs)
    assert torch.allclose(features["arrivals"][:, 0], torch.tensor([0.1, 0.3]) * CFG.horizon / CFG.num_slots)
    assert torch.equal(net(features), plain(plain.encode(obs)))
    with torch.no_grad():
        net.arrivals.weight.normal_()
    moved = net(net.encode(obs))[:, -1] - plain(plain.encode(obs))[:, -1]
    assert bool((moved != 0).all()) and not torch.allclose(moved[0], moved[1])
    with pytest.raises(ConfigError, match="arrival_inputs"):
        PolicySpec(arrival_inputs=True)


def test_a_shipped_policy_drives_the_torchrl_env():
    """env.rollout with a checkpoint's NetworkPolicy (acting while_frequent) plays the same episodes
    as the evaluation's hot path: the same start times, so the same slowdowns."""
    from lightning_sched import ClusterEnv

    policy, policy_cfg = load_policy(ROOT / "checkpoints" / "best_slowdown.ckpt")
    assert policy.acting == Acting(greedy=True, idle_rule="while_frequent", wait_rate=0.11)
    jobs = make_jobsets(DeepRMWorkload(load=0.9), 8, 3)
    env = ClusterEnv(ClusterConfig(observation="compact"), workload=jobs, batch_size=[8])
    td = env.rollout(1000, policy, break_when_all_done=True, trust_policy=True)
    assert bool(td["next", "done"][:, -1].all())
    start = td["next", "job_start"][:, -1].double()
    duration, real = jobs.duration.double(), jobs.duration > 0
    slowdown = ((start + duration - jobs.arrival) / duration.clamp(min=1) * real).sum(1) / real.sum(1)
    assert torch.allclose(slowdown, evaluate(policy, policy_cfg, jobs).episodes["mean_slowdown"])
