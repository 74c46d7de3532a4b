"""One function per figure, pure matplotlib; each returns the Figure (the caller saves or logs it)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

if TYPE_CHECKING:
    import torch

STYLE = {"tetris": ("tab:blue", "s"), "sjf": ("tab:orange", "^"), "packer": ("tab:green", "v"),
         "random": ("tab:gray", "x"), "edf": ("tab:purple", "d")}


_LEARNED_COLORS = ("black", "tab:red", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
# the adaptation figures' starting points: (colour, marker, line style), told apart without colour too
ADAPTATION_STYLE = {"maml": ("tab:red", "o", "-"), "mixture": ("tab:cyan", "s", "--"),
                    "slots": ("tab:brown", "^", "-."), "scratch": ("black", "x", ":")}
_learned: dict[str, str] = {}


def _style(name: str):
    """Fixed colours for the heuristics; learned policies get the next free colour of their own."""
    if name in STYLE:
        return STYLE[name]
    if name not in _learned:
        _learned[name] = _LEARNED_COLORS[len(_learned) % len(_LEARNED_COLORS)]
    return _learned[name], "o"


def _plain_log_ticks(axis) -> None:
    """Log-scale ticks written as plain numbers (not "6x10^0"), no minor labels: at 1, 2, 5 x 10^k,
    or at every integer multiple of 10^k when the axis spans less than a decade. Call after plotting."""
    low, high = sorted(axis.get_view_interval())
    narrow = low > 0 and high / low < 10
    axis.set_major_locator(LogLocator(subs=tuple(range(1, 10)) if narrow else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _with_gaps(xs: list[int], *columns: list[float]) -> tuple[list[float], ...]:
    """`xs` (sorted integers) and `columns` with a NaN point inserted where xs skips a value, so a
    line breaks there instead of crossing the empty range."""
    out = [[] for _ in range(1 + len(columns))]
    for i, x in enumerate(xs):
        if i and x > xs[i - 1] + 1:
            for column in out:
                column.append(float("nan"))
        for column, values in zip(out, (xs, *columns)):
            column.append(values[i])
    return tuple(out)


def _lines_vs_load(ax, results: dict[str, dict[float, tuple[float, float]]]) -> None:
    for name, points in results.items():
        loads = sorted(points)
        color, marker = _style(name)
        ax.errorbar(loads, [points[load][0] for load in loads], yerr=[points[load][1] for load in loads], label=name,
                    color=color, marker=marker, capsize=3, linewidth=1.5 if name in STYLE else 2.5)
    ax.grid(alpha=0.3)


def slowdown_vs_load(results: dict[str, dict[float, tuple[float, float]]], title: str = "",
                     ylabel: str = "average job slowdown"):
    """results: {scheme: {load: (mean, 95% CI half-width)}} -> DeepRM Figure 4 style (any metric)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _lines_vs_load(ax, results)
    ax.set_xlabel("average cluster load (offered load per resource)")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Mean slowdown vs load (95% CI over jobsets)")
    ax.legend()
    fig.tight_layout()
    return fig


