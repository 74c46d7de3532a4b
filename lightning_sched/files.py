"""The project's files: torch files (checkpoints, JobSet files) read with errors that name the file
and without running any code they hold, and every output written through `write_file`, so that a
failure never leaves a truncated file and nothing replaces an existing file unless asked to."""
from __future__ import annotations

import errno
import glob
import itertools
import os
import re
import secrets
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch

from .config import CHECKPOINT_KEY, ConfigError


class OutputExists(ConfigError):
    """The file an output was to be written to exists (and replacing it was not asked for)."""


class WriteFailed(OSError):
    """Writing `path` failed (a full disk, a quota, a failing device: the cause is chained), and
    `path` was left as it was before the write."""

    def __init__(self, path: Path, cause: BaseException):
        super().__init__(f"writing {path} failed ({cause}); {path.name} was left as it was")
        self.path = Path(path)


# the keys of a checkpoint that hold weights: Lightning's state_dict and this project's policy record
WEIGHT_KEYS = ("state_dict", CHECKPOINT_KEY, "optimizer_states")  # NaN moments would make the next step's weights NaN


def load_torch_file(path, what: str, weights_only: bool, map_location="cpu"):
    """torch.load of `path`, refused with a ConfigError that names the file and `what` it should
    be when it is missing, a folder, no torch file at all (truncated, random bytes, another
    format), or, with `weights_only`, when it holds pickled Python objects (loading them could run
    code). A file that cannot be opened (permissions) raises its OSError."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file (expected a {what})")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a {what}")
    try:
        with warnings.catch_warnings():  # torch's notes on a legacy or plain pickle precede the refusal below
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location=map_location, weights_only=weights_only)
    except PermissionError:
        raise
    except Exception as error:  # a damaged file fails in many ways: UnpicklingError, RuntimeError, OSError, EOFError
        # weights_only refuses any class beyond plain containers, tensors, strings and numbers
        # (torch names a global of a blocked module, os.system's posix say, in other words)
        pickled = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) (\S+)", str(error)) \
            if weights_only else None
        if pickled:
            raise ConfigError(f"{path}: holds a pickled {pickled.group(1)} object; a {what} is read with "
                              "torch.load(weights_only=True), plain dicts, tensors, strings and numbers only") from None
        lines = str(error).strip().splitlines()
        # the first line names the fault when it is short; torch's long ones are advice, not the fault
        reason = f"{type(error).__name__}: {lines[0]}" if lines and len(lines[0]) <= 100 else type(error).__name__
        with path.open("rb") as file:
            zipped = file.read(2) == b"PK"
        if zipped and not zipfile.is_zipfile(path):  # torch's format, its directory at the end missing
            reason = f"a zip archive cut short (truncated?): {reason}"
        raise ConfigError(f"{path}: not a {what} (torch.load failed: {reason})") from error


def damaged_record(path, error: Exception) -> ConfigError:
    """The refusal of a checkpoint `path` whose record held a field of another type (a hand edit:
    a list, a tensor, a string for a number), which its reader met as `error`."""
    return ConfigError(f"{path}: a field of its record is damaged ({type(error).__name__}: "
                       f"{str(error).splitlines()[0][:200] if str(error) else ''})")


def non_finite_weight(data, name: str = "") -> str | None:
    """The dotted name of the first floating tensor under `data`'s WEIGHT_KEYS (all of `data` when
    `name` is given) holding a NaN or an infinity; None when all are finite."""
    if not name and isinstance(data, dict):
        return next(filter(None, (non_finite_weight(data[k], k) for k in WEIGHT_KEYS if k in data)), None)
    if isinstance(data, torch.Tensor):
        return name if data.is_floating_point() and not bool(torch.isfinite(data).all()) else None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    return next(filter(None, (non_finite_weight(v, f"{name}.{k}") for k, v in items)), None)


def require_finite_weights(data, path, action: str) -> None:
    """A ConfigError naming `path` and the tensor when a checkpoint's weights are not all finite
    (a diverged run's): `action` is "loaded" or "written"."""
    bad = non_finite_weight(data)
    if bad:
        raise ConfigError(f"{path}: {bad} holds NaN or infinite values; a checkpoint of non-finite weights (or "
                          f"optimizer state) is never {action}")


def require_state_dict(value, field: str) -> None:
    """A ConfigError naming `field` unless `value` is a network's weights: names to tensors."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in value.items()):
        shown = type(value).__name__ if not isinstance(value, dict) else "a dict holding other than name: tensor"
        raise ConfigError(f"{field}: expected the network's weights (names to tensors), got {shown}")


def temp_path(path: Path) -> Path:
    """The temporary file `path` is written to first (`clean_temp_files` removes those a killed
    process left behind): TEMP_NAME."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")
