"""Experiment figure: queue policies adapted to the held-out sites (docs/meta_learning.md, "Queue sites"),
one panel per site, from the JSON lines `scripts/adapt.py --env queue --json` printed.

    python scripts/experiments/queue_sites_figure.py --adapt docs/outputs/queue_sites/adapt_*.txt \\
        --specialist docs/outputs/queue_sites/specialist_eval_*.txt --out docs/figures/queue_sites.png --overwrite
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from lightning_sched.files import refuse_figure, write_figure  # noqa: E402
from lightning_sched.plots import adaptation_curves  # noqa: E402

NAMES = {"queue_maml": "MAML", "queue_maml_mixture": "mixture", "scratch": "scratch"}


def lines_of(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]


def best_rule_ci(path: str) -> float:
    """The best rule's 95% CI from the rules' table adapt.py printed above its JSON lines
    ("  f1   53.33 ±    7.61  (best rule)"); 0 when the output has none."""
    found = re.search(r"^\s+\S+\s+[\d.]+ ±\s+([\d.]+)\s+\(best rule\)", Path(path).read_text(), re.MULTILINE)
    return float(found[1]) if found else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapt", nargs="+", required=True, help="adapt.py --env queue --json outputs, one per site")
    ap.add_argument("--specialist", nargs="*", default=[], help="the specialists' outputs (--steps 0)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--overwrite", action="store_true", help="let --out replace an existing file")
    args = ap.parse_args()
    try:
        refuse_figure(args.out, args.overwrite, "--out")
    except ValueError as error:  # a ConfigError: one line
        sys.exit(f"error: {error}")
    curves, refs = {}, {}
    for path in args.adapt:
        for line in lines_of(path):
            site = line["site"]["site"]["name"]
            method = NAMES.get(Path(line["policy"]).stem, Path(line["policy"]).stem)
            curves.setdefault(site, {}).setdefault(method, {})[line["step"]] = (
                line["mean_bounded_slowdown"], line["mean_bounded_slowdown_ci95"])
            # the rule ran on the same sequences: its mean is the policy's minus the paired difference
            rule = line["mean_bounded_slowdown"] - line["minus_best_rule"]
            refs.setdefault(site, {})[f"{line['best_rule']} (best rule)"] = (rule, best_rule_ci(path))
    for path in args.specialist:
        for line in lines_of(path):
            refs.setdefault(line["site"]["site"]["name"], {})["specialist (500 steps)"] = (
                line["mean_bounded_slowdown"], line["mean_bounded_slowdown_ci95"])
    fig = adaptation_curves(curves, refs, ylabel="mean bounded slowdown",
                            title="held-out sites: adapted on the site's first 80%, measured on 50 sequences after it")
    write_figure(fig, args.out, args.overwrite)
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
