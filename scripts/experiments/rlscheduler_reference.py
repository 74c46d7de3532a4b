"""Experiment: RLScheduler's own simulator (DIR-LAB/deep-batch-scheduler, Zhang et al., SC'20) run on
its table's sequences, so that the numbers docs/hpc_queue.md cites from it have a command and an output
(docs/outputs/rlscheduler_reference.txt):

1. its 20 rule cells: FCFS, SJF, F1 and its own WFP3 and UNICEP (which take a queued job's wait as
   scheduled_time - submit = -1 - submit) on each log, backfilling off and EASY, beside this project's
   env on the same sequences (scripts/evaluate.py's --protocol rlscheduler, in-process);
2. WFP3 and UNICEP with the true wait (now - submit): score functions written here from the textbook
   formulas (Tang et al., 2009) and passed to their schedule_curr_sequence_reset;
3. its speed in decisions per second, one sequence after another: stepping with its observation built
   at every decision (step_for_test) with SJF picks and with random valid picks, and its rule path
   (schedule_curr_sequence_reset with SJF, no observation); medians over --repeats.

Nothing of theirs is copied into this project: their modules are imported from the working copy that
--rlscheduler names. They import gym, tensorflow and scipy, none of which this project installs, so
stand-in modules go into sys.modules first: gym with Env = object, spaces.Box and spaces.Discrete that
build nothing, and utils.seeding.np_random as gym computed it before 0.22 (a RandomState seeded from
sha512 of the seed), since their sequence draw depends on it; tensorflow and scipy.signal empty (only
their training code uses them). Their simulator reads an uncompressed SWF: the logs are decompressed into
a temporary folder. As their compare-pick-jobs.py does, env.seed(1) and then reset_for_test draws each
sequence's start (its `start` argument is unused); the draws are checked against the project's
RLSCHEDULER_STARTS.

    git clone -q --no-checkout https://github.com/DIR-LAB/deep-batch-scheduler /tmp/rls_repo
    git -C /tmp/rls_repo checkout HEAD -- '*.py'
    python scripts/experiments/rlscheduler_reference.py --rlscheduler /tmp/rls_repo --threads 1 \\
        --out docs/outputs/rlscheduler_reference.txt --overwrite
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import math
import os
import platform
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import run_main, set_threads  # noqa: E402
from lightning_sched.cli import THREADS_HELP, at_least, thread_count  # noqa: E402
from lightning_sched.config import ConfigError  # noqa: E402
from lightning_sched.files import refuse_output, write_text  # noqa: E402

LENGTH = 1024  # jobs per sequence in their table
SEQUENCES = 10  # their table's sequences per cell
SEED = 1  # compare-pick-jobs.py's default --seed, which their table used
# (label, their score function's name or None for ours below, this project's policy name)
RULES = (("FCFS", "fcfs_score", "fcfs"), ("SJF", "sjf_score", "sjf"), ("F1", "f1_score", "f1"),
         ("WFP3 (theirs)", "wfp_score", "wfp3_rlscheduler"), ("UNICEP (theirs)", "uni_score", "unicep_rlscheduler"),
         ("WFP3 (true wait)", None, "wfp3"), ("UNICEP (true wait)", None, "unicep"))


def gym_np_random(seed=None):
    """gym.utils.seeding.np_random as gym had it before 0.22 (the version their requirements pin):
    a RandomState seeded with the 32-bit words of the first 8 bytes of sha512(str(seed))."""
    import numpy as np

    seed = 0 if seed is None else seed % 2**64
    digest = hashlib.sha512(str(seed).encode()).digest()[:8]
    big = sum(word << (32 * i) for i, word in enumerate(struct.unpack("2I", digest)))
    words = []
    while big > 0:
        big, word = divmod(big, 2**32)
        words.append(word)
    rng = np.random.RandomState()
    rng.seed(words or [0])
    return rng, seed


def install_stand_ins() -> None:
    """Stand-ins for gym, tensorflow and scipy.signal, which their module imports at the top."""
    gym, spaces, utils, seeding = (types.ModuleType(name) for name in
                                   ("gym", "gym.spaces", "gym.utils", "gym.utils.seeding"))
    gym.Env = object
    spaces.Box = spaces.Discrete = lambda *args, **kwargs: None
    seeding.np_random = gym_np_random
    gym.spaces, gym.utils, utils.seeding = spaces, utils, seeding
    scipy, signal = types.ModuleType("scipy"), types.ModuleType("scipy.signal")
    scipy.signal = signal
    sys.modules.update({"gym": gym, "gym.spaces": spaces, "gym.utils": utils, "gym.utils.seeding": seeding,
                        "tensorflow": types.ModuleType("tensorflow"), "scipy": scipy, "scipy.signal": signal})


def true_wait_rules(env) -> dict:
    """WFP3 and UNICEP with the true wait, now - submit. Their queue is sorted ascending by the score
    and the first job starts, so a rule's priority enters negated, as in their wfp_score/uni_score."""
    def wfp3(job):
        wait = env.current_timestamp - job.submit_time
        return -((wait / job.request_time) ** 3) * job.request_number_of_processors

    def unicep(job):
        wait = env.current_timestamp - job.submit_time
        # the 1e-15 keeps log2(1) = 0 from dividing by zero (one-processor jobs first), as their uni_score does
        return -(wait + 1e-15) / (math.log2(job.request_number_of_processors + 1e-15) * job.request_time)
    return {"WFP3 (true wait)": wfp3, "UNICEP (true wait)": unicep}


