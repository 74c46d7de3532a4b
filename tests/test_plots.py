"""The figures read: no legend over the data, curves told apart, plain tick labels, no line across
empty bins, log scales where the values sit near 1; and `figures.py redraw` from a figure's JSON."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import conftest
import torch

from lightning_sched import plots

ROOT = Path(__file__).resolve().parent.parent


def tick_labels(axis) -> list[str]:
    axis.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_gains_breaks_the_line_across_lengths_without_jobs_and_writes_plain_ticks():
    by_length = {"RL": {1: (3.0, 0.2), 2: (2.1, 0.1), 3: (1.8, 0.1), 10: (5.5, 0.3), 11: (5.7, 0.3)},
                 "tetris": {1: (5.9, 0.3), 10: (2.6, 0.2)}}
    fig = plots.gains({1: 3, 10: 40}, {1: 100, 2: 90, 10: 20}, by_length)
    ax = fig.axes[1]
    ys = [list(line.get_ydata()) for line in ax.lines if len(line.get_ydata()) > 1]
    assert any(math.isnan(y) for line in ys for y in line)  # the 3 -> 10 gap is a break, not a segment
    labels = tick_labels(ax.yaxis)
    assert labels and all("times" not in t and "^" not in t for t in labels), labels  # "5", not "5x10^0"
    assert {"2", "3", "5"} <= set(labels)


def test_adaptation_panels_carry_no_legend_and_off_scale_curves_are_named():
    curve = {s: (2.8 + 0.01 * s, 0.05) for s in range(6)}
    curves = {f"panel {k}": {"maml": curve, "mixture": curve, "scratch": {s: (7.5, 0.1) for s in range(6)}}
              for k in range(3)}
    lines = {name: {"tetris": (3.1, 0.1), "random": (10.0, 0.3)} for name in curves}
    fig = plots.adaptation_curves(curves, lines)
    data = [ax for ax in fig.axes if ax.has_data()]
    assert len(data) == 3 and all(ax.get_legend() is None for ax in data)
    spare = [ax for ax in fig.axes if not ax.has_data()]
    assert spare and spare[0].get_legend() is not None  # one legend, in the empty panel
    low, high = data[0].get_ylim()
    assert low < 2.75 and 3.1 < high < 5  # scaled to the compared curves and Tetris
    notes = [t.get_text() for t in data[0].texts]
    assert notes == ["above: scratch 7.50, random 10.00"]
    styles = {(c.lines[0].get_linestyle(), c.lines[0].get_marker()) for c in data[0].containers
              if c.get_label() in ("maml", "mixture")}
    assert len(styles) == 2  # told apart without colour


def test_trace_figure_shows_the_excess_over_1_and_the_tail_on_log_scales():
    values = {"as recorded": {"tetris": (1.05, 0.01), "random": (6.5, 1.0)}, "x2": {"tetris": (7.3, 1.0)}}
    tails = {"tetris": torch.tensor([1.0] * 95 + [2.0, 3.0, 5.0, 9.0, 20.0]), "random": torch.rand(50) * 20 + 1}
    fig = plots.trace_heuristics(values, tails)
    bars, tail = fig.axes[:2]
    assert bars.get_yscale() == "log" and tail.get_yscale() == "log" and tail.get_xscale() == "log"
    heights = sorted(round(p.get_height(), 3) for p in bars.patches if not math.isnan(p.get_height()))
    assert heights == [0.05, 5.5, 6.3]  # mean - 1
    assert bars.get_legend() is None and tail.get_legend() is None and len(fig.legends) == 1


def test_redraw_an_adaptation_figure_from_its_json_and_refuse_another_json(tmp_path):
    source = ROOT / "docs" / "figures" / "adaptation_broad_nasa.json"
    out = tmp_path / "again.png"
    proc = conftest.run_script(ROOT / "scripts" / "figures.py", "redraw", source, "--out", out, "--threads", "1",
                               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["curves"] == json.loads(source.read_text())["curves"] and out.stat().st_size > 0
    assert written["redrawn_with"].startswith("python scripts/figures.py redraw")
    other = ROOT / "docs" / "figures" / "gains.json"
    proc = conftest.run_script(ROOT / "scripts" / "figures.py", "redraw", other, "--out", tmp_path / "x.png",
                               "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: {other}: redraw reads the JSON of learning_curve, adaptation or headroom (a 'curve' or 'curves' "
        "entry), not this one"]


def test_redraw_names_a_hand_edited_json_it_cannot_draw(tmp_path, monkeypatch):
    import pytest
    from conftest import script_main

    from lightning_sched import ConfigError

    for name, data, what in (("r1", {"curve": {}}, "KeyError 'eval_step'"),
                             ("r2", {"curve": 5, "heuristics": {}}, "TypeError"),
                             ("r5", {"curves": {}, "held_out": [], "heuristics": {}}, "ZeroDivisionError")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ConfigError, match=f"{name}.json: not a figure's JSON as figures.py writes it \\({what}"):
            monkeypatch.setattr(sys, "argv", ["figures.py", "redraw", str(path), "--out", str(tmp_path / "x.png")])
            script_main("figures")()  # reads sys.argv
    assert not list(tmp_path.glob("*.png"))
    source = tmp_path / "curve.json"  # its redraw, named after it, would replace it
    source.write_text((ROOT / "docs" / "figures" / "adaptation_broad_nasa.json").read_text())
    for argv, message in ((["redraw", str(source), "--out", str(tmp_path / "curve.png"), "--overwrite"],
                           "curve.json is one of the script's inputs"),
                          (["cdf", "--loads", "0.9", "0.9", "--jobsets", "2"], "--loads 0.9 is given twice")):
        monkeypatch.setattr(sys, "argv", ["figures.py", *argv])
        with pytest.raises(ConfigError, match=message):
            script_main("figures")()


def test_the_queue_figure_marks_each_panels_best_rule_which_the_differences_are_against():
    from matplotlib.colors import to_rgb

    panels = {"off": {"fcfs": torch.tensor([30.0, 40.0]), "sjf": torch.tensor([9.0, 11.0]),
                      "f1": torch.tensor([5.0, 7.0]), "run/queue.ckpt": torch.tensor([6.0, 6.0])},
              "easy": {"fcfs": torch.tensor([3.0, 4.0]), "sjf": torch.tensor([2.0, 2.0]),
                       "f1": torch.tensor([2.5, 2.5])}}
    fig = plots.queue_sequences(panels)
    for ax, best in zip(fig.axes, ("f1", "sjf")):
        bars = zip(ax.get_xticklabels(), ax.patches)
        colours = {label.get_text(): to_rgb(bar.get_facecolor()) for label, bar in bars}
        assert colours[best] == to_rgb("tab:blue") and colours["fcfs"] == to_rgb("tab:gray")
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["best rule"]
    assert to_rgb(fig.axes[0].patches[3].get_facecolor()) == to_rgb("tab:red")  # a checkpoint



def test_a_reference_lines_ci_is_a_band_and_the_sites_figure_reads_the_best_rules(tmp_path):
    curves = {"site": {"maml": {0: (3.0, 0.1), 5: (2.9, 0.1)}}}
    banded = plots.adaptation_curves(curves, {"site": {"f1 (best rule)": (3.2, 0.3)}})
    bare = plots.adaptation_curves(curves, {"site": {"f1 (best rule)": (3.2, 0.0)}})
    spans = [list(ax.patches) for fig in (banded, bare) for ax in fig.axes if ax.has_data()]
    assert len(spans[0]) == 1 and spans[1] == []
    sys.path.insert(0, str(ROOT / "scripts" / "experiments"))
    try:
        from queue_sites_figure import best_rule_ci
    finally:
        sys.path.remove(str(ROOT / "scripts" / "experiments"))
    out = tmp_path / "adapt.txt"  # adapt.py --env queue's rules table above its JSON lines
    out.write_text("  fcfs        415.89 ±   54.31\n  f1           53.33 ±    7.61  (best rule)\n{\"step\": 0}\n")
    assert best_rule_ci(str(out)) == 7.61
    out.write_text("{\"step\": 0}\n")
    assert best_rule_ci(str(out)) == 0.0
