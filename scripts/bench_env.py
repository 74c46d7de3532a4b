"""Benchmark of the batched environment.

1. Env-only decisions per second for batch sizes 1..16384 with random valid actions, per
   observation mode, on the hot path (`cluster.step_state` + `observations.observe`, with the
   image or compact vector rendered every step in those modes); done rows
   are reset to their jobset every 16 steps so every row keeps working (through ClusterEnv.step by
   TorchRL's partial reset, env.reset with "_reset"), and only decisions of
   rows not yet done are counted. At B = 1 and from 1024 up also through TorchRL's `ClusterEnv.step`.
2. Wall time of one DeepRM training iteration's worth of episodes (100 jobsets x 20 episodes,
   load 0.7, simu_len 50) under the Tetris heuristic, start to the end of the last episode.

With --sizes instead: decisions/s on the hot path and through `ClusterEnv.step` (observation
"none") at one batch size for clusters of (resource_units, num_slots, horizon) from DeepRM's
(10, 10, 20) to (1024, 64, 256), each with DeepRM's job mix scaled to it (durations by T/20, the
dominant demand U/2..U, the others 1..U/5), with the ratio to (10, 10, 20) in the same run and
the state's bytes per episode.

On the CPU the step is the native kernel where it applies (lightning_sched.deeprm.native); --torch_step
also measures every rate with the torch step (LIGHTNING_SCHED_NATIVE=0) in the same run, rows
"hot/torch" and "torchrl/torch" (keys hot_torch, torchrl_torch).

With --env queue instead: the queue env (lightning_sched.queue) on --trace's sequences of 256 jobs,
decisions/s through TorchRL's `QueueEnv.step` with the observation built every step, at each
--batch_sizes, backfilling off and EASY (--backfill), with random valid picks (uniform over the visible jobs) and
with FCFS picks (slot 0); done rows start a fresh sequence every 16 steps (TorchRL's partial reset),
and only decisions of rows not done count.

With --library instead: decisions/s through `ClusterEnv.step` as a program of one's own gets them
(glibc's malloc settings: what README's library snippet runs with) beside the scripts' (glibc told
to keep freed memory, lightning_sched.allocator), each measured in a fresh process, alternating.

Prints a table and, last, a JSON line. Medians over --repeats runs.
    python scripts/bench_env.py [--device cuda] [--threads 2] [--objective deadline] [--torch_step]
    python scripts/bench_env.py --sizes [--sizes_batch 4096] [--torch_step]
    python scripts/bench_env.py --env queue [--batch_sizes 4096] [--torch_step]
    python scripts/bench_env.py --library --modes image none --batch_sizes 1024 4096 16384
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from _common import run_main, set_threads
from lightning_sched import ClusterConfig, ClusterEnv, ConfigError, DeepRMWorkload
from lightning_sched.cli import THREADS_HELP, ScriptParser, at_least, positive_float, thread_count, torch_device
from lightning_sched.deeprm import native
from lightning_sched.deeprm.cluster import compiled_step, init_state, step_state
from lightning_sched.deeprm.native import stepping_with_torch
from lightning_sched.deeprm.observations import observe
from lightning_sched.deeprm.rollout import play
from lightning_sched.deeprm.state import ClusterState
from lightning_sched.evaluation import make_jobsets
from lightning_sched.heuristics import make_heuristic


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def random_valid(mask: torch.Tensor, generator) -> torch.Tensor:
    """Uniform over the valid actions (void always valid): LongTensor[B]."""
    scores = torch.rand(mask.shape, device=mask.device, generator=generator)
    return torch.where(mask, scores, -1.0).argmax(-1)


def hot_path_rate(cfg, jobs, steps, device, generator, compile_step=False, torch_step=False) -> float:
    with stepping_with_torch(torch_step):
        return _hot_path_rate(cfg, jobs, steps, device, generator, compile_step)


def torchrl_rate(cfg, jobs, steps, device, generator, compile_step=False, torch_step=False) -> float:
    with stepping_with_torch(torch_step):
        return _torchrl_rate(cfg, jobs, steps, device, generator, compile_step)


def _hot_path_rate(cfg, jobs, steps, device, generator, compile_step=False) -> float:
    state = init_state(jobs, cfg)
    fresh = init_state(jobs, cfg)
    step = compiled_step(state, cfg) if compile_step else step_state
    decisions = torch.zeros((), dtype=torch.long, device=device)
    for i in range(steps + 10):
        if i == 10:  # warm-up done
            sync(device)
            decisions.zero_()
            t0 = time.perf_counter()
        obs = observe(state, cfg, job_start=False)
        if cfg.observation != "none":
            obs["observation"]  # observations are lazy: render what a network policy would read
        decisions += (~state.done).sum()
        step(state, random_valid(obs["action_mask"], generator), cfg)
        if i % 16 == 15:
            state = state.merge(state.done, fresh)
    sync(device)
    return int(decisions) / (time.perf_counter() - t0)


def torchrl_decisions_per_s(env, steps: int, device, pick) -> float:
    """Decisions/s of rows not done through `env.step`, `pick(td)` choosing the actions; after 10
    warm-up steps, over `steps`. As a collector does, the done rows start again every 16 steps
    (TorchRL's partial reset)."""
    td = env.reset()
    decisions = torch.zeros((), dtype=torch.long, device=device)
    for i in range(steps + 10):
        if i == 10:
            sync(device)
            decisions.zero_()
            t0 = time.perf_counter()
        decisions += (~td["done"]).sum()
        td["action"] = pick(td)
        td = env.step(td)["next"]
        if i % 16 == 15:
            td["_reset"] = td["done"].clone()
            td = env.reset(td)
    sync(device)
    return int(decisions) / (time.perf_counter() - t0)


def _torchrl_rate(cfg, jobs, steps, device, generator, compile_step=False) -> float:
    env = ClusterEnv(cfg, jobs, batch_size=[jobs.batch_size], device=device, compile_step=compile_step)
    return torchrl_decisions_per_s(env, steps, device, lambda td: random_valid(td["action_mask"], generator))


def queue_rate(cfg, log, batch: int, steps: int, device, generator, picks: str, torch_step=False) -> float:
    """Decisions/s of the queue env through TorchRL (module docstring)."""
    from lightning_sched.queue.env import QueueEnv

    def pick(td):
        if picks == "random":  # the visible jobs fill the first slots: min(queue, window) of them (done: slot 0)
            visible = td["queue_length"].squeeze(-1).clamp(max=cfg.window)
            return (torch.rand(batch, device=device, generator=generator) * visible).long()
        return torch.zeros(batch, dtype=torch.long, device=device)

    with stepping_with_torch(torch_step):
        env = QueueEnv(cfg, log, batch_size=[batch], device=device, seed=batch)
        return torchrl_decisions_per_s(env, steps, device, pick)


def queue_iteration(trace: str, backfill: str) -> dict[str, float]:
    """Seconds of one PPO iteration of the shipped queue recipe's first stage (configs/queue_bsld*.yaml:
    32 episodes of 256 jobs, 4 epochs), the second of two, through Lightning: its rollout and the whole."""
    from lightning.pytorch import Trainer

    from tasks.queue_ppo import PPOSettings, QueuePPO, QueueValidation

    model = QueuePPO(trace, backfill=backfill, batch_size=32, validation=QueueValidation(sequences=2),
                     ppo=PPOSettings(advantage="sequence", episodes_per_sequence=4))
    trainer = Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, limit_val_batches=0, enable_progress_bar=False,
                      enable_model_summary=False)  # the CPU table's iteration, also where a GPU is present
    trainer.fit(model)
    m = trainer.logged_metrics
    return {"rollout_s": round(float(m["perf/rollout_s"]), 3), "iteration_s": round(float(m["perf/iteration_s"]), 3),
            "decisions": int(m["train/decisions"])}


