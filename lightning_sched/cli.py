"""The command line shared by the scripts (and console commands): the argparse parser and types, the
workload, cluster and trace flags, and what they describe. The rest of the library parses no command line.

One direction, flags to episodes:

    args --setup_from_args--> [trace flags --read_trace--> Trace --propose_cluster--> ClusterProposal]
         --> Setup(cluster: ClusterConfig, sized, trace: TraceFlags) --TraceFlags.workload(cluster)--> TraceWorkload

The parsed flags are never written to: what --fit_cluster proposes (sizes, the step length) travels
in the returned `Setup`.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .config import SIZE_FIELDS, ClusterConfig, ConfigError
from .policies.acting import IDLE_RULES, rule_name
from .policies.checkpoints import read_record
from .script_parser import ScriptParser  # noqa: F401 (the scripts import it from here)
from .traces import JobRules, TraceError, TraceWorkload, propose_cluster, read_trace
from .workloads import DeepRMWorkload


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


def thread_count(text: str) -> int | str:
    """An argparse type: "auto" (the cores other processes leave free, followed as the load moves:
    lightning_sched.threads) or an integer >= 1."""
    return text if text == "auto" else at_least(1)(text)


THREADS_HELP = ("torch's intra-op threads: auto (default: the cores other processes leave free, re-counted "
                "as the load moves) or a number (fixed: a run that must repeat to the last bit)")


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (a step size, a time scale)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (a weight)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value}")
    return value


def open_fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a share of a log)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {value}")
    return value


SEED_LIMIT = 2**31  # training seeds are (1_000_003 x seed + iteration) x 4_099 + ...: int64 for any seed below


def seed_number(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2^31)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^31), got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^31), got {value}")
    return value


def torch_device(text: str) -> str:
    """An argparse type: a torch device this machine has (cpu; cuda or cuda:N with CUDA; mps)."""
    import torch

    try:
        parsed = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (cpu, cuda, cuda:0, ...)") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: CUDA is not available on this machine (torch "
                                         f"{torch.__version__}); use cpu")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA devices")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: MPS is not available on this machine; use cpu")
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise argparse.ArgumentTypeError(f"{text!r}: the scripts run on cpu, cuda or mps")
    return text


def parse_capacity(items: list[str] | None) -> dict | tuple | None:
    """Command-line capacities: ['processors=128', 'memory=4e6'] -> dict, ['128'] -> tuple."""
    if not items:
        return None
    named = ["=" in item for item in items]
    if any(named) and not all(named):
        raise TraceError(f"capacities {items}: give all as NAME=VALUE or all as plain values")
    try:
        if all(named):
            return {k.strip(): float(v) for k, v in (item.split("=", 1) for item in items)}
        return tuple(float(item) for item in items)
    except ValueError as exc:
        raise TraceError(f"capacities {items}: not a number ({exc})") from None


def require_distinct(flag: str, values) -> None:
    """ConfigError naming the first value of `flag` given twice (results are kept by value: one
    would replace the other)."""
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise ConfigError(f"{flag} {twice!r} is given twice")


# ----- DeepRM's workload ---------------------------------------------------------------------------
WORKLOAD_FLAGS = ("load", "simu_len", "short_prob", "short_len", "long_len", "dominant_units", "other_units",
                  "arrivals")
"""DeepRMWorkload's parameters as flags (add_workload_flags)."""
GENERATOR_FLAGS = tuple(name for name in WORKLOAD_FLAGS if name != "simu_len")
"""Those of its job generator: a trace's jobs replace them all (simu_len sets a trace window's length)."""


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
    """The DeepRMWorkload the workload flags describe, on cfg's resources and units."""
    given = {name: getattr(args, name) for name in WORKLOAD_FLAGS}
    return DeepRMWorkload(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()},
                          num_resources=cfg.num_resources, resource_units=cfg.resource_units)


def workload_flags(workload) -> list[str] | None:
    """The workload flags that describe `workload` (for DeepRM's generator, those that differ from its
    defaults), the inverse of `workload_from_args`; a trace's flags read its test split (the range a
    run on its train split never read); None for a family, which these flags cannot describe."""
    if isinstance(workload, TraceWorkload):
        return trace_flags(workload)
    if not isinstance(workload, DeepRMWorkload):
        return None
    flags, default = [], DeepRMWorkload()
    for name in WORKLOAD_FLAGS:
        value = getattr(workload, name)
        if value != getattr(default, name):
            flags += [f"--{name}", *map(str, value if isinstance(value, (tuple, list)) else [value])]
    return flags


