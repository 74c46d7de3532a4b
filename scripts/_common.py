"""Helpers shared by the scripts: workload flags and thread setup (scripts are run as files)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the scripts work from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from lightning_sched import ClusterConfig, DeepRMWorkload  # noqa: E402


def add_workload_flags(parser: argparse.ArgumentParser) -> None:
    """DeepRMWorkload's parameters as flags (defaults: DeepRM's)."""
    w = DeepRMWorkload()
    g = parser.add_argument_group("workload (DeepRMWorkload)")
    g.add_argument("--load", type=float, default=w.load, help="offered load per resource")
    g.add_argument("--simu_len", type=int, default=w.simu_len, help="steps with arrivals")
    g.add_argument("--short_prob", type=float, default=w.short_prob, help="share of short jobs")
    g.add_argument("--short_len", type=int, nargs=2, default=w.short_len, metavar=("LO", "HI"))
    g.add_argument("--long_len", type=int, nargs=2, default=w.long_len, metavar=("LO", "HI"))
    g.add_argument("--dominant_units", type=int, nargs=2, default=w.dominant_units, metavar=("LO", "HI"))
    g.add_argument("--other_units", type=int, nargs=2, default=w.other_units, metavar=("LO", "HI"))
    g.add_argument("--arrivals", choices=("auto", "bernoulli", "poisson"), default=w.arrivals)


def workload_from_args(args, cfg: ClusterConfig) -> DeepRMWorkload:
    return DeepRMWorkload(load=args.load, simu_len=args.simu_len, short_prob=args.short_prob,
                          short_len=tuple(args.short_len), long_len=tuple(args.long_len),
                          dominant_units=tuple(args.dominant_units), other_units=tuple(args.other_units),
                          arrivals=args.arrivals, num_resources=cfg.num_resources, resource_units=cfg.resource_units)


def set_threads(threads: int) -> int:
    """Torch's intra-op threads, set explicitly (timings are reported with it)."""
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return torch.get_num_threads()
