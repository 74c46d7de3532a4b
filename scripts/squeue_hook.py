"""An example hook for a Slurm site (docs/deploy.md): `squeue --json` output in, the policy's order out
as Slurm priorities (a dry run: it prints `scontrol` commands; pipe them to `sh` to apply them).

    squeue --json | python scripts/squeue_hook.py --policy policy.onnx --processors 256
    squeue --json | python scripts/squeue_hook.py --policy policy.onnx --processors 256 | sh

Jobs holding processors (RUNNING, COMPLETING, CONFIGURING) give their processors (cpus) and expected
end (end_time: start + time limit; without a limit, start_time + --unlimited_minutes); pending jobs
their submit time, time limit (minutes, or --unlimited_minutes without one) and processors. With
--partition, only the jobs of that partition (a pending job listing several counts in each). Integer
fields may be plain numbers or Slurm's {"set": true, "infinite": false, "number": N} form; job_state a
string or a list. Check the fields against your Slurm version's `squeue --json` before relying on it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout (installed: the lightning_sched package)
if (ROOT / "lightning_sched").is_dir() and str(ROOT) not in sys.path:  # a checkout; no torch for an .onnx policy
    sys.path.insert(0, str(ROOT))

from lightning_sched.config import ConfigError  # noqa: E402
from lightning_sched.decide import SnapshotError, decide, load_scorer  # noqa: E402

TOP_PRIORITY = 1_000_000  # the first job of the order gets this, the next one less, ...
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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SnapshotError(f"job {job.get('job_id')}: {key}: {value!r} is not a number")
    return value


def states(job: dict) -> set[str]:
    """The job's state and flags: Slurm's JSON gives a list, its base state first and flags such as
    COMPLETING after it (a finishing job: ["COMPLETED", "COMPLETING"]); older versions a string."""
    value = job.get("job_state", "")
    return {str(v) for v in value} if isinstance(value, list) else {str(value)}


def snapshot_of(squeue: dict, processors: int, now: float, unlimited_minutes: int,
                partition: str | None = None) -> dict:
    """A decide() snapshot from `squeue --json` output (the jobs of `partition` only, when given)."""
    if not isinstance(squeue, dict) or not isinstance(squeue.get("jobs"), list):
        raise SnapshotError("squeue: expected the JSON of `squeue --json` (an object with a 'jobs' list)")
    running, waiting = [], []
    for i, job in enumerate(squeue["jobs"]):
        if not isinstance(job, dict):
            raise SnapshotError(f"squeue: jobs[{i}]: expected an object, got {type(job).__name__}")
        if partition is not None and partition not in str(job.get("partition", "")).split(","):
            continue
        state = states(job)
        if state & HOLDING:
            end = job.get("end_time")
            if isinstance(end, dict) and end.get("infinite"):  # no time limit: taken to have asked for the default
                end = number(job, "start_time") + 60 * unlimited_minutes
            else:
                end = number(job, "end_time")
            running.append({"id": job["job_id"], "processors": number(job, "cpus"), "expected_end": end})
        elif "PENDING" in state:
            minutes = number(job, "time_limit", unlimited=unlimited_minutes)
            waiting.append({"id": job["job_id"], "submit": min(number(job, "submit_time"), now),
                            "requested_time": 60 * minutes, "processors": number(job, "cpus"),
                            "user": job.get("user_name")})
    return {"now": now, "capacity": {"processors": processors}, "running": running, "waiting": waiting}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="a queue-policy checkpoint or its ONNX export")
    p.add_argument("--processors", type=int, required=True, help="the partition's processors")
    p.add_argument("--partition", help="only this partition's jobs (default: every job squeue lists)")
    p.add_argument("--input", help="squeue --json output in a file (default: stdin)")
    p.add_argument("--now", type=float, help="seconds since the epoch (default: the clock)")
    p.add_argument("--unlimited_minutes", type=int, default=7 * 24 * 60,
                   help="the time limit a job without one is taken to ask for; a running one is taken to end "
                        "that long after its start (default: 7 days)")
    args = p.parse_args(argv)
    try:
        text = Path(args.input).read_text() if args.input else sys.stdin.read()
        snapshot = snapshot_of(json.loads(text), args.processors, time.time() if args.now is None else args.now,
                               args.unlimited_minutes, args.partition)
        answer = decide(snapshot, load_scorer(args.policy))
    except KeyError as error:
        print(f"error: squeue: a job has no {error} field", file=sys.stderr)
        return 2
    except (ConfigError, OSError, json.JSONDecodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for rank, job_id in enumerate(answer["order"]):
        print(f"scontrol update JobId={job_id} Priority={TOP_PRIORITY - rank}")
    print(f"# the policy would start now: {' '.join(map(str, answer['start_now'])) or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