def by_cluster_size(panels: dict[str, dict[str, dict[float, tuple[float, float]]]], title: str = ""):
    """panels: {cluster label: {scheme: {load: (mean, ci)}}}: one panel of slowdown vs load per cluster."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, (label, results) in zip(axes[0], panels.items()):
        _lines_vs_load(ax, results)
        ax.set_title(label)
        ax.set_xlabel("load")
    axes[0][0].set_ylabel("average job slowdown")
    axes[0][-1].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def learning_curve(iterations, slowdown, reference: dict[str, float], mean_return=None, max_return=None, title="",
                   train=None, reward_iterations=None):
    """Slowdown per iteration with heuristic lines; optionally mean and max total reward (Figure 5).

    iterations, slowdown: the policy's validation curve; train: optional (iterations, slowdown) of
    the training episodes (sampled actions); reward_iterations: x of the reward curves (default
    `iterations`)."""
    panels = 2 if mean_return is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    ax = axes[0][0]
    if train is not None:
        ax.plot(train[0], train[1], label="policy, training episodes (sampled)", color="tab:red", alpha=0.5,
                linewidth=0.8)
    ax.plot(iterations, slowdown, label="policy, validation jobsets", color="black", marker=".")
    for name, value in reference.items():
        color, _ = _style(name)
        ax.axhline(value, linestyle="--", color=color, label=name)
    ax.set_xlabel("iterations done")
    ax.set_ylabel("mean slowdown")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if mean_return is not None:
        ax = axes[0][1]
        x = iterations if reward_iterations is None else reward_iterations
        ax.plot(x, mean_return, label="mean total reward")
        if max_return is not None:
            ax.plot(x, max_return, label="max total reward")
        ax.set_xlabel("iterations done")
        ax.set_ylabel("total reward")
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def bars(values: dict[str, dict[str, tuple[float, float]]], metric_labels: dict[str, str], title: str = ""):
    """Grouped bars: {scheme: {metric: (mean, ci)}}, one panel per metric (objectives figure)."""
    metrics = list(metric_labels)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.5), squeeze=False)
    names = list(values)
    for ax, metric in zip(axes[0], metrics):
        means = [values[n][metric][0] for n in names]
        cis = [values[n][metric][1] for n in names]
        ax.bar(range(len(names)), means, yerr=cis, capsize=3, color=[_style(n)[0] or "black" for n in names])
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(metric_labels[metric])
        ax.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _plot_cdf(ax, job_slowdowns: dict[str, "torch.Tensor"], xlabel: str = "job slowdown", tail: bool = False,
              legend: bool = True) -> None:
    """Empirical CDF of per-job slowdowns per scheme on `ax` (NaN = padding, ignored); with `tail`,
    the share of jobs above each slowdown on log-log axes instead, where a workload whose jobs
    mostly run at once (slowdown 1) still shows how the schemes differ on the rest."""
    import torch

    for name, values in job_slowdowns.items():
        v = values[~torch.isnan(values)].sort().values
        below = torch.arange(1, len(v) + 1) / len(v)
        if tail:  # P(slowdown > x), drawn where it is positive
            above = 1 - below
            keep = above > 0
            ax.step(v[keep].numpy(), above[keep].numpy(), where="post", label=name, color=_style(name)[0])
        else:
            ax.plot(v.numpy(), below.numpy(), label=name, color=_style(name)[0])
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    if tail:
        ax.set_yscale("log")
        _plain_log_ticks(ax.xaxis)
        ax.set_ylabel("share of jobs with a larger slowdown")
    else:
        ax.set_ylabel("CDF")
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize="small")


def trace_heuristics(values: dict[str, dict[str, tuple[float, float]]],
                     job_slowdowns: dict[str, "torch.Tensor"] | None = None,
                     ylabel: str = "mean job slowdown", title: str = ""):
    """Schemes on a replayed trace: {setting: {scheme: (mean, 95% CI half-width)}} as grouped bars
    (one group per setting, e.g. as recorded and time-compressed), and optionally the tail of the
    per-job slowdowns of one setting ({scheme: DoubleTensor of job slowdowns, NaN ignored}) beside
    it. A slowdown is at least 1 and a light log's means sit just above it, so the bars show the
    mean minus 1 on a log scale: 0.05 and 0.1 differ as much as 5 and 10."""
    panels = 2 if job_slowdowns else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.4), squeeze=False)
    ax = axes[0][0]
    settings = list(values)
    schemes = list(dict.fromkeys(name for points in values.values() for name in points))
    width = 0.8 / max(1, len(schemes))
    for i, name in enumerate(schemes):
        xs = [g + (i - (len(schemes) - 1) / 2) * width for g in range(len(settings))]
        excess = [values[s].get(name, (float("nan"), 0.0))[0] - 1 for s in settings]
        cis = [values[s].get(name, (float("nan"), 0.0))[1] for s in settings]
        # the whisker's lower end stays above 0 on the log scale
        low = [min(c, 0.95 * e) if e > 0 else 0.0 for e, c in zip(excess, cis)]
        ax.bar(xs, excess, width, yerr=[low, cis], capsize=2, label=name, color=_style(name)[0])
    ax.set_xticks(range(len(settings)), settings)
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_ylabel(f"{ylabel} - 1 (log scale)")
    ax.grid(alpha=0.3, axis="y")
    if job_slowdowns:
        _plot_cdf(axes[0][1], job_slowdowns, f"job slowdown, {settings[0]}", tail=True, legend=False)
    # one legend for both panels, below them: it covers no bar or curve
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize="small", frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(labels) - 1) // 4), 1, 1))
    return fig


def gains(withheld: dict[int, int], offered: dict[int, int], by_length: dict[str, dict[int, tuple[float, float]]],
          title: str = ""):
    """Where a learned policy's gains come from (DeepRM section 5.3): left, the share of jobs of each
    length among those the policy left waiting while they fit now ({length: count}) against their
    share among all jobs; right, mean slowdown by job length per scheme ({scheme: {length: (mean, ci)}})."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    ax = axes[0]
    lengths = sorted(set(withheld) | set(offered))
    total_w, total_o = max(1, sum(withheld.values())), max(1, sum(offered.values()))
    width = 0.4
    ax.bar([length - width / 2 for length in lengths], [withheld.get(length, 0) / total_w for length in lengths], width,
           label=f"withheld while fitting ({total_w} job-decisions)", color="black")
    ax.bar([length + width / 2 for length in lengths], [offered.get(length, 0) / total_o for length in lengths], width,
           label=f"all jobs ({total_o})", color="tab:gray")
    ax.set_xlabel("job length (steps)")
    ax.set_ylabel("share")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    ax = axes[1]
    for name, points in by_length.items():
        ls = sorted(points)
        color, marker = _style(name)
        # no line across lengths without jobs (DeepRM's mix has none between its short and long ones)
        xs, means, cis = _with_gaps(ls, [points[length][0] for length in ls], [points[length][1] for length in ls])
        ax.errorbar(xs, means, yerr=cis, label=name, color=color or "black", marker=marker, capsize=2)
    ax.set_xlabel("job length (steps)")
    ax.set_ylabel("mean job slowdown (log scale)")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def adaptation_curves(curves: dict[str, dict[str, dict[int, tuple[float, float]]]],
                      lines: dict[str, dict[str, tuple[float, float]]], ylabel: str = "mean slowdown", title: str = ""):
    """One panel per held-out workload: {workload: {method: {step: (mean, ci)}}} as curves over
    adaptation steps, {workload: {heuristic: (mean, ci)}} as horizontal lines (a CI above 0 as a band)."""
    names = list(curves)
    cols = min(2, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False)
    methods = list(dict.fromkeys(m for panel in curves.values() for m in panel))
    for ax, name in zip(axes.flat, names):
        for k, method in enumerate(methods):
            points = curves[name].get(method)
            if not points:
                continue
            color, marker, line = ADAPTATION_STYLE.get(method, (_style(method)[0], "o", "-"))
            steps = sorted(points)
            # curves that overlap stay apart: each method's points a little to the side, CIs as whiskers
            xs = [s + (k - (len(methods) - 1) / 2) * 0.06 for s in steps]
            ax.errorbar(xs, [points[s][0] for s in steps], yerr=[points[s][1] for s in steps], label=method,
                        color=color, marker=marker, linestyle=line, markersize=4, capsize=2, linewidth=1.3)
        for h, (value, ci) in lines[name].items():
            ax.axhline(value, linestyle=(0, (4, 3)), linewidth=1, color=_style(h)[0], label=h)
            if ci > 0:  # its CI as a faint band: a curve inside it is not told apart from the line
                ax.axhspan(value - ci, value + ci, color=_style(h)[0], alpha=0.08, linewidth=0)
        _focus(ax, curves[name], lines[name])
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("adaptation steps")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    spare = list(axes.flat)[len(names):]
    for ax in spare:
        ax.axis("off")
    # one legend for every panel, in a spare panel or below them: it covers no curve
    by_label = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            by_label.setdefault(label, handle)
    if spare:
        spare[0].legend(by_label.values(), by_label.keys(), loc="center", fontsize="medium", frameon=False)
    else:
        fig.legend(by_label.values(), by_label.keys(), loc="lower center", ncol=min(len(by_label), 7),
                   fontsize="small", frameon=False)
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout(rect=(0, 0 if spare else 0.05, 1, 1))
    return fig