def queue_table(args, device, generator, result) -> None:
    from lightning_sched.queue import native as queue_native
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(args.trace)
    kernel_applies = device.type == "cpu" and queue_native.kernel() is not None
    print(f"queue env: {args.trace}, sequences of 256 jobs, window 128; decisions/s through QueueEnv.step (median)")
    print(f"{'backfill':8s} {'picks':7s} {'step':6s} {'B':>6s} {'decisions/s':>14s}")
    for backfill in args.backfill:
        cfg = log.config(sequence_length=256, backfill=backfill)
        for picks in ("random", "fcfs"):
            for b in args.batch_sizes:
                for torch_step in (False, True) if args.torch_step else (False,):
                    rate = statistics.median(queue_rate(cfg, log, b, args.steps, device, generator, picks, torch_step)
                                             for _ in range(args.repeats))
                    step = "native" if kernel_applies and not torch_step else "torch"
                    result["decisions_per_s"][f"queue/{backfill}/{picks}/{step}/{b}"] = round(rate)
                    print(f"{backfill:8s} {picks:7s} {step:6s} {b:6d} {rate:14,.0f}", flush=True)
        if device.type == "cpu":
            iteration = queue_iteration(args.trace, backfill)
            result[f"queue/{backfill}/ppo_iteration"] = iteration
            print(f"one PPO iteration (backfill {backfill}, 32 episodes of 256 jobs, {iteration['decisions']} "
                  "decisions, "
                  f"4 epochs): {iteration['iteration_s']:.2f} s, of which the rollout {iteration['rollout_s']:.2f} s",
                  flush=True)


