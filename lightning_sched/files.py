"""The project's torch files (checkpoints, JobSet files): read with errors that name the file,
written so that a failure never leaves a truncated file."""
from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import torch

from .config import ConfigError


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
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except PermissionError:
        raise
    except Exception as error:  # a damaged file fails in many ways: UnpicklingError, RuntimeError, OSError, EOFError
        # weights_only refuses any class beyond plain containers, tensors, strings and numbers
        pickled = re.search(r"Unsupported global: GLOBAL (\S+)", str(error)) if weights_only else None
        if pickled:
            raise ConfigError(f"{path}: holds a pickled {pickled.group(1)} object; a {what} is read with "
                              "torch.load(weights_only=True), plain dicts, tensors, strings and numbers only") from None
        lines = str(error).strip().splitlines()
        # the first line names the fault when it is short; torch's long ones are advice, not the fault
        reason = f"{type(error).__name__}: {lines[0]}" if lines and len(lines[0]) <= 100 else type(error).__name__
        raise ConfigError(f"{path}: not a {what} (torch.load failed: {reason})") from error


def atomic_torch_save(checkpoint: dict, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in `path`'s folder, flushed to disk, then renamed over `path`
    (a rename within one folder is atomic): a failure at any point leaves the previous file whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # os.open with 0o666: the file gets the umask's permissions, as a plain open would
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as file:
            torch.save(checkpoint, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, (OSError, RuntimeError)):  # torch reports a failed write as a RuntimeError
            raise OSError(f"writing the checkpoint {path} failed ({error}); {path.name} was left as it "
                          "was") from error
        raise