"""A `temp_path` name: the file it is written for and the writer's pid."""


STALE_SECONDS = 3600
"""A temporary file this old whose process no longer runs here is a killed write's (an hour: on a
shared filesystem another machine's writer has the same pid space only by chance)."""


def remove_stale_temps(path: Path) -> None:
    """Removes the temporary files of earlier writes of `path` left by a killed process (its pid not
    running here, the file STALE_SECONDS old): outside a run folder nobody else would."""
    for temp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        found = TEMP_NAME.fullmatch(temp.name)
        if not found or found["target"] != path.name:
            continue
        try:
            old = time.time() - temp.stat().st_mtime > STALE_SECONDS
        except FileNotFoundError:  # its writer finished meanwhile
            continue
        if old and not process_runs(int(found["pid"])):
            temp.unlink(missing_ok=True)


def process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clean_temp_files(folder: Path) -> list[Path]:
    """Removes the temporary files of writes that never finished (a process killed mid-write) from
    `folder`; call it only while no other process writes there (a run folder's lock held)."""
    removed = []
    for temp in Path(folder).glob(".*.tmp"):
        if TEMP_NAME.fullmatch(temp.name):
            temp.unlink(missing_ok=True)
            removed.append(temp)
    return removed


def numbered_name(path: Path, n: int) -> Path:
    """`path` for n=1, else its n-th variant: runs/a.png -> runs/a-2.png, log.swf.gz -> log-2.swf.gz."""
    if n == 1:
        return path
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    return path.with_name(f"{path.name[:len(path.name) - len(suffix)]}-{n}{suffix}")


def _place(temp: Path, target: Path, overwrite: bool) -> bool:
    """Moves the finished `temp` to `target`; without `overwrite`, only if `target` does not exist
    at this moment (a hard link never replaces a file). False when `target` exists."""
    if overwrite:
        os.replace(temp, target)
        return True
    try:
        os.link(temp, target)
    except FileExistsError:
        return False
    except OSError as error:  # a filesystem without hard links: the check and the rename are two steps
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        if target.exists():
            return False
        os.replace(temp, target)
    return True


def sync_folder(folder: Path) -> None:
    """fsync a folder, so that a name just placed in it survives a crash of the machine, not only
    of the process (where the filesystem allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder: the file itself is on disk
        pass
    finally:
        os.close(fd)


def write_file(path, write: Callable[[BinaryIO], None], overwrite: bool = False, numbered: bool = False) -> Path:
    """Every file this project writes itself: `write(file)` fills a temporary file in `path`'s folder,
    flushed to disk, which then becomes `path` in one step, so a failure at any point leaves no
    partial file and the previous one whole. An existing `path` is replaced only with `overwrite`;
    with `numbered` (default outputs nobody named) the first free of `path`, `stem-2`, `stem-3`, ...
    is taken; else a ConfigError. The existence check is made at that last step, not before the
    work. Returns the path written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot write {path}: its folder cannot be created ({error.strerror or error})") from None
    remove_stale_temps(path)
    temp = temp_path(path)
    try:
        # os.open with 0o666: the file gets the umask's permissions, as a plain open would
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        for n in range(1, 10**6 if numbered else 2):
            target = numbered_name(path, n)
            if _place(temp, target, overwrite):
                sync_folder(target.parent)
                return target
        raise OutputExists(f"{path} exists; name another file or pass --overwrite to replace it")
    except (OSError, RuntimeError) as error:  # torch reports a failed write as a RuntimeError
        raise WriteFailed(path, error) from error
    finally:
        temp.unlink(missing_ok=True)


