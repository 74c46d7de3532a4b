"""A synthetic Standard Workload Format log: a stand-in for a cluster's own log, with a memory column
and a schedule the cluster could have run, for tests and scale checks (never downloaded, never committed).

    write_swf(path, num_jobs=300_000, processors=4096, memory_per_processor_kb=2 ** 21, load=0.7, seed=0)

Jobs (per job, independently):
    processors   2**k, k uniform in 0..log2(processors) - 2 (a quarter of the machine at most), or the
                 whole machine with probability 0.01
    run time     log-uniform in [10 s, 36 h]
    memory       used KB per processor log-uniform in [share/16, 2 share], share = the machine's memory
                 per processor (so some jobs are memory-bound), at most the machine's memory in all
    submit       a Poisson process whose rate gives offered processor load `load`
The log's schedule is first-come first-served without backfilling: a job starts when every earlier
job has started and its processors and memory are free; the wait (field 3) is start - submit. So the
jobs running at any time fit the machine, on both resources, as in a real log.
"""
from __future__ import annotations

import gzip
import heapq
import math
from pathlib import Path

import numpy as np

from .trace_files import SWF_FIELDS

MIN_RUN_S, MAX_RUN_S = 10.0, 36 * 3600.0


def synthetic_jobs(num_jobs: int, processors: int, memory_per_processor_kb: int, load: float, seed: int = 0
                   ) -> dict[str, np.ndarray]:
    """The jobs of a synthetic log in submit order: submit, wait, run (seconds, integers), procs,
    memory (KB per processor), each an array of num_jobs."""
    rng = np.random.default_rng(seed)
    top = max(0, int(math.log2(processors)) - 2)
    procs = 2 ** rng.integers(0, top + 1, num_jobs)
    procs = np.where(rng.random(num_jobs) < 0.01, processors, procs)
    run = np.exp(rng.uniform(math.log(MIN_RUN_S), math.log(MAX_RUN_S), num_jobs)).round()
    memory = np.exp(rng.uniform(math.log(memory_per_processor_kb / 16), math.log(2 * memory_per_processor_kb),
                                num_jobs))
    memory = np.minimum(memory, memory_per_processor_kb * processors / procs).round()  # a job fits the machine
    mean_gap = float((procs * run).sum()) / (load * processors * num_jobs)
    submit = np.cumsum(rng.exponential(mean_gap, num_jobs)).round()
    submit -= submit[0]
    wait = fcfs_waits(submit, run, procs, memory * procs, processors, memory_per_processor_kb * processors)
    return {"submit": submit, "wait": wait, "run": run, "procs": procs, "memory": memory}


def fcfs_waits(submit: np.ndarray, run: np.ndarray, procs: np.ndarray, memory: np.ndarray, capacity: int,
               memory_capacity: float) -> np.ndarray:
    """Waits of first-come first-served without backfilling on `capacity` processors and memory."""
    running: list[tuple[float, int, float]] = []  # (end, processors, memory) of the jobs started
    free, free_memory, clock = capacity, memory_capacity, 0.0
    wait = np.empty_like(submit)
    for j in range(len(submit)):
        clock = max(clock, float(submit[j]))  # no job starts before an earlier one
        while running and running[0][0] <= clock:  # release what has ended by now
            _, p, m = heapq.heappop(running)
            free, free_memory = free + p, free_memory + m
        while free < procs[j] or free_memory < memory[j] - 1e-6:
            end, p, m = heapq.heappop(running)
            clock = max(clock, end)
            free, free_memory = free + p, free_memory + m
        free, free_memory = free - int(procs[j]), free_memory - float(memory[j])
        heapq.heappush(running, (clock + float(run[j]), int(procs[j]), float(memory[j])))
        wait[j] = clock - submit[j]
    return wait


def write_swf(path: str | Path, num_jobs: int = 300_000, processors: int = 4096,
              memory_per_processor_kb: int = 2 ** 21, load: float = 0.7, seed: int = 0) -> Path:
    """Write a synthetic log (gzip-ed when the name ends in .gz) with a header giving MaxProcs, MaxNodes
    and the machine's memory; returns the path."""
    path = Path(path)
    jobs = synthetic_jobs(num_jobs, processors, memory_per_processor_kb, load, seed)
    header = ["; Version: 2.2", f"; Computer: synthetic cluster (lightning_sched.trace_synthesis, seed {seed})",
              f"; MaxJobs: {num_jobs}", f"; MaxNodes: {processors}", f"; MaxProcs: {processors}",
              f"; Note: memory per processor {memory_per_processor_kb} KB, {memory_per_processor_kb * processors} "
              f"KB in all; first-come first-served schedule, offered load {load}",
              f"; Note: fields {', '.join(SWF_FIELDS[:4])}, ... as SWF 2.2"]
    lines = [f"{j + 1} {int(s)} {int(w)} {int(r)} {int(p)} -1 {int(m)} {int(p)} {int(r)} {int(m)} 1 "
             f"{j % 97 + 1} 1 -1 1 -1 -1 -1"
             for j, (s, w, r, p, m) in enumerate(zip(jobs["submit"], jobs["wait"], jobs["run"], jobs["procs"],
                                                     jobs["memory"]))]
    text = "\n".join(header + lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    else:
        path.write_text(text)
    return path