def make_env(hpc, swf: Path, backfill: bool):
    """Their HPCEnv on `swf`, seeded as their table's runs are; their prints go nowhere."""
    with contextlib.redirect_stdout(io.StringIO()):
        env = hpc.HPCEnv(backfil=backfill)
        env.my_init(workload_file=str(swf))
    env.seed(SEED)
    return env


def their_cells(hpc, swf: Path, backfill: bool) -> tuple[list[int], dict[str, float]]:
    """(the drawn starts, each rule's mean over sequences of the sequence's mean bounded slowdown), the
    way compare-pick-jobs.py runs them: one draw per sequence, every rule on it."""
    env = make_env(hpc, swf, backfill)
    own = true_wait_rules(env)
    fns = {label: getattr(env, name) if name else own[label] for label, name, _ in RULES}
    starts, sums = [], {label: 0.0 for label in fns}
    for _ in range(SEQUENCES):
        env.reset_for_test(LENGTH, 0)
        starts.append(env.start)
        for label, fn in fns.items():
            # their scores come divided by the sequence length: the sum is the sequence's mean
            sums[label] += sum(env.schedule_curr_sequence_reset(fn).values())
    return starts, {label: total / SEQUENCES for label, total in sums.items()}


def our_cells(trace: str, backfill: str) -> dict[str, float]:
    """This project's env on the same sequences (scripts/evaluate.py --protocol rlscheduler)."""
    from lightning_sched.queue.evaluation import evaluate_queue, protocol_starts, resolve
    from lightning_sched.queue.log import read_queue_log

    log = read_queue_log(trace)
    starts = protocol_starts(log, "rlscheduler")
    cells = {}
    for label, _, name in RULES:
        policy, cfg = resolve(name, log.config(sequence_length=LENGTH, backfill=backfill))
        cells[label] = evaluate_queue(policy, cfg, log, starts).summary["mean_bounded_slowdown"]
    return cells


def stepped(env, pick, sequences: int) -> int:
    """Decisions taken stepping `sequences` of their draws to the end with step_for_test, which builds
    the observation after every decision; `pick` chooses a filled slot of env.pairs."""
    env.seed(SEED)
    decisions = 0
    for _ in range(sequences):
        env.reset_for_test(LENGTH, 0)
        env.build_observation()
        done = False
        while not done:
            _, _, done, _ = env.step_for_test(pick(env))
            decisions += 1
    return decisions


def rule_path(env, sequences: int) -> int:
    """Decisions of their rule path (SJF, no observation): without backfilling every job is one pick."""
    env.seed(SEED)
    for _ in range(sequences):
        env.reset_for_test(LENGTH, 0)
        env.schedule_curr_sequence_reset(env.sjf_score)
    return sequences * LENGTH