def trace_flags(workload: TraceWorkload) -> list[str]:
    """The trace flags that read `workload`'s log as it does (add_trace_flags), on its test split."""
    def exact(value: float) -> str:  # every digit: 257698037 KB of memory, not 2.57698e+08
        return str(int(value)) if float(value).is_integer() else repr(float(value))

    report, split = workload.report, "test" if workload.split == "train" else workload.split
    flags = ["--trace", str(workload.path), "--seconds_per_step", exact(workload.seconds_per_step),
             "--simu_len", str(workload.simu_len), "--trace_split", split,
             "--test_fraction", exact(workload.test_fraction), "--trace_windows", workload.windows,
             "--trace_start", workload.start_state, "--oversize", workload.oversize,
             "--trace_resources", *report.resources,
             "--trace_capacity", *(f"{name}={exact(value)}" for name, value in report.capacity.items()),
             "--trace_statuses", *map(str, workload.statuses or ())]
    if not workload.keep_unknown_status:
        flags.append("--drop_unknown_status")
    if workload.target_load is not None:
        flags += ["--target_load", exact(workload.target_load)]
    elif workload.time_compression != 1.0:
        flags += ["--time_compression", exact(workload.time_compression)]
    if workload.format != "auto":
        flags += ["--trace_format", workload.format]
    for name in ("csv_submit", "csv_run_time", "csv_status", "csv_wait"):
        if getattr(workload, name) is not None and report.format == "csv":
            flags += [f"--{name}", getattr(workload, name)]
    return flags


# ----- the cluster ---------------------------------------------------------------------------------
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


# ----- a real trace --------------------------------------------------------------------------------
def add_trace_flags(ap: argparse.ArgumentParser) -> None:
    """A real trace as the workload (lightning_sched.traces.TraceWorkload); --simu_len sets its windows."""
    g = ap.add_argument_group("trace workload (TraceWorkload; replaces the DeepRM flags except --simu_len)")
    g.add_argument("--trace", help="SWF (.swf, .swf.gz) or CSV trace file to cut jobsets from")
    g.add_argument("--seconds_per_step", type=float,
                   help="trace seconds in one time step (with --trace: given, or proposed by --fit_cluster)")
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
    g.add_argument("--test_fraction", type=open_fraction, default=0.25,
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
                   "--resource_units, the step length and horizon that clip fewer than --max_clipped of its "
                   "train split's jobs) and use it; size flags given override it")
    g.add_argument("--max_horizon", type=at_least(1), default=128, help="--fit_cluster: the longest horizon to propose")
    g.add_argument("--max_clipped", type=open_fraction, default=0.01,
                   help="--fit_cluster: the share of jobs the proposal may cut to its longest job (default 0.01)")


# the TraceWorkload fields that say how to read the log file (read_trace's arguments)
READ_FIELDS = ("format", "resources", "csv_submit", "csv_run_time", "csv_status", "csv_wait")


@dataclass(frozen=True)
class TraceFlags:
    """A trace as the trace flags give it: the file, the step length (--seconds_per_step, else the
    proposal's; None: neither) and TraceWorkload's other fields, but for the cluster's."""

    path: str
    seconds_per_step: float | None
    params: dict = field(default_factory=dict)

    @property
    def rules(self) -> JobRules:
        """Which job lines are jobs, as the workloads built from these flags keep them."""
        return JobRules(self.params["statuses"], self.params["keep_unknown_status"])

    def read(self):
        """The log as a `Trace` (parsed once per file version: the workloads reuse it)."""
        return read_trace(self.path, **{k: self.params[k] for k in READ_FIELDS})

    def workload(self, cluster: ClusterConfig, **params) -> TraceWorkload:
        """The TraceWorkload on `cluster`; `params` override the flags' fields (split, time_compression, ...)."""
        if self.seconds_per_step is None:
            raise ConfigError("--trace needs --seconds_per_step (or --fit_cluster to propose one)")
        return TraceWorkload.for_cluster(cluster, self.path, self.seconds_per_step, **{**self.params, **params})


