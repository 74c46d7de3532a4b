"""Torch's intra-op thread count from the cores other processes leave free.

Torch splits each op, and the native kernels (native_rows.h) their rows, evenly over its OpenMP
threads and waits for the slowest. When another process keeps a core busy, the thread that shares
it runs at half speed or less and every other thread waits on it at each op's end: with one busy
competitor on two cores, two threads took 2.5-11x the time of one (docs/performance.md). Waiting
passively (OMP_WAIT_POLICY=passive) does not help, the even split is what stalls; fewer threads do.

`FreeCores` counts the cores other processes used since its last look (/proc/stat less this
process's own time, /proc/self/stat) and sets torch's thread count to the cores left, at most
`most`; `follow_load()` re-checks every CHECK_SECONDS while one is active, so a competitor that
starts or stops mid-run moves the count. Only Linux has the counters; elsewhere the count stays
at `most`. The thread count changes how torch sums in parallel: a run that must repeat to the
last bit fixes it (the scripts' --threads N).
"""
from __future__ import annotations

import os
import time

import torch

CHECK_SECONDS = 0.5  # how often follow_load looks again: the competitor's share over that long
SAMPLE_SECONDS = 0.2  # the first look, before anything of ours runs
SPARE = 0.3  # a core counts as free when others leave at least 1 - SPARE of it idle (noise, short jobs)


def _cpu_ticks(cpus: set[int]) -> int | None:
    """Busy clock ticks of `cpus` since boot (steal counts: the hypervisor took it), None without /proc."""
    try:
        with open("/proc/stat") as f:
            lines = f.readlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        busy += user + nice + system + irq + softirq + steal
    return busy


def _own_ticks() -> int | None:
    """This process's user + system clock ticks, every thread's."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def usable_cores() -> set[int]:
    """The CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


class FreeCores:
    """Torch's thread count kept at the cores free of other processes, between 1 and `most`."""

    def __init__(self, most: int | None = None):
        self.cpus = usable_cores()
        self.most = max(1, min(most or len(self.cpus), len(self.cpus)))
        self.tick_seconds = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
        self._last = self._sample()

    def _sample(self) -> tuple[float, int, int] | None:
        cpu, own = _cpu_ticks(self.cpus), _own_ticks()
        return None if cpu is None or own is None else (time.monotonic(), cpu, own)

    def others_busy(self) -> float | None:
        """Cores other processes kept busy since the last call (None without the counters, or
        before any time has passed); starts the next interval."""
        now = self._sample()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return None
        seconds = now[0] - last[0]
        return max(0.0, ((now[1] - last[1]) - (now[2] - last[2])) * self.tick_seconds / seconds)

    def threads(self, others: float | None) -> int:
        """The thread count for `others` cores busy elsewhere (`most` when unknown)."""
        if others is None:
            return self.most
        return max(1, min(self.most, int(len(self.cpus) - others + SPARE)))

    def apply(self) -> int:
        """Set torch's thread count from the cores busy elsewhere since the last call; the count."""
        threads = self.threads(self.others_busy())
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        return threads


_active: FreeCores | None = None
_next_check = 0.0


def use_free_cores(most: int | None = None, sample_seconds: float = SAMPLE_SECONDS) -> int:
    """Set torch's thread count to the cores free now (looking for `sample_seconds`), at most `most`
    (default: every usable core), and keep following the load (`follow_load`); the count."""
    global _active, _next_check
    _active = FreeCores(most)
    time.sleep(sample_seconds)
    _next_check = time.monotonic() + CHECK_SECONDS
    return _active.apply()


def fixed_threads(threads: int) -> int:
    """Stop following the load and use `threads` threads; the count torch reports."""
    global _active
    _active = None
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def follow_load() -> None:
    """Under `use_free_cores`, re-count the free cores every CHECK_SECONDS (cheap otherwise: the
    native kernels call it at every step, from the thread that drives torch)."""
    global _next_check
    if _active is None:
        return
    now = time.monotonic()
    if now >= _next_check:
        _next_check = now + CHECK_SECONDS
        _active.apply()
