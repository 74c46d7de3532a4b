"""lightning_sched.analysis on tiny jobsets: sweeps by load, the table against the best heuristic,
the per-job and by-length slowdown, held-out workload runs, a run's logged curves, and the rule
that picks a candidate (finishers first, then best)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_sched import ClusterConfig, DeepRMWorkload, analysis, seeds
from lightning_sched.evaluation import EvalResult, compare, make_jobsets
from lightning_sched.heuristics import make_heuristic
from lightning_sched.jobs import JobSet
from lightning_sched.learning.adaptation import AdaptationSettings
from lightning_sched.policies.acting import SAMPLED, Acting, acting_modes
from lightning_sched.policies.networks import PolicySpec, make_policy

CFG = ClusterConfig(observation="none")
CKPTS = Path(__file__).resolve().parent.parent / "checkpoints"
TINY = DeepRMWorkload(load=1.1, simu_len=10)


def heuristics(cfg: ClusterConfig, names=("tetris", "sjf", "packer")) -> dict:
    return {h: make_heuristic(h, cfg) for h in names}


def result(job_slowdown, job_duration, mean_slowdown=0.0) -> EvalResult:
    """An EvalResult of known per-job values: N jobsets x 1 episode."""
    slowdown = torch.tensor(job_slowdown, dtype=torch.double)
    return EvalResult(episodes={}, job_slowdown=slowdown, job_duration=torch.tensor(job_duration),
                      num_jobsets=slowdown.shape[0], episodes_per_jobset=1, steps=0,
                      summary={"mean_slowdown": mean_slowdown})


def test_by_load_gives_each_load_jobsets_of_its_own_and_repeats():
    loads = [0.5, 1.3]
    first = list(analysis.by_load(heuristics(CFG), CFG, loads, 3, offset=100))
    again = list(analysis.by_load(heuristics(CFG), CFG, loads, 3, offset=100))
    assert [load for load, _ in first] == loads
    assert analysis.sweep_seeds(100, 2) == [seeds.evaluation(100), seeds.evaluation(101)]
    for (_, case), (_, same) in zip(first, again):
        assert list(case.results) == ["tetris", "sjf", "packer"] and case.results["sjf"].num_jobsets == 3
        assert case.mean_ci("tetris") == same.mean_ci("tetris")
    alone = compare(heuristics(CFG), CFG, make_jobsets(DeepRMWorkload(load=1.3), 3, seeds.evaluation(101)))
    assert first[1][1].mean_ci("packer") == alone.mean_ci("packer")  # the 2nd load's seed
    bigger = ClusterConfig(observation="none", resource_units=20, max_job_units=20)
    (_, scaled), = analysis.by_load(heuristics(bigger), bigger, [0.9], 2, offset=0, scaled=True)
    jobs = make_jobsets(DeepRMWorkload.for_cluster(bigger, load=0.9), 2, seeds.evaluation(0))
    assert scaled.mean_ci("tetris") == compare(heuristics(bigger), bigger, jobs).mean_ci("tetris")


def test_versus_best_pairs_a_policy_with_the_best_heuristic():
    case = compare({**heuristics(CFG), "RL": make_heuristic("edf", CFG)}, CFG, make_jobsets(TINY, 4, 7))
    row = analysis.versus_best(case, "RL", ["tetris", "sjf", "packer"])
    means = {h: case.mean_ci(h)[0] for h in ("tetris", "sjf", "packer")}
    assert row["best_heuristic"] == min(means, key=means.get) and set(row) == {"best_heuristic",
                                                                            "slowdown_minus_best", "ci95"}
    assert row["slowdown_minus_best"] == pytest.approx(case.mean_ci("RL")[0] - means[row["best_heuristic"]])
    full = analysis.versus_best(case, "RL", ["tetris", "sjf"], slo=True)
    assert full["ratio_to_best"] == pytest.approx(case.mean_ci("RL")[0] / case.mean_ci(full["best_heuristic"])[0])
    assert full["slo_minus_sjf"] == case.minus("RL", "sjf", "slo_hit_rate") and "slo_minus_packer" not in full
    assert full["best_slo_heuristic"] in ("tetris", "sjf")
    assert analysis.table(case, ["mean_slowdown"])["RL"] == {"mean_slowdown": case.mean_ci("RL")}


def test_sweep_tables_every_policy_and_a_learned_one_against_the_best_heuristic():
    policies, seen = {**heuristics(CFG), "RL": make_heuristic("edf", CFG)}, []
    metrics = ("mean_slowdown", "slo_hit_rate")
    sweep = analysis.sweep(policies, CFG, [0.5, 1.3], 2, 100, metrics, learned=["RL"], heuristics=["tetris", "sjf"],
                           report=lambda load, case, rows: seen.append((load, rows)))
    cases = dict(analysis.by_load(policies, CFG, [0.5, 1.3], 2, 100))
    assert list(sweep.values) == list(policies) and sweep.values["RL"][1.3] == analysis.table(cases[1.3], metrics)["RL"]
    assert sweep.metric("slo_hit_rate")["sjf"] == {load: case.mean_ci("sjf", "slo_hit_rate") for load, case in
                                                   cases.items()}
    assert sweep.versus_best["RL"]["1.3"] == analysis.versus_best(cases[1.3], "RL", ["tetris", "sjf"])
    assert seen == [(0.5, {"RL": sweep.versus_best["RL"]["0.5"]}), (1.3, {"RL": sweep.versus_best["RL"]["1.3"]})]


def test_slowdown_quantiles_and_by_length_of_known_jobs():
    r = result([[1.0, 3.0, 2.0], [2.0, 4.0, math.nan]], [[1, 1, 5], [1, 5, 0]], mean_slowdown=2.5)
    values, stats = analysis.slowdown_quantiles(r)
    assert sorted(values.tolist()) == [1.0, 2.0, 2.0, 3.0, 4.0]
    assert stats["jobs"] == 5 and stats["share_slowdown_le_2"] == pytest.approx(3 / 5) and stats["median"] == 2.0
    assert stats["mean_slowdown"] == 2.5 and stats["p99"] <= 4.0
    by_length = analysis.slowdown_by_length(r)
    assert list(by_length) == [1, 5]
    assert by_length[1][0] == pytest.approx(2.0)  # jobset means 2 and 2
    assert by_length[5][0] == pytest.approx(3.0)  # jobset means 2 and 4
    # a jobset without a job of a length is left out of that length's mean
    lonely = analysis.slowdown_by_length(result([[6.0, 1.0], [1.0, 1.0]], [[3, 1], [1, 1]]))
    assert lonely[3][0] == 6.0 and math.isnan(lonely[3][1])


def test_offered_lengths_counts_real_jobs_only():
    jobs = JobSet(arrival=torch.zeros(2, 3, dtype=torch.long), duration=torch.tensor([[2, 1, 2], [1, 0, 0]]),
                  demand=torch.ones(2, 3, 2, dtype=torch.long))
    assert analysis.offered_lengths(jobs) == {2: 2, 1: 2}


def test_withholding_counts_the_fitting_jobs_of_a_void():
    def policy(obs):  # row 0 voids, row 1 schedules slot 0
        obs["action"] = torch.tensor([CFG.num_slots, 0])
        return obs

    watching = analysis.Withholding(policy, CFG)
    obs = {"slot_offset": torch.tensor([[0, 0, 3], [0, 0, 0]]), "slot_duration": torch.tensor([[4, 4, 9], [7, 7, 7]])}
    assert watching(obs)["action"].tolist() == [CFG.num_slots, 0]
    watching(obs)
    assert watching.counts == {4: 4}  # two fitting jobs of length 4, twice; the later one (offset 3) and row 1 not


def test_held_out_workloads_measure_the_heuristics_on_unseen_jobsets():
    extra = [("tiny", CFG, TINY, DeepRMWorkload(load=1.5, simu_len=10))]
    panels = list(analysis.held_out_workloads(CFG, lambda c: heuristics(c, ("tetris", "random")), 2, "mean_slowdown",
                                              extra=extra))
    assert [p.label for p in panels] == [*analysis.HELD_OUT, "tiny"]
    last = panels[-1]
    assert last.workload is TINY and last.eval_jobs.batch_size == 2 and set(last.heuristics) == {"tetris", "random"}
    jobs = make_jobsets(DeepRMWorkload(load=1.5, simu_len=10), 2, seeds.evaluation())
    assert torch.equal(last.eval_jobs.duration, jobs.duration)
    assert last.heuristics["tetris"] == compare(heuristics(CFG, ("tetris",)), CFG, jobs).mean_ci("tetris")


def test_adapt_on_held_out_records_curves_and_the_first_step_past_a_heuristic():
    torch.manual_seed(0)
    net = make_policy(PolicySpec(hidden=(8,)), CFG)
    panel = analysis.HeldOut("tiny", CFG, TINY, make_jobsets(TINY, 2, 5), {"tetris": (1e9, 0.0), "never": (0.0, 0.0)})
    seen = []
    settings = dict.fromkeys("ab", AdaptationSettings(steps=2, jobsets=1, episodes=2))
    before = [p.detach().clone() for p in net.parameters()]
    starts = {"a": (net, SAMPLED), "b": (net, Acting(greedy=True))}
    runs = analysis.adapt_on_held_out([panel], lambda c: starts, settings, "mean_slowdown", {0, 2}, reference="tetris",
                                      report=lambda p, name, curve, first: seen.append((p.label, name, first)))
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # a copy adapts, not the start
    assert list(runs.curves["tiny"]["a"]) == [0, 2] and runs.first_step["tiny"] == {"a": 0, "b": 0}
    assert runs.heuristics["tiny"] is panel.heuristics and runs.clusters["tiny"] == CFG.to_dict()
    assert seen == [("tiny", "a", 0), ("tiny", "b", 0)]
    never = analysis.adapt_on_held_out([panel], lambda c: {"a": (net, SAMPLED)}, settings, "mean_slowdown", {1},
                                       reference="never")
    assert list(never.curves["tiny"]["a"]) == [1, 2] and never.first_step["tiny"] == {"a": None}
    assert never.curves["tiny"]["a"][2] == runs.curves["tiny"]["a"][2]  # the same seed, the same adaptation
    summaries = [{"step": 0, "m": 3.0, "m_ci95": 0.1}, {"step": 1, "m": 2.0, "m_ci95": 0.2}]
    assert analysis.curve(summaries, "m") == {0: (3.0, 0.1), 1: (2.0, 0.2)}
    assert analysis.first_step_at_or_below(summaries, "m", 2.5) == 1
    assert analysis.first_step_at_or_below(summaries, "m", 1.0) is None


def test_adaptation_starts_put_checkpoints_and_a_fresh_network_on_any_cluster():
    starts = analysis.AdaptationStarts({"meta": str(CKPTS / "maml.ckpt"), "slots": str(CKPTS / "slots_slowdown.ckpt")},
                                       objective="completion_time", fresh="scratch", seed=3)
    assert starts.cfg.objective == "completion_time"
    home = starts.on(starts.cfg)
    assert list(home) == ["meta", "slots", "scratch"] and home["meta"][0] is starts.loaded["meta"][0]
    assert home["scratch"][1] == home["meta"][1] == starts.loaded["meta"][2].acting  # acts as the first one
    again = starts.on(starts.cfg)["scratch"][0]
    assert all(torch.equal(a, b) for a, b in zip(home["scratch"][0].parameters(), again.parameters()))  # seeded
    settings = starts.settings(4, 2, 3, lr=0.5, optimizer="adam")
    inner = starts.loaded["meta"][2].adaptation
    assert settings["meta"].lr == inner["lr"] and settings["meta"].optimizer == inner["optimizer"]  # its own loop
    assert (settings["slots"].lr, settings["slots"].optimizer) == (0.5, "adam")
    assert settings["scratch"] == settings["meta"] and settings["slots"].steps == 4 and settings["slots"].episodes == 3
    slots = analysis.AdaptationStarts({"slots": str(CKPTS / "slots_slowdown.ckpt")})
    bigger = slots.cfg.replace(num_slots=5, resource_units=20, max_job_units=20)
    net, acting = slots.on(bigger)["slots"]
    assert net is not slots.loaded["slots"][0] and acting == slots.loaded["slots"][2].acting  # reloaded on its size


def test_logged_curves_take_the_last_row_of_a_repeated_step(tmp_path):
    first, resumed = tmp_path / "a.csv", tmp_path / "b.csv"
    header = "step,perf/iteration_s,eval/mean_slowdown,eval/slo_hit_rate,eval/tetris/mean_slowdown," \
             "train/mean_return,train/mean_slowdown,train/max_return\n"
    first.write_text(header + "0,2.0,,,,-9,4,-8\n1,3.0,,,,-8,3.5,-7\n1,,5.0,0.4,3.5,,,\n")
    resumed.write_text(header + "1,1.0,,,,-7,3,-6\n1,,4.0,0.5,3.4,,,\n2,4.0,,,,-6,2.5,-5\n")
    rows = analysis.read_metrics([first, resumed])
    assert len(rows) == 6 and [r["step"] for r in analysis.last_per_step(rows, "perf/iteration_s")] == ["0", "1", "2"]
    curve = analysis.validation_curve(rows)
    assert curve == {"iteration": [2], "wall_s": [3.0], "slowdown": [4.0], "slo_hit_rate": [0.5],
                     "median_iteration_s": 2.0}
    assert analysis.heuristic_lines(rows, ["tetris", "sjf"]) == {"tetris": 3.4}
    learning = analysis.learning_curve(rows)
    assert learning["eval_step"] == [2] and learning["train_step"] == [1, 2, 3]  # iterations done
    assert learning["mean_return"] == [-9.0, -7.0, -6.0] and learning["iteration_s"] == [2.0, 1.0, 4.0]


def test_trace_case_records_the_split_and_every_policy():
    jobs = make_jobsets(TINY, 2, 3)
    case = compare(heuristics(CFG, ("tetris",)), CFG, jobs)
    carried = {"windows": 2, "running": 3, "running_over_capacity": 1, "waiting": 0}
    report = SimpleNamespace(split_load=[0.5], split_steps=10, split_seconds=600.0, split_jobs=20,
                             window_starts=[0, 5], max_jobs=9, path="log.swf", start_state="log", carried=carried)
    record = analysis.trace_case(report, jobs, case)
    assert record["split_load"] == [0.5] and record["jobs_in_jobsets"] == int(jobs.num_jobs.sum())
    assert record["start_state"] == "log" and record["carried"] == carried
    assert record["results"]["tetris"]["mean_slowdown"] == list(case.mean_ci("tetris"))
    assert set(record["results"]["tetris"]) == {*analysis.METRICS, "unfinished_jobs"}


def test_finishers_first_then_the_best_score():
    scores, unfinished = {"a": 1.0, "b": 2.0, "c": 2.0}, {"a": 3, "b": 0, "c": 0}
    assert analysis.finishers_first(scores, unfinished, higher_is_better=False) == "b"  # a leaves jobs; b first on ties
    assert analysis.finishers_first(scores, unfinished, higher_is_better=True) == "b"
    assert analysis.finishers_first(scores, {"a": 3, "b": 1, "c": 2}, higher_is_better=False) == "a"  # none finish
    assert analysis.score_against(3.0, 2.0, "mean_slowdown") == 1.5
    assert analysis.score_against(0.6, 0.5, "slo_hit_rate") == pytest.approx(10.0)


@pytest.mark.parametrize("metric,score", [("mean_slowdown", 1.0), ("slo_hit_rate", 0.0)])
def test_select_by_worst_load_scores_against_the_best_heuristic(metric, score):
    seen = []
    selection = analysis.select_by_worst_load(lambda: heuristics(CFG, ("tetris", "random")), CFG, ["tetris"],
                                              [0.5, 1.5], 2, seeds.SELECTION, metric,
                                              report=lambda load, best, s: seen.append((load, s)))
    assert selection.scores["tetris"] == {0.5: score, 1.5: score}  # tetris against itself
    assert [load for load, _ in seen] == [0.5, 1.5] and seen[1][1] == {n: s[1.5] for n, s in selection.scores.items()}
    pick = max if metric == "mean_slowdown" else min
    assert selection.worst == {n: pick(s.values()) for n, s in selection.scores.items()}
    assert selection.winner == "tetris"  # random's worst load is worse than tetris against itself
    assert selection.unfinished == {"tetris": 0, "random": 0}


def test_select_acting_picks_the_best_mode_that_finishes():
    torch.manual_seed(0)
    net = make_policy(PolicySpec(hidden=(8,)), CFG)
    acting, scores = analysis.select_acting(net, CFG, make_jobsets(TINY, 2, seeds.SELECTION))
    assert acting in acting_modes() and list(scores) == [str(mode) for mode in acting_modes()]
    assert scores[str(acting)] == min(scores.values())  # every mode finishes here
