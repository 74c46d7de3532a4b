"""Refusing sizes that would not fit in memory or time, before anything is allocated.

Every place that allocates in proportion to user-given sizes (the environment's state, a network's
weights, a generated workload) estimates its bytes first and calls `require_memory`, so a typo such
as `resource_units 1000000` ends in one line that names the fields, not in an hour of swapping.
A run that holds several such structures at once (evaluate.py's jobsets, their episodes' copies
and the env's state; a training run's draws, rollouts and validation set) also checks their sum
against the same budget first (`require_total`), since each alone may fit while together they do
not. Time has one budget too (`require_time`): what a run must compute before it prints its result
(evaluate.py's rollouts, one training iteration and its validation), estimated from its sizes, so
`--resource_units 1000000` is refused at once instead of running for half an hour.
"""
from __future__ import annotations

import math
import os

from .config import ConfigError

BUDGET_ENV = "LIGHTNING_SCHED_MEMORY_BYTES"
WORK_ENV = "LIGHTNING_SCHED_WORK_SECONDS"
# 10 minutes of estimated work before a result: the largest documented command is estimated at
# under a minute (evaluate.py --jobsets 2000), a typo in a size at hours
DEFAULT_WORK_SECONDS = 600
# the largest time any input may give (an SWF field of any kind, a decision snapshot's times), in
# seconds: 30 million years, exact as an int64 and as a float64
MAX_INPUT_SECONDS = 1e15


def _env_number(name: str, unit: str) -> float | None:
    """The environment variable `name` as a finite number >= 1; None when unset or empty."""
    given = os.environ.get(name)
    if not given:
        return None
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise ConfigError(f"{name} must be a finite number of {unit} >= 1, got {given!r}")
    return value


def memory_budget() -> int:
    """Bytes one allocation may take: $LIGHTNING_SCHED_MEMORY_BYTES, else half the machine's
    physical memory (the rest is for the interpreter, torch and the other allocations)."""
    given = _env_number(BUDGET_ENV, "bytes")
    if given is not None:
        return int(given)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): a conservative 8 GiB
        return 8 << 30


def format_bytes(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


def require_memory(what: str, estimated_bytes: float, fields: dict[str, object]) -> None:
    """Raise ConfigError when `what` would need more than `memory_budget()` bytes.

    fields: the sizes the estimate grows with, named as the user gave them (shown in the error).
    """
    budget = memory_budget()
    if estimated_bytes > budget:
        named = ", ".join(f"{k}={v}" for k, v in fields.items())
        raise ConfigError(f"{what} would need about {format_bytes(estimated_bytes)} ({named}), more than the "
                          f"{format_bytes(budget)} allowed (half the machine's memory; set {BUDGET_ENV} to change it)")


def require_total(what: str, parts: dict[str, float], fields: dict[str, object]) -> None:
    """One budget for what a run holds at once: ConfigError when the `parts` ({name: estimated
    bytes}) together exceed `memory_budget()`, naming the fields, the total and the largest part."""
    largest = max(parts, key=parts.get)
    require_memory(what, sum(parts.values()),
                   {**fields, "largest part": f"{largest} ~{format_bytes(parts[largest])}"})


def work_budget() -> float:
    """Seconds of estimated work a run may do before its result: $LIGHTNING_SCHED_WORK_SECONDS,
    else DEFAULT_WORK_SECONDS."""
    given = _env_number(WORK_ENV, "seconds")
    return DEFAULT_WORK_SECONDS if given is None else given


def format_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def require_time(what: str, parts: dict[str, float], fields: dict[str, object]) -> None:
    """ConfigError when the `parts` ({name: estimated seconds}, computed from sizes before anything
    is drawn) together exceed `work_budget()`, naming the fields, the total and the largest part."""
    budget, total = work_budget(), sum(parts.values())
    if total > budget:
        largest = max(parts, key=parts.get)
        if len(parts) > 1:
            fields = {**fields, "largest part": f"{largest} ~{format_seconds(parts[largest])}"}
        named = ", ".join(f"{k}={v}" for k, v in fields.items())
        raise ConfigError(f"{what} would take at least about {format_seconds(total)} ({named}), more than the "
                          f"{format_seconds(budget)} allowed (set {WORK_ENV} to a number of seconds to change it)")