def write_text(path, text: str, overwrite: bool = False, numbered: bool = False) -> Path:
    """`write_file` of a text file (UTF-8)."""
    return write_file(path, lambda file: file.write(text.encode()), overwrite, numbered)


def append_text(path, text: str) -> None:
    """Appends `text` (whole lines) to the existing file `path` in one write: a log too long to
    rewrite at every line (metrics.csv). A failed write (a full disk) is undone, the file cut back
    to its previous length, so no partial line is left; WriteFailed names the file."""
    path = Path(path)
    data = memoryview(text.encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        size = os.fstat(fd).st_size
        try:
            while data:  # not fsynced: a log line lost to a machine crash is logged again by the resume
                data = data[os.write(fd, data):]
        except OSError as error:
            os.ftruncate(fd, size)
            raise WriteFailed(path, error) from error
    finally:
        os.close(fd)


def write_figure(fig, path, overwrite: bool = False, numbered: bool = False) -> Path:
    """`write_file` of a matplotlib figure, in the format its suffix names (dpi 120)."""
    kind = Path(path).suffix.lstrip(".") or "png"
    return write_file(path, lambda file: fig.savefig(file, format=kind, dpi=120), overwrite, numbered)


def write_figure_and_json(fig, path, text: str, overwrite: bool = False, numbered: bool = False) -> Path:
    """A figure and its numbers (`text`, JSON) beside it under the same stem. Named (`numbered`
    False): both refused before either is written unless `overwrite`; else the first `numbered_name`
    whose figure and JSON are both free. Returns the figure's path."""
    path = Path(path)
    if not numbered:
        for target in (path, path.with_suffix(".json")):
            refuse_output(target, overwrite, "--out")
        write_figure(fig, path, overwrite)
        write_text(path.with_suffix(".json"), text, overwrite)
        return path
    for n in itertools.count(1):
        target = numbered_name(path, n)
        if target.with_suffix(".json").exists():
            continue
        try:
            write_figure(fig, target)
        except OutputExists:  # taken meanwhile: the next one
            continue
        write_text(target.with_suffix(".json"), text)
        return target


def write_torch(data, path, overwrite: bool = False, numbered: bool = False) -> Path:
    """`write_file` of a torch file; a checkpoint whose weights are not finite is refused."""
    require_finite_weights(data, path, "written")
    return write_file(path, lambda file: torch.save(data, file), overwrite, numbered)


def atomic_torch_save(checkpoint: dict, path: str | os.PathLike) -> None:
    """A checkpoint that replaces its previous file (last.ckpt, a best checkpoint): `write_torch`
    with overwrite."""
    write_torch(checkpoint, path, overwrite=True)


def refuse_figure(path, overwrite: bool, flag: str, inputs=()) -> None:
    """`refuse_output` for a figure, and a ConfigError naming `flag` when matplotlib cannot write the
    format its suffix names (before the minutes of work that would draw it)."""
    refuse_output(path, overwrite, flag, inputs)
    from matplotlib.figure import Figure

    kind = Path(path).suffix.lstrip(".").lower() or "png"
    formats = Figure().canvas.get_supported_filetypes()
    if kind not in formats:
        raise ConfigError(f"{flag} {path}: matplotlib cannot write .{kind} (it writes {', '.join(sorted(formats))})")


def refuse_output(path, overwrite: bool, flag: str, inputs=()) -> None:
    """A script's early check of an output it was given (before minutes of work; `write_file` checks
    again as it writes): a ConfigError naming `flag` when `path` is one of the script's `inputs`, or
    exists and `overwrite` is not given."""
    path = Path(path)
    if any(path.resolve() == Path(i).resolve() for i in ([inputs] if isinstance(inputs, str) else inputs)):
        raise ConfigError(f"{flag} {path} is one of the script's inputs; name another file")
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; name a file")
    above = next((p for p in path.parents if p.exists()), None)  # the first that exists must be a folder
    if above is not None and not above.is_dir():
        raise ConfigError(f"{flag} {path}: {above} is a file, not a folder")
    if path.exists() and not overwrite:
        raise OutputExists(f"{flag} {path} exists; name another file or pass --overwrite to replace it")