def batch_rates(args, cfg: ClusterConfig, b: int, device, generator, rates: dict) -> None:
    """The DeepRM table's rows for one observation mode and batch size: the hot path, and through
    TorchRL at B = 1 and from 1024 up (where the batch amortises its overhead); with --torch_step
    and --compile also those variants. Prints each row and records it in `rates`."""
    jobs = make_jobsets(DeepRMWorkload(load=args.load, simu_len=args.simu_len), b, seed=b).to(device)
    steps = args.steps if b >= 256 else args.steps * 3
    paths = [("hot", hot_path_rate, {})]
    paths += [("hot_torch", hot_path_rate, {"torch_step": True})] if args.torch_step else []
    paths += [("compiled", hot_path_rate, {"compile_step": True})] if args.compile else []
    if b == 1 or b >= 1024:
        paths += [("torchrl", torchrl_rate, {})]
        paths += [("torchrl_torch", torchrl_rate, {"torch_step": True})] if args.torch_step else []
        paths += [("torchrl_compiled", torchrl_rate, {"compile_step": True})] if args.compile else []
    for name, rate_of, options in paths:
        rate = statistics.median(rate_of(cfg, jobs, steps, device, generator, **options) for _ in range(args.repeats))
        rates[f"{cfg.observation}/{name}/{b}"] = round(rate)
        print(f"{cfg.observation:8s} {name.replace('_', '/'):8s} {b:6d} {rate:22,.0f}", flush=True)


def library_table(args) -> None:
    """--library: decisions/s through ClusterEnv.step with glibc's malloc settings (a program of
    one's own, the library alone) and with the scripts' (reuse_freed_memory), each measured in a
    fresh process, the two alternating --repeats times; medians and their ratio."""
    command = [sys.executable, __file__, "--torchrl_only", "--threads", str(args.threads), "--steps", str(args.steps),
               "--modes", *args.modes, "--batch_sizes", *map(str, args.batch_sizes)]
    runs = {"library": [], "scripts": []}
    for _ in range(args.repeats):
        for path, extra in (("library", ["--default_malloc"]), ("scripts", [])):
            out = subprocess.run(command + extra, check=True, capture_output=True, text=True).stdout
            runs[path].append(json.loads(out.strip().splitlines()[-1]))
    print(f"ClusterEnv.step, decisions/s (median of {args.repeats} processes each, alternating), "
          f"threads {args.threads}: "
          "the library as README builds it, and the scripts (glibc told to keep freed memory)")
    print(f"{'mode':8s} {'B':>6s} {'library':>12s} {'scripts':>12s} {'library/scripts':>16s}")
    result = {"threads": args.threads, "repeats": args.repeats, "library": {}, "scripts": {}}
    for key in runs["library"][0]:
        library, scripts = (statistics.median(run[key] for run in runs[path]) for path in ("library", "scripts"))
        result["library"][key], result["scripts"][key] = round(library), round(scripts)
        mode, b = key.split("/")
        print(f"{mode:8s} {int(b):6d} {library:12,.0f} {scripts:12,.0f} {library / scripts:16.2f}", flush=True)
    print(json.dumps(result))


SIZES = [(10, 10, 20), (100, 10, 20), (1024, 10, 20), (10, 64, 20), (10, 256, 20), (10, 10, 256), (1024, 64, 256)]


