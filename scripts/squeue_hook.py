"""An example hook for a Slurm site (docs/deploy.md): `squeue --json` output in, the policy's order out
as Slurm priorities (a dry run: it prints `scontrol` commands; pipe them to `sh` to apply them).

    squeue --json | python scripts/squeue_hook.py --policy policy.onnx --processors 256
    squeue --json | python scripts/squeue_hook.py --policy policy.onnx --processors 256 | sh

Jobs holding processors (RUNNING, COMPLETING, CONFIGURING) give their processors (cpus), nodes
(node_count, with --processors_per_node) and expected end (end_time: start + time limit; without a limit,
start_time + --unlimited_minutes); pending jobs their eligible time (eligible_time, else submit_time),
time limit (minutes, or --unlimited_minutes without one) and processors (with --processors_per_node, at
least node_count whole nodes' worth). Job ids must be integers. Pending jobs that cannot start whatever
their priority are not ranked, and are named on stderr: held (priority 0, a JobHeld* reason), waiting on
a dependency or a begin time, over a QOS, association, partition or license limit (a QOS*, Assoc*,
Partition*, ReqNodeNotAvail, Licenses or Invalid{QOS,Account} reason), eligible more than a minute after
--now, or larger than --processors. A time limit of 0 (Slurm: none) or none set is taken as
--unlimited_minutes. A job waiting more than a year (the service refuses it: a submit time of 0, or clocks
apart?) is left out and named; when every pending job is left out for its times against --now, the hook
exits 2 (check the clocks), and a --now in milliseconds is refused. With --partition, only the jobs of
that partition (a pending job listing several counts in each); a partition no listed job is in is named
on stderr. Integer fields may be plain numbers or Slurm's {"set": true, "infinite": false, "number": N}
form; job_state a string or a list. Check the fields against your Slurm version's `squeue --json` before relying on it.

Setting a priority with scontrol fixes it: Slurm's priority plugin (e.g. multifactor) no longer
changes it, and only an operator or administrator may raise it; so the hook runs as one, and every
pending job it ranks keeps the hook's priority until the next run.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

try:
    import _checkout  # noqa: F401  (the checkout on sys.path; no torch, for an .onnx policy)
except ModuleNotFoundError:  # run as a module of the installed package: nothing to put on the path
    pass
from lightning_sched.config import ConfigError, is_int, is_number  # noqa: E402
from lightning_sched.decide import SnapshotError, decide, load_scorer, require_clock_start  # noqa: E402
from lightning_sched.decide.scorers import clock_start_flag_error  # noqa: E402
from lightning_sched.decide.snapshot import MAX_WAIT_DAYS  # noqa: E402

TOP_PRIORITY = 1_000_000  # the first job of the order gets this, the next one less, ...
CLOCK_SKEW = 60  # seconds an eligible time may lie after --now and count as now
CLOCKS_APART = "clocks apart?"  # how a reason that a job's times against --now left it out ends, before its ")"
MAX_EPOCH_SECONDS = 1e11  # year 5138: a --now beyond is milliseconds
HOLDING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING"})  # states whose jobs hold their processors


def number(job: dict, key: str, unlimited: float | None = None):
    """A Slurm integer field: plain, or {"set", "infinite", "number"}; `unlimited` for an infinite one."""
    value = job.get(key)
    if isinstance(value, dict):
        if value.get("infinite"):
            if unlimited is None:
                raise SnapshotError(f"job {job.get('job_id')}: {key} is unlimited")
            return unlimited
        if not value.get("set", True):
            raise SnapshotError(f"job {job.get('job_id')}: {key} is not set")
        value = value.get("number")
    if value is None:
        raise SnapshotError(f"job {job.get('job_id')}: {key}: missing")
    if not is_number(value):
        raise SnapshotError(f"job {job.get('job_id')}: {key}: {value!r} is not a number")
    return value


def optional(job: dict, key: str):
    """An optional Slurm integer field's number, or None where it holds none: missing, {"set": false}
    or infinite (each caller says what its field's absence means)."""
    value = job.get(key)
    if value is None or (isinstance(value, dict) and (not value.get("set", True) or value.get("infinite"))):
        return None
    return number(job, key)


def job_id(job: dict, index: int) -> int:
    """A job's id: Slurm's are integers, and the printed lines are meant for `sh`, so nothing else passes."""
    value = job.get("job_id")
    if not is_int(value, 0):
        raise SnapshotError(f"squeue: jobs[{index}].job_id: expected a non-negative integer, got {value!r}")
    return value


def partitions(job: dict) -> list[str]:
    """The partitions a job is listed in (a pending job may list several, comma-separated)."""
    return [name for name in str(job.get("partition", "")).split(",") if name]


def states(job: dict) -> set[str]:
    """The job's state and flags: Slurm's JSON gives a list, its base state first and flags such as
    COMPLETING after it (a finishing job: ["COMPLETED", "COMPLETING"]); older versions a string."""
    value = job.get("job_state", "")
    return {str(v) for v in value} if isinstance(value, list) else {str(value)}


# reasons (prefixes) a pending job cannot start for whatever its priority: held, waiting on another job or a
# time, or over a limit of its QOS, association, partition or licenses, or asking for nodes that are unavailable
NOT_ELIGIBLE = ("JobHeld", "Dependency", "BeginTime", "QOS", "Assoc", "Partition", "ReqNodeNotAvail", "Licenses",
                "InvalidQOS", "InvalidAccount")


def not_ranked(job: dict, processors: int) -> str | None:
    """Why a pending job cannot start whatever its priority (None when it can)."""
    reason = str(job.get("state_reason", ""))
    if reason.startswith(NOT_ELIGIBLE):
        return reason
    if optional(job, "priority") == 0:
        return "held (priority 0)"
    if number(job, "cpus") > processors:
        return f"{number(job, 'cpus')} processors, more than --processors {processors}"
    return None


def time_limit_minutes(job: dict, unlimited_minutes: int) -> float:
    """A pending job's time limit: none (Slurm's infinite, a limit not set, or 0, which Slurm reads as
    no limit) is taken to ask for `unlimited_minutes`."""
    return optional(job, "time_limit") or unlimited_minutes


def snapshot_of(squeue: dict, processors: int, now: float, unlimited_minutes: int,
                partition: str | None = None, processors_per_node: int = 1) -> tuple[dict, dict]:
    """A decide() snapshot from `squeue --json` output (the jobs of `partition` only, when given), and
    the pending jobs it leaves out: {job id: why} (`not_ranked`, or a wait the service refuses)."""
    if not isinstance(squeue, dict) or not isinstance(squeue.get("jobs"), list):
        raise SnapshotError("squeue: expected the JSON of `squeue --json` (an object with a 'jobs' list)")
    running, waiting, left_out = [], [], {}
    for i, job in enumerate(squeue["jobs"]):
        if not isinstance(job, dict):
            raise SnapshotError(f"squeue: jobs[{i}]: expected an object, got {type(job).__name__}")
        if partition is not None and partition not in partitions(job):
            continue
        jid = job_id(job, i)
        state = states(job)
        if state & HOLDING:
            end = job.get("end_time")
            if isinstance(end, dict) and end.get("infinite"):  # no time limit: taken to have asked for the default
                end = number(job, "start_time") + 60 * unlimited_minutes
            else:
                end = number(job, "end_time")
            entry = {"id": jid, "processors": number(job, "cpus"), "expected_end": end}
            nodes = optional(job, "node_count") if processors_per_node > 1 else None
            if nodes:  # decide() refuses too few nodes
                entry["nodes"] = nodes
            running.append(entry)
        elif "PENDING" in state:
            why = not_ranked(job, processors)
            if why is not None:
                left_out[jid] = why
                continue
            minutes = time_limit_minutes(job, unlimited_minutes)
            since = optional(job, "eligible_time") or number(job, "submit_time")  # 0: never computed
            if now - since > MAX_WAIT_DAYS * 86400:  # the service refuses such waits: two clocks' times?
                left_out[jid] = f"waits more than {MAX_WAIT_DAYS} days (a submit time of 0, or {CLOCKS_APART})"
                continue
            if since > now + CLOCK_SKEW:  # a few seconds between the controller's clock and ours are no wait
                left_out[jid] = f"eligible {since - now:.0f} s after --now (a begin time, or {CLOCKS_APART})"
                continue
            cpus = number(job, "cpus")
            nodes = optional(job, "node_count") if processors_per_node > 1 else None
            if nodes:  # whole nodes: a job asking for more of them than its processors fill holds them all
                cpus = max(cpus, nodes * processors_per_node)
                if cpus > processors:
                    left_out[jid] = (f"{cpus // processors_per_node} nodes of {processors_per_node} processors, "
                                     f"more than --processors {processors}")
                    continue
            waiting.append({"id": jid, "submit": min(since, now), "requested_time": 60 * minutes,
                            "processors": cpus, "user": job.get("user_name")})
    capacity = {"processors": processors} if processors_per_node == 1 else {
        "nodes": processors // processors_per_node, "processors_per_node": processors_per_node}
    return {"now": now, "capacity": capacity, "running": running, "waiting": waiting}, left_out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True,
                   help="a queue-policy checkpoint or its ONNX export, or a rule (as decide.py takes it)")
    p.add_argument("--clock_start", type=float, metavar="SECONDS",
                   help="for policies that read submit times (F1, the searched rules): where your log's time 0 is, "
                        "in seconds since the epoch (docs/deploy.md)")
    p.add_argument("--processors", type=int, required=True, help="the partition's processors")
    p.add_argument("--processors_per_node", type=int, default=1,
                   help="processors of a node, when jobs take whole nodes (default 1: processors alone)")
    p.add_argument("--partition", help="only this partition's jobs (default: every job squeue lists)")
    p.add_argument("--input", help="squeue --json output in a file (default: stdin)")
    p.add_argument("--now", type=float, help="seconds since the epoch (default: the clock)")
    p.add_argument("--unlimited_minutes", type=int, default=7 * 24 * 60,
                   help="the time limit a job without one is taken to ask for; a running one is taken to end "
                        "that long after its start (default: 7 days)")
    p.add_argument("--threads", type=int, default=1, help="threads of a .ckpt policy's network (default 1)")
    args = p.parse_args(argv)
    if args.processors < 1 or args.processors_per_node < 1 or args.processors % args.processors_per_node:
        p.error(f"--processors ({args.processors}) must be a positive multiple of --processors_per_node "
                f"({args.processors_per_node})")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.unlimited_minutes < 1:
        p.error(f"--unlimited_minutes must be >= 1, got {args.unlimited_minutes}")
    if refused := clock_start_flag_error(args.clock_start):
        p.error(refused)
    if args.now is not None and not 0 <= args.now < MAX_EPOCH_SECONDS:  # milliseconds, most likely
        p.error(f"--now must be seconds since the epoch (below {MAX_EPOCH_SECONDS:.0e}), got {args.now:g}")
    try:
        scorer = load_scorer(args.policy, args.threads)
        require_clock_start(scorer, args.clock_start)  # now, not when jobs first pend
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:  # a name Slurm stored in another encoding must not stop the hook: only numbers are read
        data = Path(args.input).read_bytes() if args.input else sys.stdin.buffer.read()
        squeue, now = json.loads(data.decode("utf-8", errors="replace")), time.time() if args.now is None else args.now
        snapshot, left_out = snapshot_of(squeue, args.processors, now, args.unlimited_minutes, args.partition,
                                         args.processors_per_node)
        answer = decide(snapshot, scorer, clock_start=args.clock_start)
    except KeyError as error:
        print(f"error: squeue: a job has no {error} field", file=sys.stderr)
        return 2
    except (ConfigError, OSError, ValueError) as error:  # ValueError: JSON's, and its integers of 4,300+ digits
        print(f"error: {error}", file=sys.stderr)
        return 2
    listed = {name for job in squeue["jobs"] for name in partitions(job)}
    if args.partition is not None and args.partition not in listed:  # idle, or a name mistyped?
        print(f"# no job of squeue's is in partition {args.partition} (its jobs' partitions: "
              f"{', '.join(sorted(listed)) or 'none'})", file=sys.stderr)
    for rank, job_id in enumerate(answer["order"]):
        print(f"scontrol update JobId={job_id} Priority={TOP_PRIORITY - rank}")
    print(f"# the policy would start now: {' '.join(map(str, answer['start_now'])) or 'none'}", file=sys.stderr)
    if left_out:
        print("# not ranked: "
              + "; ".join(f"{job_id}: {why}" for job_id, why in left_out.items()), file=sys.stderr)
    clocks = [why for why in left_out.values() if why.endswith(CLOCKS_APART + ")")]
    if clocks and not snapshot["waiting"] and len(clocks) == len(left_out):  # every pending job: the clocks?
        print(f"error: no pending job was ranked, each for its times against --now {now:.0f} ({clocks[0]}): check "
              "the clocks before scheduling this hook", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
