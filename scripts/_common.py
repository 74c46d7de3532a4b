"""Helpers shared by the scripts (run as files, so they share code through this module, never by
importing each other): how a script ends on bad input, where outputs go, workload and trace flags,
policies by name, the metrics table row, threads."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the scripts work from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from lightning_sched import ClusterConfig, ConfigError, DeepRMWorkload  # noqa: E402
from lightning_sched.acting import IDLE_RULES, rule_name  # noqa: E402
from lightning_sched.allocator import reuse_freed_memory  # noqa: E402
from lightning_sched.config import SIZE_FIELDS  # noqa: E402
from lightning_sched.heuristics import make_heuristic  # noqa: E402
from lightning_sched.traces import TraceWorkload, parse_capacity, propose_cluster  # noqa: E402

# set to 1 to see the full traceback of an error the scripts otherwise report in one line
TRACEBACK_ENV = "LIGHTNING_SCHED_TRACEBACK"
# outputs nobody named go here (relative to the working directory, as training runs' folders),
# never into the repository's docs/, checkpoints/ or configs/
RUNS = Path("runs")
# the episode metric each objective is judged by (SPEC "Episode metrics")
OBJECTIVE_METRIC = {"slowdown": "mean_slowdown", "completion_time": "mean_completion_time", "makespan": "makespan",
                    "utilization": "utilization", "deadline": "slo_hit_rate"}


def show_tracebacks() -> bool:
    """Whether the user asked for full tracebacks (LIGHTNING_SCHED_TRACEBACK set and not 0)."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


def run_main(main: Callable[[], int | None]) -> None:
    """Run a script's `main` and exit with its code. Bad input (a ConfigError or other ValueError,
    a file that is missing or cannot be written) ends in one line `error: ...` on stderr and exit
    code 2; the full traceback only with LIGHTNING_SCHED_TRACEBACK=1."""
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


class ScriptParser(argparse.ArgumentParser):
    """argparse for the scripts: a bad flag ends in one line naming it (and --help), not the
    usage of every flag."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum` (argparse's error names the flag and the value)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (a step size, a time scale)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


def idle_rule(text: str) -> str:
    """An argparse type: an idle rule's name (acting.IDLE_RULES), an old name mapped to its rule."""
    try:
        return rule_name(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(IDLE_RULES)}, got {text!r}") from None


def unused_path(path: Path) -> Path:
    """`path`, or with -2, -3, ... before its suffix when it exists (never overwrite an output)."""
    n = 2
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return candidate


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


def add_cluster_flags(parser: argparse.ArgumentParser, reward_default: bool = True) -> None:
    """ClusterConfig's fields as flags. The size fields default to None: a checkpoint's own cluster,
    else DeepRM's; given, every policy runs on that cluster (a checkpoint of DeepRM's image network
    only if it is its own size). Without `reward_default`, --objective and --slo_slowdown default
    to None too (the checkpoint's)."""
    g = parser.add_argument_group("cluster (ClusterConfig; default: the checkpoint's, else DeepRM's)")
    for name in SIZE_FIELDS:
        g.add_argument(f"--{name}", type=int, help=f"ClusterConfig.{name} (DeepRM: {getattr(ClusterConfig(), name)})")
    g.add_argument("--objective", default="slowdown" if reward_default else None,
                   help="ClusterConfig.objective (heuristics ignore it)")
    g.add_argument("--slo_slowdown", type=float, default=2.0 if reward_default else None,
                   help="default deadline a + floor(slo * d)")


def reward_from_args(args) -> dict:
    """The --objective and --slo_slowdown given (with reward_default=False, None means not given)."""
    return {k: getattr(args, k) for k in ("objective", "slo_slowdown") if getattr(args, k) is not None}