def trace_from_args(args) -> TraceFlags | None:
    """The trace flags as a TraceFlags; None without --trace."""
    if not getattr(args, "trace", None):
        return None
    return TraceFlags(args.trace, args.seconds_per_step, dict(
        format=args.trace_format, capacity=parse_capacity(args.trace_capacity),
        resources=None if args.trace_resources is None else tuple(args.trace_resources),
        statuses=tuple(args.trace_statuses) if args.trace_statuses else None,
        keep_unknown_status=not args.drop_unknown_status, csv_submit=args.csv_submit,
        csv_run_time=args.csv_run_time, csv_status=args.csv_status, csv_wait=args.csv_wait,
        oversize=args.oversize, split=args.trace_split, test_fraction=args.test_fraction,
        windows=args.trace_windows, simu_len=args.simu_len, start_state=args.trace_start,
        target_load=args.target_load, time_compression=args.time_compression))


class Setup(NamedTuple):
    """What the cluster and trace flags describe: the cluster, whether any size was given (or proposed),
    and the trace (None without --trace)."""

    cluster: ClusterConfig
    sized: bool
    trace: TraceFlags | None


def setup_from_args(args, checkpoints: Sequence[str] = ()) -> Setup:
    """The cluster the flags describe and the trace to replay on it. With --fit_cluster, the cluster
    `propose_cluster` proposes for --trace from its train split's jobs whatever split is replayed (so
    training and evaluation get one cluster; printed), the size flags given overriding it, and the
    trace's step length the proposal's when --seconds_per_step is not given; its number of
    resources --num_resources, else that of the `checkpoints` (paths) to run on it (their networks
    fix it), else the log's own."""
    sizes = {name: getattr(args, name) for name in SIZE_FIELDS if getattr(args, name) is not None}
    trace = trace_from_args(args)
    if trace is not None:  # the log's jobs replace DeepRM's generator: its flags would change nothing
        default = DeepRMWorkload()
        for name in GENERATOR_FLAGS:
            value = getattr(args, name, None)
            value = tuple(value) if isinstance(value, list) else value
            if value is not None and value != getattr(default, name):
                raise ConfigError(f"--{name} {value}: --trace replays the log's jobs, which DeepRM's workload flags "
                                  "do not change (--simu_len sets the window length)")
    if getattr(args, "fit_cluster", False):
        if trace is None:
            raise ConfigError("--fit_cluster proposes a cluster for a log: give --trace")
        proposal = propose_cluster(
            trace.read(), trace.rules, resources=trace.params["resources"], capacity=trace.params["capacity"],
            num_resources=sizes.get("num_resources", checkpoint_resources(checkpoints)),
            resource_units=args.resource_units, seconds_per_step=args.seconds_per_step,
            max_horizon=args.max_horizon, simu_len=args.simu_len, sized_share=1 - args.test_fraction,
            max_clipped=args.max_clipped)
        print(proposal.describe(), flush=True)
        sizes = {**{name: getattr(proposal.cluster, name) for name in SIZE_FIELDS}, **sizes}
        trace = TraceFlags(trace.path, proposal.seconds_per_step, trace.params)
    return Setup(ClusterConfig(observation="none", **reward_from_args(args), **sizes), bool(sizes), trace)


def checkpoint_resources(paths: Sequence[str]) -> int | None:
    """The num_resources every cluster-policy checkpoint of `paths` was trained with; None without
    checkpoints (or when they differ: running them on one cluster is refused later, naming the field)."""
    found = {read_record(path).cluster.num_resources for path in paths}
    return found.pop() if len(found) == 1 else None


def idle_rule(text: str) -> str:
    """An argparse type: an idle rule's name (acting.IDLE_RULES), an old name mapped to its rule."""
    try:
        return rule_name(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(IDLE_RULES)}, got {text!r}") from None


