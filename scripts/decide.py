"""A trained queue policy's decision on a snapshot of a real queue (docs/deploy.md).

    python scripts/decide.py --policy checkpoints/queue_bsld_easy.ckpt --snapshot queue.json
    cat queue.json | python scripts/decide.py --policy checkpoints/queue_bsld_easy.ckpt
    python scripts/decide.py --policy policy.onnx --serve            # one snapshot per line, one answer per line
    python scripts/decide.py --policy checkpoints/queue_bsld_easy.ckpt --export policy.onnx
    python scripts/decide.py --policy f1+reserve --clock_start 1700000000 --snapshot queue.json   # a rule

The answer is one JSON line: {"order": [...], "scores": [...], "start_now": [...], "backfilled": [...],
"held": ...}. A bad snapshot gets {"error": "..."} on stdout and the message on stderr: exit 2, or,
with --serve, the next line is served.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# no torch import here (nor through _common), so an .onnx policy starts in a fraction of a second
try:
    import _checkout  # noqa: F401  (the checkout on sys.path)
except ModuleNotFoundError:  # run as a module of the installed package: nothing to put on the path
    pass
from lightning_sched.config import ConfigError  # noqa: E402
from lightning_sched.decide import SnapshotError, decide, export_onnx, load_scorer, require_clock_start  # noqa: E402
from lightning_sched.decide.scorers import clock_start_flag_error  # noqa: E402
from lightning_sched.script_parser import ScriptParser  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True,
                   help="a queue-policy checkpoint (.ckpt: a network or a searched rule), its ONNX export (.onnx), "
                        "or a rule: fcfs, sjf, f1, wfp3, unicep, or RULE+reserve (the rule with its own reservation)")
    p.add_argument("--clock_start", type=float, metavar="SECONDS",
                   help="where the log's time 0 is on the snapshots' clock, for policies that read submit times "
                        "(F1 and what weighs it: they refuse to run without it) or the time of day")
    p.add_argument("--snapshot", help="a JSON snapshot file (default: read one from stdin)")
    p.add_argument("--serve", action="store_true", help="answer one snapshot per stdin line until end of input")
    p.add_argument("--backfill", choices=("off", "easy"),
                   help="default: the policy's own (what it trained with; a rule's: off)")
    p.add_argument("--window", type=int,
                   help="jobs a network sees when more wait (default: its own: 128 for the shipped plain networks)")
    p.add_argument("--threads", type=int, default=1, help="threads of the network (default 1)")
    p.add_argument("--export", metavar="OUT.onnx", help="write the checkpoint's policy as ONNX and exit")
    p.add_argument("--overwrite", action="store_true", help="let --export replace an existing file")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if refused := clock_start_flag_error(args.clock_start):
        p.error(refused)
    if args.window is not None and args.window < 1:
        p.error(f"--window must be >= 1, got {args.window}")
    if args.serve and args.snapshot:
        p.error("--serve reads snapshots from stdin, one a line; --snapshot reads one file: give one of them")
    beside = [f"--{k}" for k in ("window", "backfill", "snapshot", "serve", "clock_start")
              if getattr(args, k) is not None and getattr(args, k) is not False]  # --clock_start 0 is given
    if args.export and beside:  # the export holds the network only; the rules read these when it decides
        p.error(f"{beside[0]} changes nothing with --export: the exported file decides with the flags given then")
    return args


def unique_keys(pairs: list[tuple]) -> dict:
    """A JSON object's pairs as a dict; a key given twice is refused (json keeps the last one silently)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return obj


def answer(data: bytes, scorer, args) -> tuple[str, bool]:
    """(the JSON answer line, whether it is an error) of one snapshot's bytes (UTF-8 JSON)."""
    try:
        snapshot = json.loads(data.decode("utf-8"), object_pairs_hook=unique_keys)
    except UnicodeDecodeError as error:
        return json.dumps({"error": f"snapshot: not UTF-8 text (byte {data[error.start]:#04x} at offset "
                                    f"{error.start})"}), True
    except json.JSONDecodeError as error:
        return json.dumps({"error": f"snapshot: not JSON ({error})"}), True
    except RecursionError:
        return json.dumps({"error": "snapshot: nested too deeply to read"}), True
    except ValueError as error:  # a key given twice, or an integer of more digits than Python converts
        text = str(error) if "twice" in str(error) else "an integer of more digits than any time or size has"
        return json.dumps({"error": f"snapshot: {text}"}), True
    try:
        return json.dumps(decide(snapshot, scorer, args.backfill, args.window, args.clock_start)), False
    except SnapshotError as error:
        return json.dumps({"error": str(error)}), True


def main(argv=None) -> int:
    try:
        return serve(parse_args(argv))
    except BrokenPipeError:  # the reader went away (`| head`): nothing is left to answer to
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (so the exit's flush does not fail again)
        return 0


def serve(args: argparse.Namespace) -> int:
    """Answer the snapshot (or, with --serve, each line), or export the policy; the exit code."""
    try:
        if args.export:
            written = export_onnx(args.policy, args.export, args.overwrite)
        else:
            scorer = load_scorer(args.policy, args.threads)  # one thread by default: the hook shares the machine
            require_clock_start(scorer, args.clock_start)
            if args.window is not None and scorer.config["window"] is None:
                raise ConfigError(f"--window: {args.policy} is a rule: it sees the whole queue, as in the environment")
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.export:
        print(f"wrote {written}")
        return 0
    if args.serve:  # bytes: a line that is not UTF-8 gets its error, and serving goes on
        for line in sys.stdin.buffer:
            out, failed = answer(line, scorer, args) if line.strip() else (
                json.dumps({"error": "snapshot: an empty line (one snapshot a line)"}), True)
            print(out, flush=True)
            if failed:
                print(json.loads(out)["error"], file=sys.stderr, flush=True)
        return 0
    try:
        data = Path(args.snapshot).read_bytes() if args.snapshot else sys.stdin.buffer.read()
    except OSError as error:
        print(f"error: --snapshot: {error}", file=sys.stderr)
        return 2
    out, failed = answer(data, scorer, args)
    print(out)
    if failed:
        print(f"error: {json.loads(out)['error']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