def cluster_from_args(args) -> tuple[ClusterConfig, bool]:
    """(the cluster the flags describe, whether any size flag was given). With --fit_cluster, the
    cluster `propose_cluster` proposes for --trace (printed), the size flags given overriding it, and
    --seconds_per_step set to the proposal's when not given."""
    sizes = {name: getattr(args, name) for name in SIZE_FIELDS if getattr(args, name) is not None}
    if getattr(args, "fit_cluster", False):
        if not args.trace:
            raise ConfigError("--fit_cluster proposes a cluster for a log: give --trace")
        proposal = propose_cluster(path=args.trace, resource_units=args.resource_units,
                                   seconds_per_step=args.seconds_per_step, max_horizon=args.max_horizon,
                                   simu_len=args.simu_len, **trace_params(args))
        print(proposal.describe(), flush=True)
        proposed = {name: getattr(proposal.cluster, name) for name in SIZE_FIELDS}
        sizes = {**proposed, **sizes}
        args.seconds_per_step = proposal.seconds_per_step
    return ClusterConfig(observation="none", **reward_from_args(args), **sizes), bool(sizes)


def workload_from_args(args, cfg: ClusterConfig) -> DeepRMWorkload:
    return DeepRMWorkload(load=args.load, simu_len=args.simu_len, short_prob=args.short_prob,
                          short_len=tuple(args.short_len), long_len=tuple(args.long_len),
                          dominant_units=tuple(args.dominant_units), other_units=tuple(args.other_units),
                          arrivals=args.arrivals, num_resources=cfg.num_resources, resource_units=cfg.resource_units)


def add_trace_flags(ap: argparse.ArgumentParser) -> None:
    """A real trace as the workload (lightning_sched.traces.TraceWorkload); --simu_len sets its windows."""
    g = ap.add_argument_group("trace workload (TraceWorkload; replaces the DeepRM flags except --simu_len)")
    g.add_argument("--trace", help="SWF (.swf, .swf.gz) or CSV trace file to cut jobsets from")
    g.add_argument("--seconds_per_step", type=float, help="trace seconds in one time step (required with --trace)")
    g.add_argument("--trace_format", choices=("auto", "swf", "csv"), default="auto")
    g.add_argument("--trace_resources", nargs="+", metavar="NAME",
                   help="trace resources in cluster order: SWF processors/memory (default both), CSV demand columns")
    # --capacity and --split: shorter aliases, the names `figures.py trace` documents
    g.add_argument("--trace_capacity", "--capacity", nargs="*", metavar="NAME=VALUE",
                   help="virtual cluster capacity per trace resource (SWF processors default: the header's MaxProcs)")
    g.add_argument("--oversize", choices=("clip", "drop"), default="clip",
                   help="jobs longer than max_job_len or larger than max_job_units")
    g.add_argument("--trace_statuses", type=int, nargs="*", default=[1],
                   help="job statuses kept (default 1, completed; none given: all)")
    g.add_argument("--drop_unknown_status", action="store_true", help="drop jobs whose status is -1 (default: keep)")
    g.add_argument("--trace_split", "--split", choices=("train", "test", "all"), default="test",
                   help="time-ordered split to cut windows from (default test: held out from training)")
    g.add_argument("--test_fraction", type=float, default=0.25,
                   help="share of the trace's time range in the test split")
    g.add_argument("--trace_windows", choices=("random", "consecutive"), default="random")
    g.add_argument("--target_load", type=float, help="compress the trace's time to reach this offered load")
    g.add_argument("--time_compression", type=float, default=1.0,
                   help="shrink the time between submits by this factor (the offered load grows by it)")
    g.add_argument("--csv_submit", default="submit_time", help="CSV column of the submit time (seconds)")
    g.add_argument("--csv_run_time", default="run_time", help="CSV column of the run time (seconds)")
    g.add_argument("--csv_status", help="CSV column of the job status (default: none)")
    g.add_argument("--csv_wait", help="CSV column of the wait from submit to start (default: none, jobs start "
                   "when submitted)")
    g.add_argument("--trace_start", choices=("log", "empty"), default="log",
                   help="a window starts as the log was (running jobs hold their resources, waiting jobs queue) "
                   "or with an idle cluster")
    g.add_argument("--fit_cluster", action="store_true",
                   help="propose the cluster for --trace at the log's own resolution (units = its processors or "
                   "--resource_units, the step length and horizon that clip < 1%% of jobs) and use it; size flags "
                   "given override it")
    g.add_argument("--max_horizon", type=int, default=128, help="--fit_cluster: the longest horizon to propose")