# far from the policies being compared (a fresh network, random actions): named at the panel's edge
# when they would stretch its scale so far that the compared curves merge
OFF_FOCUS = ("scratch", "random")


def _focus(ax, curves: dict[str, dict[int, tuple[float, float]]], lines: dict[str, tuple[float, float]]) -> None:
    """Scale `ax` to the adapted curves and the heuristic lines but OFF_FOCUS's; those outside
    the range are written at its top or bottom with their values."""
    near = [m + sign * c for method, points in curves.items() if method not in OFF_FOCUS
            for m, c in points.values() for sign in (-1, 1)]
    near += [value for h, (value, _) in lines.items() if h not in OFF_FOCUS]
    if not near:
        return
    lo, hi = min(near), max(near)
    pad = 0.12 * (hi - lo) + 0.02 * abs(hi)
    lo, hi = lo - pad, hi + pad
    ax.set_ylim(lo, hi)
    outside = {**{m: [v[0] for v in p.values()] for m, p in curves.items()}, **{h: [v[0]] for h, v in lines.items()}}
    notes = {"above": [], "below": []}
    for name, values in outside.items():
        if min(values) > hi or max(values) < lo:
            span = f"{min(values):.2f}" + (f"-{max(values):.2f}" if max(values) - min(values) >= 0.005 else "")
            notes["above" if min(values) > hi else "below"].append(f"{name} {span}")
    for side, items in notes.items():
        if items:
            ax.text(0.99, 0.98 if side == "above" else 0.02, f"{side}: " + ", ".join(items), transform=ax.transAxes,
                    ha="right", va="top" if side == "above" else "bottom", fontsize="x-small", color="dimgray")


