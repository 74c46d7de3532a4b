"""Benchmark of one DeepRM training iteration at the paper's scale: 100 jobsets x 20
episodes of load 0.7, simu_len 50, DeepRM's network; rollout (sampled actions), returns and the
time-indexed baseline, forward, backward and one RMSprop step. Medians over --repeats iterations
after one warm-up; prints a table and, last, a JSON line.

    python scripts/bench_train.py [--device cuda] [--threads 2] [--repeats 5]
    python scripts/bench_train.py --contention   # default threads against 1, quiet and beside a busy process
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from _common import run_main, set_threads
from lightning_sched import ClusterConfig, DeepRMWorkload
from lightning_sched.cli import THREADS_HELP, ScriptParser, at_least, positive_float, thread_count, torch_device
from lightning_sched.deeprm.rollout import collect
from lightning_sched.evaluation import make_jobsets
from lightning_sched.learning.baselines import TimeIndexedBaseline
from lightning_sched.learning.policy_gradient import policy_gradient
from lightning_sched.policies.networks import PolicySpec, make_policy
from lightning_sched.threads import usable_cores


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def busy_competitor():
    """A process spinning on one core while inside (the busy machine of docs/performance.md)."""
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # running before the thread count is chosen
        yield
    finally:
        competitor.kill()
        competitor.wait()


def contention(args, timed: Callable, jobsets: Callable) -> None:
    """Seconds of `timed(jobs)` with --threads (chosen again before each iteration, as a run
    starting then would), with 1 thread and with every core's, alternating, on the machine as it is,
    then beside a busy competitor."""
    every = len(usable_cores())
    counts = {"default": args.threads, "one": 1, "every": every}
    result = {"threads": args.threads, "repeats": args.repeats, "cores": every}
    print(f"{args.jobsets} jobsets x {args.episodes} episodes, load {args.load}; medians of {args.repeats} iterations, "
          f"--threads {args.threads}, 1 and {every} alternating")
    for phase in ("as is", "busy"):
        with busy_competitor() if phase == "busy" else contextlib.nullcontext():
            seconds, chosen = {which: [] for which in counts}, []
            for i in range(args.repeats + 1):
                jobs = jobsets(i)
                for which, count in counts.items():
                    used = set_threads(count)
                    elapsed = timed(jobs)
                    if i:  # the first is a warm-up
                        seconds[which].append(elapsed)
                        chosen += [used] if which == "default" else []
        med = {which: statistics.median(values) for which, values in seconds.items()}
        ratio, every_ratio = med["default"] / med["one"], med["every"] / med["one"]
        result[phase] = {"default_s": round(med["default"], 4), "one_thread_s": round(med["one"], 4),
                         "every_core_s": round(med["every"], 4), "ratio": round(ratio, 3),
                         "every_core_ratio": round(every_ratio, 3), "default_threads": chosen}
        print(f" {phase:5s}: --threads {args.threads} ({'/'.join(map(str, chosen))} threads) {med['default']:.3f} s, "
              f"--threads 1 {med['one']:.3f} s, --threads {every} {med['every']:.3f} s; "
              f"ratios to 1 thread {ratio:.2f} and {every_ratio:.2f}", flush=True)
    print(json.dumps(result))


def main(argv=None) -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobsets", type=at_least(1), default=100)
    ap.add_argument("--episodes", type=at_least(1), default=20)
    ap.add_argument("--load", type=positive_float, default=0.7)
    ap.add_argument("--simu_len", type=at_least(1), default=50)
    ap.add_argument("--masked", action="store_true", help="masked softmax (default DeepRM's unmasked)")
    ap.add_argument("--repeats", type=at_least(1), default=5)
    ap.add_argument("--device", type=torch_device, default="cpu")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--contention", action="store_true",
                    help="time --threads against --threads 1, iterations alternating, first on the machine as it is, "
                         "then with a busy-loop process of our own competing for a core; print the medians and ratios")
    ap.add_argument("--slots", action="store_true",
                    help="also time the slot policy of checkpoints/slots_slowdown.ckpt (kind 'slots', 32 units) in "
                         "the same run, iterations interleaved, and print its median time over the image network's")
    args = ap.parse_args(argv)
    threads = set_threads(args.threads)
    cfg = ClusterConfig(observation="none")
    torch.manual_seed(0)
    specs = {"image": PolicySpec(masked=args.masked)}
    if args.slots:
        specs["slots"] = PolicySpec(kind="slots", masked=True, hidden=(32,))  # checkpoints/slots_slowdown.ckpt's
    nets = {name: make_policy(spec, cfg).to(args.device) for name, spec in specs.items()}
    opts = {name: torch.optim.RMSprop(net.parameters(), lr=1e-3, alpha=0.9, eps=1e-9) for name, net in nets.items()}
    baseline = TimeIndexedBaseline()
    generator = torch.Generator(device=args.device).manual_seed(0)
    keys = ("rollout_s", "loss_s", "backward_step_s", "iteration_s", "decisions")

    def iteration(name: str, jobs) -> tuple:
        """One training iteration of network `name` on `jobs`: the seconds of its parts, the decisions."""
        net = nets[name]
        sync(args.device)
        t0 = time.perf_counter()
        traj = collect(net, cfg, jobs, generator=generator)
        sync(args.device)
        t1 = time.perf_counter()
        pg = policy_gradient(net, traj, baseline, args.episodes)
        sync(args.device)
        t2 = time.perf_counter()
        opts[name].zero_grad()
        pg.loss.backward()
        opts[name].step()
        sync(args.device)
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, t3 - t0, pg.decisions

    def jobsets(i: int):
        jobs = make_jobsets(DeepRMWorkload(load=args.load, simu_len=args.simu_len), args.jobsets, 1000 + i)
        return jobs.to(args.device).repeat_interleave(args.episodes)

    if args.contention:
        contention(args, lambda jobs: iteration("image", jobs)[3], jobsets)
        return
    parts = {name: {k: [] for k in keys} for name in nets}
    for i in range(args.repeats + 1):
        jobs = jobsets(i)
        for name in nets:  # the same jobsets for each network, one after the other
            timings = iteration(name, jobs)
            if i == 0:
                continue  # warm-up
            for key, value in zip(keys, timings):
                parts[name][key].append(value)
    med = {name: {k: statistics.median(v) for k, v in part.items()} for name, part in parts.items()}
    print(f"device={args.device} threads={threads} torch={torch.__version__}  {args.jobsets} jobsets x {args.episodes} "
          f"episodes, load {args.load}, simu_len {args.simu_len}, masked={args.masked}; medians of {args.repeats}")
    for name, m in med.items():
        print(f" {name} network")
        for key in keys[:-1]:
            print(f"  {key:18s} {m[key]:8.3f}")
        rate = m["decisions"] / m["iteration_s"]
        print(f"  {'decisions':18s} {m['decisions']:8.0f}   ({rate:,.0f} trained decisions/s)")
    result = {"device": args.device, "threads": threads, "torch": torch.__version__, "jobsets": args.jobsets,
              "episodes": args.episodes, "load": args.load, "masked": args.masked, "repeats": args.repeats,
              **{k: round(v, 4) for k, v in med["image"].items()}}
    if args.slots:
        ratio = statistics.median(s / i for s, i in zip(parts["slots"]["iteration_s"], parts["image"]["iteration_s"]))
        print(f" slots / image iteration time: {ratio:.2f} (median of per-iteration ratios)")
        result.update(slots={k: round(v, 4) for k, v in med["slots"].items()}, slots_over_image=round(ratio, 3))
    print(json.dumps(result))


if __name__ == "__main__":
    run_main(main)
