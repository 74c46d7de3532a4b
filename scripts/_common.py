"""What only the scripts share (run as files, they share code through this module, never by importing
each other): the checkout on sys.path, how a script ends on bad input, where outputs go, policies by
name, the metrics table row, threads. The flags (workload, cluster, trace) and the argparse types are
`lightning_sched.cli`'s, which the scripts import directly."""
from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch  # noqa: E402

from _checkout import ROOT  # noqa: F401  (the checkout on sys.path before lightning_sched; ROOT for the scripts)
from lightning_sched import ClusterConfig, ConfigError  # noqa: E402
from lightning_sched.allocator import reuse_freed_memory  # noqa: E402
from lightning_sched.config import is_int  # noqa: E402
from lightning_sched.evaluation import ci_text  # noqa: E402
from lightning_sched.heuristics import make_heuristic  # noqa: E402
from lightning_sched.threads import fixed_threads, use_free_cores  # noqa: E402

# set to 1 to see the full traceback of an error the scripts otherwise report in one line
TRACEBACK_ENV = "LIGHTNING_SCHED_TRACEBACK"
# outputs nobody named go here (relative to the working directory, as training runs' folders),
# never into the repository's docs/, checkpoints/ or configs/
RUNS = Path("runs")


def show_tracebacks() -> bool:
    """Whether the user asked for full tracebacks (LIGHTNING_SCHED_TRACEBACK set and not 0)."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


def one_line_warnings() -> None:
    """The project's own warnings (a trace's clipping, windows that repeat) as one line each,
    `TraceWarning: ...`, not followed by the source line that raised them; others as Python writes them."""
    python_format = warnings.formatwarning

    def format_warning(message, category, filename, lineno, line=None) -> str:
        if category.__module__.startswith("lightning_sched."):
            return f"{category.__name__}: {message}\n"
        return python_format(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning


def run_main(main: Callable[[], int | None]) -> None:
    """Run a script's `main` and exit with its code. Bad input (a ConfigError or other ValueError,
    a file that is missing or cannot be written) ends in one line `error: ...` on stderr and exit
    code 2; the full traceback only with LIGHTNING_SCHED_TRACEBACK=1."""
    one_line_warnings()
    try:
        code = main()
    except (ValueError, OSError) as error:
        if show_tracebacks():
            raise
        # a ConfigError names the field and the value; another error may need its traceback to place it
        hint = "" if isinstance(error, ConfigError) else f" ({TRACEBACK_ENV}=1 shows where)"
        print(f"error: {error}{hint}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)


def split_env(argv: list[str]) -> tuple[str, list[str]]:
    """(the --env a command names, deeprm when none; its other arguments): the queue env's scripts
    parse flags of their own (`--env queue --help` lists them). ConfigError for another value."""
    argv = [part for arg in argv for part in (arg.split("=", 1) if arg.startswith("--env=") else [arg])]
    if "--env" not in argv:
        return "deeprm", argv
    at = argv.index("--env")
    env = argv[at + 1] if at + 1 < len(argv) else ""
    if env not in ("deeprm", "queue"):
        raise ConfigError(f"--env must be deeprm or queue, got {env or 'nothing'}")
    return env, argv[:at] + argv[at + 2:]


def heuristic(name: str, cfg: ClusterConfig, device="cpu", seed: int = 0):
    """A heuristic by name; `random` draws from its own generator seeded with `seed`, so its
    numbers repeat."""
    kwargs = {"generator": torch.Generator(device=device).manual_seed(seed)} if name == "random" else {}
    return make_heuristic(name, cfg, **kwargs)


def named_policies(cfg: ClusterConfig, heuristics: list[str], ckpts: list[str], device="cpu",
                   resize: bool = False) -> dict:
    """{name: policy}: the heuristics by name, then each NAME=PATH.ckpt checkpoint under NAME
    (acting as the checkpoint says: greedy or sampled); with `resize`, on `cfg`'s cluster size."""
    from lightning_sched.policies.checkpoints import load_policy

    policies = {h: heuristic(h, cfg, device) for h in heuristics}
    for name, path in named_files(ckpts, "--ckpt", taken=heuristics).items():
        policies[name], _ = load_policy(path, device=device, cluster=cfg if resize else None)
    return policies


def named_files(items: list[str], flag: str, taken=()) -> dict[str, str]:
    """NAME=PATH items as {name: path}; ConfigError naming `flag` for an item without a name or a
    path, or a name given twice or already `taken` (a heuristic's), which would silently replace it."""
    named: dict[str, str] = {}
    for item in items:
        name, _, path = item.partition("=")
        if not name or not path:
            raise ConfigError(f"{flag} {item!r}: expected NAME=PATH")
        if name in named or name in taken:
            raise ConfigError(f"{flag} {item!r}: the name {name!r} is taken (every line of a figure needs its own)")
        named[name] = path
    return named


NAME_WIDTH = 28  # the first column of the metrics table; longer names widen it (evaluate.py) or get their own line


def table_header(first: str = "policy", width: int = NAME_WIDTH) -> str:
    """The header of the metrics table format_row writes; `first` names its first column. Times
    are in the env's time steps; table_units() is the line below it saying which way is better."""
    return (f"{first:{width}s} {'mean slowdown':>17s} {'completion (steps)':>19s} {'makespan (steps)':>17s} "
            f"{'utilization':>17s} {'SLO hit rate':>17s} {'jobs':>8s}")


def table_units(width: int = NAME_WIDTH) -> str:
    """The line under table_header: each metric's direction (mean ± 95% CI over jobsets)."""
    lower, higher = "lower is better", "higher is better"
    return f"{'(mean ± 95% CI)':{width}s} {lower:>17s} {lower:>19s} {lower:>17s} {higher:>17s} {higher:>17s}"


def format_row(name: str, s: dict, width: int = NAME_WIDTH) -> str:
    """One row of the metrics table: `name`, then mean ± 95% CI of each metric, and the jobs. A name
    longer than `width` gets a line of its own, so the columns stay aligned."""
    def cell(metric, digits=3):
        return f"{s[metric]:.{digits}f} ± {ci_text(s[metric + '_ci95'], f'.{digits}f')}"

    lead = f"{name}\n{'':{width}s}" if len(name) > width else f"{name:{width}s}"
    return (f"{lead} {cell('mean_slowdown'):>17s} {cell('mean_completion_time', 2):>19s} "
            f"{cell('makespan', 1):>17s} {cell('utilization'):>17s} {cell('slo_hit_rate'):>17s} {s['num_jobs']:>8d}")


def set_threads(threads: int | str, reuse_memory: bool = True) -> int:
    """Torch's intra-op threads: a fixed number, or "auto", the cores other processes leave free,
    re-counted as the load moves (`lightning_sched.threads`); the count now (timings are reported
    with it). Unless `reuse_memory` is False, glibc told to keep freed blocks for the next step
    (`lightning_sched.allocator`)."""
    if threads != "auto" and not is_int(threads, 1):
        raise ConfigError(f"--threads must be auto or an integer >= 1, got {threads!r}")
    if reuse_memory:
        reuse_freed_memory()
    if threads == "auto":
        return use_free_cores()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return fixed_threads(threads)