def ablation(values: dict[str, dict[float, dict[str, tuple[float, float]]]], metric_labels: dict[str, str],
             title: str = ""):
    """Grouped bars, one panel per metric: {variant: {load: {metric: (mean, ci)}}}, one group per
    load, one bar per variant (heuristics included as variants), 95% CI whiskers."""
    names = list(values)
    loads = sorted(next(iter(values.values())))
    metrics = list(metric_labels)
    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 4.2), squeeze=False)
    width = 0.8 / len(names)
    cmap = plt.get_cmap("tab20")
    for ax, metric in zip(axes[0], metrics):
        for i, name in enumerate(names):
            x = [j + (i - (len(names) - 1) / 2) * width for j in range(len(loads))]
            means = [values[name][load][metric][0] for load in loads]
            cis = [values[name][load][metric][1] for load in loads]
            color = STYLE[name][0] if name in STYLE else cmap(i % 20)
            ax.bar(x, means, width, yerr=cis, capsize=2, label=name, color=color,
                   hatch="//" if name in STYLE else None, edgecolor="white" if name in STYLE else None)
        ax.set_xticks(range(len(loads)), [f"load {load:g}" for load in loads])
        ax.set_ylabel(metric_labels[metric])
        ax.grid(alpha=0.3, axis="y")
    axes[0][-1].legend(fontsize="x-small", bbox_to_anchor=(1.02, 1), loc="upper left")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def cdf_panels(panels: dict[str, dict[str, "torch.Tensor"]], title: str = ""):
    """Per-job slowdown CDFs side by side: {panel title: {scheme: job slowdowns (NaN ignored)}}."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (name, job_slowdowns) in zip(axes[0], panels.items()):
        _plot_cdf(ax, job_slowdowns)
        ax.axvline(2.0, color="gray", linewidth=0.8, linestyle=":")
        ax.set_title(name, fontsize="medium")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def recipe_curves(curves: dict[str, dict[str, list[float]]], reference: dict[str, float], title: str = ""):
    """Validation slowdown of training runs against iterations and against wall time:
    {run: {"iteration": [...], "wall_s": [...], "slowdown": [...]}}, heuristic lines in `reference`."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), squeeze=False)
    for ax, x_key, xlabel in ((axes[0][0], "iteration", "iteration"), (axes[0][1], "wall_s", "training wall time (s)")):
        for name, curve in curves.items():
            ax.plot(curve[x_key], curve["slowdown"], marker=".", label=name, color=_style(name)[0])
        for name, value in reference.items():
            ax.axhline(value, linestyle="--", color=_style(name)[0], label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean slowdown, validation jobsets")
        ax.grid(alpha=0.3)
    axes[0][1].legend(fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def queue_sequences(panels: dict[str, dict[str, "torch.Tensor"]], reference: dict[str, dict[str, float]] | None = None,
                    title: str = ""):
    """The queue env's protocols as RLScheduler's figures show them: per panel (a log and a
    backfilling setting), each policy's mean bounded slowdown per sequence (dots) and their mean
    (bar): the rules grey but the panel's best (blue: what the paired differences are against),
    checkpoints red; `reference`: {panel: {label: value}} drawn as dashed lines (e.g. a published
    cell). panels: {panel: {policy: DoubleTensor[N] of per-sequence values}}."""
    from .queue.config import RULES

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (label, results) in zip(axes[0], panels.items()):
        rules = [name for name in results if name in RULES]
        best = min(rules, key=lambda name: float(results[name].mean())) if rules else None
        for i, (name, values) in enumerate(results.items()):
            color = "tab:red" if name.endswith(".ckpt") else "tab:blue" if name == best else "tab:gray"
            ax.bar(i, float(values.mean()), color=color, alpha=0.35, width=0.7,
                   label="best rule" if name == best else None)
            ax.scatter([i] * len(values), values.tolist(), color=color, s=10, zorder=3)
        for j, (ref, value) in enumerate((reference or {}).get(label, {}).items()):
            ax.axhline(value, color="black", linestyle=("--", ":")[j % 2], linewidth=1, label=f"{ref} {value:.1f}")
        ax.set_xticks(range(len(results)), [n.rsplit("/", 1)[-1].removesuffix(".ckpt") for n in results],
                      rotation=30, ha="right", fontsize="small")
        ax.set_yscale("log")
        ax.set_title(label, fontsize="medium")
        ax.grid(alpha=0.3, axis="y")
        if best is not None or (reference and label in reference):
            ax.legend(fontsize="x-small")
    axes[0][0].set_ylabel("mean bounded slowdown per sequence")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