def sized_cluster(units: int, slots: int, horizon: int, objective: str) -> tuple[ClusterConfig, DeepRMWorkload]:
    """A cluster of that size and DeepRM's job mix at load 0.7 scaled to it."""
    scale = horizon / 20
    cfg = ClusterConfig(resource_units=units, max_job_units=units, num_slots=slots, horizon=horizon,
                        max_job_len=round(15 * scale), max_time=round(1000 * scale), objective=objective,
                        observation="none")
    workload = DeepRMWorkload.for_cluster(cfg, load=0.7, simu_len=round(50 * scale), short_len=(1, round(3 * scale)),
                                          long_len=(round(10 * scale), round(15 * scale)))
    return cfg, workload


def state_bytes_per_row(state: ClusterState) -> float:
    """Bytes the state's tensors hold, per episode."""
    total = sum(getattr(state, f).numel() * getattr(state, f).element_size() for f in state.__dataclass_fields__)
    return total / state.time.shape[0]


def sizes_table(args, device, generator, result) -> None:
    b = args.sizes_batch
    print(f"device={device} threads={result['threads']} torch={torch.__version__} B={b} observation=none "
          f"objective={args.objective}")
    print(f"{'(units, slots, horizon)':>24s} {'hot path/s':>12s} {'ratio':>6s} {'ClusterEnv.step/s':>18s} "
          f"{'ratio':>6s} "
          + (f"{'hot (torch)':>14s} {'env (torch)':>14s} " if args.torch_step else "")
          + f"{'state B/episode':>16s}")
    rows, base = {}, None
    for units, slots, horizon in SIZES:
        cfg, workload = sized_cluster(units, slots, horizon, args.objective)
        jobs = make_jobsets(workload, b, seed=b).to(device)
        hot = statistics.median(hot_path_rate(cfg, jobs, args.steps, device, generator) for _ in range(args.repeats))
        env = statistics.median(torchrl_rate(cfg, jobs, args.steps, device, generator) for _ in range(args.repeats))
        per_row = state_bytes_per_row(init_state(jobs, cfg))
        base = base or (hot, env)
        row = {"hot": round(hot), "hot_ratio": round(hot / base[0], 3), "torchrl": round(env),
               "torchrl_ratio": round(env / base[1], 3), "state_bytes_per_episode": round(per_row)}
        line = (f"{str((units, slots, horizon)):>24s} {hot:12,.0f} {hot / base[0]:6.2f} {env:18,.0f} "
                f"{env / base[1]:6.2f}")
        if args.torch_step:
            row["hot_torch"] = round(statistics.median(hot_path_rate(cfg, jobs, args.steps, device, generator,
                                                                     torch_step=True) for _ in range(args.repeats)))
            row["torchrl_torch"] = round(statistics.median(torchrl_rate(cfg, jobs, args.steps, device, generator,
                                                                        torch_step=True)
                                                           for _ in range(args.repeats)))
            line += f" {row['hot_torch']:14,.0f} {row['torchrl_torch']:14,.0f}"
        rows[f"{units},{slots},{horizon}"] = row
        print(f"{line} {per_row:16,.0f}", flush=True)
    result["sizes"] = rows


