"""A synthetic Standard Workload Format log: a stand-in for a cluster's own log, with a memory column
and a schedule the cluster could have run, for tests and scale checks (never downloaded, never committed).

    write_swf(path, num_jobs=300_000, processors=4096, memory_per_processor_kb=2 ** 21, load=0.7, seed=0)

Jobs (per job, independently):
    processors   2**k, k uniform in 0..log2(processors) - 2 (a quarter of the machine at most: whole-machine
                 jobs starve under backfilling and then block it, and waits grow to days)
    run time     log-uniform in [10 s, 36 h]
    memory       used KB per processor log-uniform in [share/16, 2 share], share = the machine's memory
                 per processor (so some jobs are memory-bound), at most the machine's memory in all
    submit       a Poisson process whose rate gives offered processor load `load`
The log's schedule is greedy backfilling: whenever a job arrives or ends, the first 32 waiting jobs,
in submit order, start if their processors and memory are free; the wait (field 3) is start -
submit. So the jobs running at any time fit the machine, on both resources, as in a real log.
"""
from __future__ import annotations

import gzip
import heapq
import math
from pathlib import Path

import numpy as np

from ..files import write_file
from .files import SWF_FIELDS

MIN_RUN_S, MAX_RUN_S = 10.0, 36 * 3600.0
BACKFILL_WINDOW = 32  # waiting jobs the log's scheduler looks at


def synthetic_jobs(num_jobs: int, processors: int, memory_per_processor_kb: int, load: float, seed: int = 0
                   ) -> dict[str, np.ndarray]:
    """The jobs of a synthetic log in submit order: submit, wait, run (seconds, integers), procs,
    memory (KB per processor), each an array of num_jobs."""
    rng = np.random.default_rng(seed)
    top = max(0, int(math.log2(processors)) - 2)
    procs = 2 ** rng.integers(0, top + 1, num_jobs)
    run = np.exp(rng.uniform(math.log(MIN_RUN_S), math.log(MAX_RUN_S), num_jobs)).round()
    memory = np.exp(rng.uniform(math.log(memory_per_processor_kb / 16), math.log(2 * memory_per_processor_kb),
                                num_jobs))
    memory = np.minimum(memory, memory_per_processor_kb * processors / procs).round()  # a job fits the machine
    mean_gap = float((procs * run).sum()) / (load * processors * num_jobs)
    submit = np.cumsum(rng.exponential(mean_gap, num_jobs)).round()
    submit -= submit[0]
    wait = backfill_waits(submit, run, procs, memory * procs, processors, memory_per_processor_kb * processors)
    return {"submit": submit, "wait": wait, "run": run, "procs": procs, "memory": memory}


def backfill_waits(submit: np.ndarray, run: np.ndarray, procs: np.ndarray, memory: np.ndarray, capacity: int,
                   memory_capacity: float, window: int = BACKFILL_WINDOW) -> np.ndarray:
    """Waits under a greedy backfilling scheduler on `capacity` processors and memory: whenever a job
    arrives or ends, the first `window` waiting jobs, in submit order, start if they fit now. (Without
    backfilling, one large job at the head of the queue idles the machine and waits grow without
    bound at loads a real machine runs; with it, waits stay hours, as in archive logs.)"""
    n = len(submit)
    running: list[tuple[float, int, float]] = []  # heap of (end, processors, memory) of the jobs started
    waiting: list[int] = []  # submit order
    free, free_memory = capacity, memory_capacity
    wait = np.empty(n)
    i = 0
    while i < n or waiting:
        clock = min(float(submit[i]) if i < n else math.inf, running[0][0] if running else math.inf)
        while running and running[0][0] <= clock:  # release what has ended by now
            _, p, m = heapq.heappop(running)
            free, free_memory = free + p, free_memory + m
        while i < n and submit[i] <= clock:
            waiting.append(i)
            i += 1
        started = set()
        for j in waiting[:window]:
            if procs[j] <= free and memory[j] <= free_memory + 1e-6:
                free, free_memory = free - int(procs[j]), free_memory - float(memory[j])
                heapq.heappush(running, (clock + float(run[j]), int(procs[j]), float(memory[j])))
                wait[j] = clock - submit[j]
                started.add(j)
        if started:
            waiting = [j for j in waiting if j not in started]
    return wait


def write_swf(path: str | Path, num_jobs: int = 300_000, processors: int = 4096,
              memory_per_processor_kb: int = 2 ** 21, load: float = 0.7, seed: int = 0,
              overwrite: bool = False) -> Path:
    """Write a synthetic log (gzip-ed when the name ends in .gz) with a header giving MaxProcs, MaxNodes
    and the machine's memory, atomically, an existing file only with `overwrite`; returns the path."""
    path = Path(path)
    jobs = synthetic_jobs(num_jobs, processors, memory_per_processor_kb, load, seed)
    header = ["; Version: 2.2", f"; Computer: synthetic cluster (lightning_sched.traces.synthesis, seed {seed})",
              f"; MaxJobs: {num_jobs}", f"; MaxNodes: {processors}", f"; MaxProcs: {processors}",
              f"; Note: memory per processor {memory_per_processor_kb} KB, {memory_per_processor_kb * processors} "
              f"KB in all; greedy backfilling schedule, offered load {load}",
              f"; Note: fields {', '.join(SWF_FIELDS[:4])}, ... as SWF 2.2"]
    lines = [f"{j + 1} {int(s)} {int(w)} {int(r)} {int(p)} -1 {int(m)} {int(p)} {int(r)} {int(m)} 1 "
             f"{j % 97 + 1} 1 -1 1 -1 -1 -1"
             for j, (s, w, r, p, m) in enumerate(zip(jobs["submit"], jobs["wait"], jobs["run"], jobs["procs"],
                                                     jobs["memory"]))]
    text = "\n".join(header + lines) + "\n"
    data = gzip.compress(text.encode(), compresslevel=1) if path.suffix == ".gz" else text.encode()
    return write_file(path, lambda file: file.write(data), overwrite)