def speeds(hpc, swf: Path, sequences: int, repeats: int) -> dict[str, float]:
    """(median, slowest, fastest) decisions per second over the passes of each way of running their
    simulator (backfilling off)."""
    env = make_env(hpc, swf, False)
    draws = random.Random(0)

    def filled(env):
        return [i for i, pair in enumerate(env.pairs) if pair[0] is not None]

    def sjf_pick(env):
        return min(filled(env), key=lambda i: env.sjf_score(env.pairs[i][0]))

    def random_pick(env):
        return draws.choice(filled(env))

    ways = {"step_for_test, SJF picks": lambda: stepped(env, sjf_pick, sequences),
            "step_for_test, random valid picks": lambda: stepped(env, random_pick, sequences),
            "schedule_curr_sequence_reset, SJF (no observation)": lambda: rule_path(env, sequences)}
    rates = {}
    for name, run in ways.items():
        random.seed(0)  # their build_observation shuffles the queue with the random module
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            decisions = run()
            samples.append(decisions / (time.perf_counter() - t0))
        samples.sort()
        rates[name] = (samples[len(samples) // 2], samples[0], samples[-1])
    return rates


def uncompressed(trace: str, folder: Path) -> Path:
    """The SWF their Workloads reads: `trace` itself, or decompressed into `folder` when gzipped."""
    if not trace.endswith(".gz"):
        return Path(trace)
    target = folder / Path(trace).name.removesuffix(".gz")
    with gzip.open(trace, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def their_commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rlscheduler", type=Path, required=True,
                        help="a working copy of RLScheduler's repository (holding HPCSimPickJobs.py)")
    parser.add_argument("--trace", nargs="+", default=["../shared/traces/lublin_256.swf.gz",
                                                       "../shared/traces/lublin_256_new2.swf.gz"])
    parser.add_argument("--speed_sequences", type=at_least(1), default=SEQUENCES,
                        help="sequences of the first log per timed pass")
    parser.add_argument("--repeats", type=at_least(1), default=5)
    parser.add_argument("--threads", type=thread_count, default=1, help=THREADS_HELP)
    parser.add_argument("--out", type=Path, help="also write the output here, under a header")
    parser.add_argument("--overwrite", action="store_true", help="let --out replace an existing file")
    args = parser.parse_args(argv)
    if args.out:
        refuse_output(args.out, args.overwrite, "--out", args.trace)
    if not (args.rlscheduler / "HPCSimPickJobs.py").is_file():
        raise ConfigError(f"--rlscheduler {args.rlscheduler}: no HPCSimPickJobs.py there (a working copy of "
                         "RLScheduler's repository)")
    threads = set_threads(args.threads)
    install_stand_ins()
    sys.path.insert(0, str(args.rlscheduler.resolve()))
    # their module, importable only now: the stand-ins are in sys.modules and their folder on the path
    import HPCSimPickJobs as hpc
    import numpy as np

    from lightning_sched.queue.evaluation import RLSCHEDULER_STARTS

    lines = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"RLScheduler commit {their_commit(args.rlscheduler)}; python {platform.python_version()}, "
        f"numpy {np.__version__}; threads {threads} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}); "
        "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    say(f"cells: mean over {SEQUENCES} sequences of {LENGTH} jobs of each sequence's mean bounded slowdown "
        f"max(1, (wait + run) / max(run, 10)); starts drawn by their reset_for_test after env.seed({SEED})")
    with tempfile.TemporaryDirectory() as folder:
        swfs = [uncompressed(trace, Path(folder)) for trace in args.trace]
        for trace, swf in zip(args.trace, swfs):
            for backfill in (False, True):
                t0 = time.perf_counter()
                starts, theirs = their_cells(hpc, swf, backfill)
                seconds = time.perf_counter() - t0
                ours = our_cells(trace, "easy" if backfill else "off")
                same = "the project's RLSCHEDULER_STARTS" if tuple(starts) == RLSCHEDULER_STARTS else \
                    f"NOT the project's {RLSCHEDULER_STARTS}"
                say()
                say(f"{Path(trace).name}, backfilling {'EASY' if backfill else 'off'} "
                    f"(their simulator {seconds:.1f} s for all rules)")
                say(f"  starts (0-based, their draw): {starts}: {same}")
                say(f"  {'rule':<20}{'RLScheduler':>14}{'this project':>14}{'difference':>12}")
                for label, _, _ in RULES:
                    say(f"  {label:<20}{theirs[label]:>14.2f}{ours[label]:>14.2f}{ours[label] - theirs[label]:>+12.2f}")
        say()
        say(f"speed: their simulator on {Path(args.trace[0]).name}, backfilling off, {args.speed_sequences} "
            f"sequences per timed pass, median of {args.repeats} passes, 1 process, {threads} thread(s)")
        for name, (median, low, high) in speeds(hpc, swfs[0], args.speed_sequences, args.repeats).items():
            say(f"  {name:<52}{median:>10,.0f} decisions/s (passes {low:,.0f}-{high:,.0f})")
    say("load average after {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.out:
        command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])
        write_text(args.out, f"# {command}\n# RLScheduler's repository at commit {their_commit(args.rlscheduler)}\n"
                   + "\n".join(lines) + "\n", overwrite=args.overwrite)


if __name__ == "__main__":
    run_main(main)