def add_log_reading_flags(ap: argparse.ArgumentParser) -> None:
    """How the queue env reads an SWF log onto its cluster (queue.log.read_queue_log), and at which
    load it replays it (--load: a site's arrivals, `site_from_args`)."""
    ap.add_argument("--nodes", type=at_least(1), help="the cluster's nodes (default: the log header's MaxNodes, or "
                    "MaxProcs / --processors_per_node without it)")
    ap.add_argument("--processors_per_node", type=at_least(1),
                    help="default: the header's MaxProcs / MaxNodes (1 without MaxNodes)")
    ap.add_argument("--oversize", choices=("refuse", "drop"), default="refuse",
                    help="a job larger than the cluster: refused with its line, or dropped and counted in the summary")
    ap.add_argument("--load", type=positive_float, help="scale the log's inter-arrival times to this offered load "
                    "(default: as recorded; the jobs and their run times stay)")


def log_reading_args(nodes: int | None = None, processors_per_node: int | None = None, oversize: str = "refuse",
                     load: float | None = None) -> list[str]:
    """The flags of `add_log_reading_flags` that read logs as a training run read them: those not at
    their defaults."""
    given = {"nodes": nodes, "processors_per_node": processors_per_node, "load": load,
             "oversize": None if oversize == "refuse" else oversize}
    return [f"--{name}={value}" for name, value in given.items() if value is not None]


def add_site_flags(ap: argparse.ArgumentParser) -> None:
    """The queue env's site flags (lightning_sched.queue.sites): a declared site, or a log rewritten
    with hidden parameters given here."""
    from .queue.sites import TRACES_DIR

    g = ap.add_argument_group("site (queue env): what differs between clusters and the state cannot show")
    g.add_argument("--site", help="a declared site by name (lightning_sched.queue.sites: TRAINING_SITES, "
                                  "HELDOUT_SITES); its log, from --traces_dir, unless --trace is given")
    g.add_argument("--traces_dir", default=TRACES_DIR, help="where declared sites' logs are")
    g.add_argument("--request_factors", nargs="+", metavar="P:LOW:HIGH",
                   help="requested = actual x a factor: with probability P log-uniform in [LOW, HIGH]")
    g.add_argument("--max_request", type=at_least(1), help="seconds: no request above this")
    g.add_argument("--size_length_correlation", type=float,
                   help="re-pair processors with run times to this rank correlation, in [-1, 1]")
    g.add_argument("--site_seed", type=seed_number, help="seed of the site model's draws (default 0)")


def site_from_args(args):
    """(the declared site's log path or None, the SiteModel or None) of the site flags; --load, when
    the parser has it, is the site's arrival load. ConfigError naming the flag."""
    from pathlib import Path

    from .queue.sites import TRACES_DIR, SiteModel, declared_sites

    custom = [f for f in ("request_factors", "max_request", "size_length_correlation") if getattr(args, f) is not None]
    load = getattr(args, "load", None)
    if args.site is None and Path(args.traces_dir) != Path(TRACES_DIR):
        raise ConfigError(f"--traces_dir {args.traces_dir} is where a declared --site's log is read: give --site")
    if args.site_seed is not None and not (custom and args.site is None):
        raise ConfigError(f"--site_seed {args.site_seed} seeds the draws of a site model given by --request_factors, "
                          "--max_request or --size_length_correlation (a declared --site has its own)")
    if args.site is not None:
        declared = declared_sites()
        if args.site not in declared:
            raise ConfigError(f"--site must be one of {', '.join(declared)}, got {args.site!r}")
        if custom or (load is not None and declared[args.site][1].load is not None):
            flag = (custom or ['load'])[0]
            raise ConfigError(f"--site {args.site} fixes its parameters; --{flag} cannot change them")
        name, model = declared[args.site]
        return str(Path(args.traces_dir) / name), model if load is None else replace(model, load=load)
    if not custom:
        return None, None if load is None else SiteModel("load", load=load)
    buckets = []
    for item in args.request_factors or ():
        try:
            p, low, high = (float(x) for x in item.split(":"))
        except ValueError:
            raise ConfigError(f"--request_factors: {item!r} is not P:LOW:HIGH") from None
        buckets.append((p, low, high))
    try:
        return None, SiteModel("custom", tuple(buckets), args.max_request, load, args.size_length_correlation,
                               args.site_seed or 0)
    except ConfigError as error:  # SiteModel's message, in the flags' names
        message = str(error).removeprefix("SiteModel custom: ")
        for name, flag in (("request_buckets", "--request_factors"), ("max_request", "--max_request"),
                           ("size_length_correlation", "--size_length_correlation")):
            message = message.replace(name, flag)
        raise ConfigError(message) from None
