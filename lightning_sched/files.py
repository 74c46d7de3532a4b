"""Reading the project's torch files (checkpoints, JobSet files) with errors that name the file."""
from __future__ import annotations

from pathlib import Path

import torch

from .config import ConfigError


def load_torch_file(path, what: str, weights_only: bool, map_location="cpu"):
    """torch.load of `path`, refused with a ConfigError that names the file and `what` it should
    be when it is missing, a folder, or no torch file at all (truncated, random bytes, another
    format). A file that cannot be opened (permissions) raises its OSError."""
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
        lines = str(error).strip().splitlines()
        # the first line names the fault when it is short; torch's long ones are advice, not the fault
        reason = f"{type(error).__name__}: {lines[0]}" if lines and len(lines[0]) <= 100 else type(error).__name__
        raise ConfigError(f"{path}: not a {what} (torch.load failed: {reason})") from error