def trace_workload_from_args(args, cluster: ClusterConfig, **params) -> TraceWorkload:
    """The TraceWorkload the trace flags describe; `params` overrides them or adds fields they lack
    (time_compression, split)."""
    if args.seconds_per_step is None:
        raise ConfigError("--trace needs --seconds_per_step (or --fit_cluster to propose one)")
    return TraceWorkload.for_cluster(
        cluster, args.trace, args.seconds_per_step,
        **{"oversize": args.oversize, "split": args.trace_split, "test_fraction": args.test_fraction,
           "windows": args.trace_windows, "simu_len": args.simu_len, "start_state": args.trace_start,
           "target_load": args.target_load, "time_compression": args.time_compression, **trace_params(args), **params})


def trace_params(args) -> dict:
    """The TraceWorkload fields that say how to read the log (format, resources, capacity, statuses, CSV columns)."""
    return dict(format=args.trace_format, capacity=parse_capacity(args.trace_capacity),
                resources=None if args.trace_resources is None else tuple(args.trace_resources),
                statuses=tuple(args.trace_statuses) if args.trace_statuses else None,
                keep_unknown_status=not args.drop_unknown_status, csv_submit=args.csv_submit,
                csv_run_time=args.csv_run_time, csv_status=args.csv_status, csv_wait=args.csv_wait)


def heuristic(name: str, cfg: ClusterConfig, device="cpu", seed: int = 0):
    """A heuristic by name; `random` draws from its own generator seeded with `seed`, so its
    numbers repeat."""
    kwargs = {"generator": torch.Generator(device=device).manual_seed(seed)} if name == "random" else {}
    return make_heuristic(name, cfg, **kwargs)


def named_policies(cfg: ClusterConfig, heuristics: list[str], ckpts: list[str], device="cpu",
                   resize: bool = False) -> dict:
    """{name: policy}: the heuristics by name, then each NAME=PATH.ckpt checkpoint under NAME
    (acting as the checkpoint says: greedy or sampled); with `resize`, on `cfg`'s cluster size."""
    from lightning_sched.checkpoints import load_policy

    policies = {h: heuristic(h, cfg, device) for h in heuristics}
    for item in ckpts:
        name, _, path = item.partition("=")
        policies[name], _ = load_policy(path, device=device, cluster=cfg if resize else None)
    return policies


def table_header(first: str = "policy") -> str:
    """The header of the metrics table format_row writes; `first` names its first column."""
    return (f"{first:28s} {'mean slowdown':>16s} {'completion time':>16s} {'makespan':>14s} "
            f"{'utilization':>16s} {'SLO hit rate':>16s} {'jobs':>8s}")


def format_row(name: str, s: dict) -> str:
    """One row of the metrics table: `name`, then mean ± 95% CI of each metric, and the jobs."""
    def cell(metric, digits=3):
        return f"{s[metric]:.{digits}f} ± {s[metric + '_ci95']:.{digits}f}"

    return (f"{name:28s} {cell('mean_slowdown'):>16s} {cell('mean_completion_time', 2):>16s} "
            f"{cell('makespan', 1):>14s} {cell('utilization'):>16s} {cell('slo_hit_rate'):>16s} {s['num_jobs']:>8d}")


def set_threads(threads: int, reuse_memory: bool = True) -> int:
    """Torch's intra-op threads, set explicitly (timings are reported with it); and, unless
    `reuse_memory` is False, glibc told to keep freed blocks for the next step
    (`lightning_sched.allocator`)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"--threads must be an integer >= 1, got {threads!r}")
    if reuse_memory:
        reuse_freed_memory()
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return torch.get_num_threads()
