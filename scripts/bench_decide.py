"""Latency of one decision through the decision service (docs/deploy.md), as `decide.py --serve` pays
it with the policy loaded: JSON text in, decide(), JSON text out; median and 99th percentile over
repeated snapshots, per policy file (checkpoint on torch, its ONNX export on onnxruntime), on
--threads threads. With --check N it also replays --trace through decide() until N snapshots are
recorded and counts the snapshots where the ONNX export's answer equals the checkpoint's; with
--schedules N it compares decide()'s schedules with the queue environment's on random sequences.

    python scripts/bench_decide.py --threads 1
    python scripts/bench_decide.py --threads 1 --check 10000 --trace ../shared/traces/lublin_256.swf.gz
    python scripts/bench_decide.py --threads 1 --repeats 1 --schedules 4 --schedule_traces ../shared/traces/*.swf.gz
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import _common  # noqa: F401  (the checkout on sys.path)
from lightning_sched.decide import decide, export_onnx, load_scorer
from lightning_sched.decide.replay import replay

CASES = {  # name: (waiting jobs, running jobs, share of the cluster the running jobs hold)
    "128 waiting, 256 running, cluster full": (128, 256, 1.0),
    "128 waiting, 128 running, half free": (128, 128, 0.5),
    "5000 waiting, 256 running, cluster full": (5000, 256, 1.0),
    "5000 waiting, 128 running, half free": (5000, 128, 0.5),
}


def snapshot(waiting: int, running: int, busy: float, processors: int, rng: np.random.Generator) -> dict:
    """A queue of `waiting` jobs (sizes and times of a batch site: 1-64 processors, 1 min - 1 day)
    and `running` jobs holding `busy` of the cluster's `processors`."""
    now = 10 * 86400
    each = max(1, int(processors * busy) // running)
    return {"now": now, "capacity": {"processors": processors},
            "running": [{"id": f"r{i}", "processors": each, "expected_end": now + int(rng.integers(60, 86400))}
                        for i in range(running)],
            "waiting": [{"id": f"w{i}", "submit": now - int(rng.integers(0, 86400)),
                         "requested_time": int(np.exp(rng.uniform(np.log(60), np.log(86400)))),
                         "processors": int(2 ** rng.integers(0, 7))} for i in range(waiting)]}


def latency(text: str, scorer, repeats: int) -> tuple[float, float]:
    """(median, 99th percentile) milliseconds of json.loads -> decide -> json.dumps (the snapshots' clock
    starting at 0, for a policy that reads submit times)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        json.dumps(decide(json.loads(text), scorer, clock_start=0))
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times), float(np.percentile(times, 99))


def check(policy: str, onnx_path: Path, trace: str, count: int, window: int) -> None:
    """Replay `trace` through the checkpoint until `count` snapshots are recorded; compare the ONNX
    export's answers on each."""
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(trace)
    torch_scorer, onnx_scorer = load_scorer(policy), load_scorer(onnx_path)
    recorded = []
    for k, first in enumerate(range(0, log.num_jobs - 1024, 1024)):
        jobs = {key: v[0].numpy() for key, v in log.sequences(torch.tensor([first]), 1024).items()}
        backfill = ("off", "easy")[k % 2]
        replay(jobs, log.nodes, log.processors_per_node, torch_scorer, backfill, window,
               on_decision=lambda s, a, b=backfill: recorded.append((s, a, b)))
        if len(recorded) >= count:
            break
    recorded = recorded[:count]
    same_decision = same_order = 0
    for s, a, backfill in recorded:
        b = decide(s, onnx_scorer, backfill, window)
        same_decision += (a["start_now"], a["held"]) == (b["start_now"], b["held"])
        same_order += a["order"] == b["order"]
    print(f"ONNX vs checkpoint on {len(recorded)} snapshots of {Path(trace).name} (window {window}, backfilling "
          f"off and EASY): decisions equal on {same_decision}, whole order equal on {same_order}")


def schedules(policies: list[str], traces: list[str], count: int, windows=(128, 16), seed: int = 0) -> None:
    """Replay `count` random sequences of 1024 jobs of each trace through decide() and through the queue
    environment, per policy (its own backfilling; a rule's: off) and window (a network's; a rule sees the
    whole queue); count the sequences scheduled identically."""
    from dataclasses import replace

    from lightning_sched.queue.env import QueueEnv
    from lightning_sched.queue.evaluation import resolve
    from lightning_sched.queue.log import read_queue_log
    from lightning_sched.queue.rollout import collect

    rng = np.random.default_rng(seed)
    same = total = 0
    for trace in traces:
        log = read_queue_log(trace)
        for policy in policies:
            scorer = load_scorer(policy)
            backfill = scorer.config.get("backfill", "off")
            acting, cfg = resolve(policy, log.config(backfill=backfill, sequence_length=1024))
            for window in windows if scorer.config["window"] is not None else [None]:
                starts = rng.integers(0, log.num_jobs - 1024, count)
                env = QueueEnv(cfg if window is None else replace(cfg, window=window), log, batch_size=[count],
                               starts=torch.as_tensor(starts))
                collect(env, acting)
                for row, first in enumerate(starts):
                    jobs = {k: v[0].numpy() for k, v in log.sequences(torch.tensor([first]), 1024).items()}
                    ours = replay(jobs, log.nodes, log.processors_per_node, scorer, backfill, window)
                    same += bool((ours == env.state.start[row].numpy()).all())
                    total += 1
    print(f"replay through decide() gives the environment's schedule on {same} of {total} sequences of 1024 jobs "
          f"({len(traces)} logs x {len(policies)} policies x windows {list(windows)} (a network's) x {count})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="checkpoints/queue_bsld_easy.ckpt",
                   help="a queue policy as decide.py takes it; a plain network's ONNX export is timed beside it "
                        "(default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch's and onnxruntime's threads (default 1)")
    p.add_argument("--repeats", type=int, default=200, help="decisions timed per snapshot case (default 200)")
    p.add_argument("--processors", type=int, default=256, help="the cluster of the timed snapshots (default 256)")
    p.add_argument("--check", type=int, default=0, metavar="N", help="also compare ONNX and checkpoint on N snapshots")
    p.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz", help="the log --check replays")
    p.add_argument("--window", type=int, default=16, help="--check's window: small, so that it is often crowded")
    p.add_argument("--schedules", type=int, default=0, metavar="N",
                   help="compare decide()'s and the environment's schedules on N sequences per log, policy, window")
    p.add_argument("--schedule_traces", nargs="+", default=["../shared/traces/lublin_256.swf.gz"],
                   help="the logs --schedules replays (default %(default)s)")
    p.add_argument("--schedule_policies", nargs="+",
                   default=["checkpoints/queue_bsld.ckpt", "checkpoints/queue_bsld_easy.ckpt"],
                   help="the policies --schedules compares, as decide.py takes them (default: the two shipped "
                        "networks)")
    args = p.parse_args()
    for name, value in (("--threads", args.threads), ("--repeats", args.repeats), ("--processors", args.processors)):
        if value < 1:
            p.error(f"{name} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        scorer = load_scorer(args.policy, args.threads)
        observing = hasattr(scorer, "pick")  # a rule, searched rule or reserving network: no ONNX export
        scorers = {"through the env's observation" if observing else "checkpoint (torch)": scorer}
        if not observing:
            onnx_path = export_onnx(args.policy, Path(folder) / "policy.onnx")
            scorers["ONNX (onnxruntime)"] = load_scorer(onnx_path, args.threads)
        print(f"decision latency, ms (median / p99 of {args.repeats}), {args.threads} thread(s), "
              f"{Path(args.policy).name}, {args.processors} processors")
        rng = np.random.default_rng(0)
        for case, (waiting, running, busy) in CASES.items():
            text = json.dumps(snapshot(waiting, running, busy, args.processors, rng))
            cells = []
            for label, scorer in scorers.items():
                median, p99 = latency(text, scorer, args.repeats)
                cells.append(f"{label} {median:6.2f} / {p99:6.2f}")
            print(f"  {case:42s} " + "   ".join(cells))
        if args.check and not observing:
            check(args.policy, onnx_path, args.trace, args.check, args.window)
        elif args.check:
            print(f"--check compares an ONNX export with its checkpoint: {args.policy} has none")
    if args.schedules:
        schedules(args.schedule_policies, args.schedule_traces, args.schedules)


if __name__ == "__main__":
    main()