def main() -> None:
    ap = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", type=torch_device, default="cpu")
    ap.add_argument("--threads", type=thread_count, default="auto", help=THREADS_HELP)
    ap.add_argument("--batch_sizes", type=at_least(1), nargs="+", default=[1, 16, 256, 1024, 4096, 16384])
    ap.add_argument("--modes", nargs="+", default=["none", "compact", "image"])
    ap.add_argument("--steps", type=at_least(1), default=100, help="timed steps per run")
    ap.add_argument("--repeats", type=at_least(1), default=3)
    ap.add_argument("--objective", default="slowdown", help="the reward computed every step (SPEC's objectives)")
    ap.add_argument("--load", type=positive_float, default=0.7, help="DeepRM workload of the decisions/s table")
    ap.add_argument("--simu_len", type=at_least(1), default=50, help="arrival steps (more jobs per row when larger)")
    ap.add_argument("--compile", action="store_true",
                    help="also both paths with step_state compiled (cluster.compiled_step; compiles every run)")
    ap.add_argument("--torch_step", action="store_true",
                    help="also every rate with the torch step instead of the native one (LIGHTNING_SCHED_NATIVE=0)")
    ap.add_argument("--sizes", action="store_true", help="the cluster-size table instead (module docstring)")
    ap.add_argument("--sizes_batch", type=at_least(1), default=4096,
                    help="episodes stepped at once in the --sizes table")
    ap.add_argument("--env", choices=("deeprm", "queue"), default="deeprm")
    ap.add_argument("--trace", default="../shared/traces/lublin_256.swf.gz", help="--env queue: the log")
    ap.add_argument("--backfill", nargs="+", choices=("off", "easy"), default=["off", "easy"],
                    help="--env queue: the settings measured")
    ap.add_argument("--default_malloc", action="store_true",
                    help="leave glibc's malloc thresholds at their defaults (lightning_sched.allocator)")
    ap.add_argument("--library", action="store_true",
                    help="ClusterEnv.step as a library user's program runs it (glibc's malloc settings) beside the "
                         "scripts' (reuse_freed_memory), each in a fresh process, alternating (module docstring)")
    ap.add_argument("--torchrl_only", action="store_true", help=argparse.SUPPRESS)  # one --library measurement
    args = ap.parse_args()
    # flags of the other env's tables: refused, not ignored (a figure would be read as theirs)
    other = {"deeprm": ("trace", "backfill"),
             "queue": ("modes", "objective", "load", "simu_len", "compile", "sizes", "sizes_batch", "library")}
    changed = [f"--{name}" for name in other[args.env] if getattr(args, name) != ap.get_default(name)]
    if changed:
        raise ConfigError(f"{', '.join(changed)}: not read with --env {args.env} (flags of the "
                          f"{'queue' if args.env == 'deeprm' else 'DeepRM'} env's tables)")
    if args.library:
        library_table(args)
        return
    threads = set_threads(args.threads, reuse_memory=not args.default_malloc)
    if args.torchrl_only:
        rates = {}
        for mode in args.modes:
            cfg = ClusterConfig(observation=mode, objective=args.objective)
            for b in args.batch_sizes:
                jobs = make_jobsets(DeepRMWorkload(load=args.load, simu_len=args.simu_len), b, seed=b)
                rates[f"{mode}/{b}"] = torchrl_rate(cfg, jobs, args.steps, torch.device("cpu"), torch.Generator())
        print(json.dumps(rates))
        return
    device = torch.device(args.device)
    generator = torch.Generator(device=device).manual_seed(0)
    result = {"device": str(device), "threads": threads, "default_malloc": args.default_malloc,
              "torch": torch.__version__, "objective": args.objective,
              "native_step": device.type == "cpu" and native.available(),
              "decisions_per_s": {}}
    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
    if args.sizes or args.env == "queue":
        (queue_table if args.env == "queue" else sizes_table)(args, device, generator, result)
        print(json.dumps(result))
        return

    print(f"device={device} threads={threads} torch={torch.__version__} objective={args.objective} "
          f"malloc={'default' if args.default_malloc else 'reuse freed memory'}")
    print(f"{'mode':8s} {'path':8s} {'B':>6s} {'decisions/s (median)':>22s}")
    for mode in args.modes:
        cfg = ClusterConfig(observation=mode, objective=args.objective)
        for b in args.batch_sizes:
            try:
                batch_rates(args, cfg, b, device, generator, result["decisions_per_s"])
            except torch.OutOfMemoryError:  # a batch too large for the card: say so, measure the rest
                result.setdefault("out_of_memory", []).append(f"{mode}/{b}")
                print(f"{mode:8s} {'':8s} {b:6d} {'out of device memory':>22s}", flush=True)
                torch.cuda.empty_cache()
    best = max((v, k) for k, v in result["decisions_per_s"].items())
    result["best"] = {"config": best[1], "decisions_per_s": best[0]}

    # one DeepRM iteration's episodes under Tetris
    cfg = ClusterConfig(observation="none")
    jobs = make_jobsets(DeepRMWorkload(load=0.7, simu_len=50), 100, seed=7).repeat_interleave(20).to(device)
    policy = make_heuristic("tetris", cfg)
    times = []
    for _ in range(args.repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        state, steps = play(policy, cfg, jobs)
        sync(device)
        times.append(time.perf_counter() - t0)
    iteration = statistics.median(times[1:])
    result["iteration_2000_episodes_s"] = round(iteration, 4)
    result["iteration_steps"] = steps
    print(f"\none DeepRM iteration (100 jobsets x 20 episodes, load 0.7, simu_len 50, tetris, observation=none): "
          f"{iteration:.3f} s median of {args.repeats} ({steps} batched steps)")
    print(json.dumps(result))


if __name__ == "__main__":
    run_main(main)
