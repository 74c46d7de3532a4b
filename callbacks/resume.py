"""`--ckpt_path` in `scripts/fit.py`: the checkpoint read once, and its model settings held against
the config's. LightningCLI lets a checkpoint's hyperparameters replace the config's model silently;
here `fit` (a resume) refuses a model of another class or any model field that differs, naming
them, and `test`, `validate` and `predict` refuse another class or cluster: they measure on the
config's `model.evaluation` and take the rest from the checkpoint, naming what replaced the
config's values."""
from __future__ import annotations

from pathlib import Path

import torch
from jsonargparse import Namespace

from lightning_sched import ConfigError
from lightning_sched.config import CHECKPOINT_KEY
from lightning_sched.files import require_finite_weights

from .cli import DEFAULT_MODEL
from .run_folder import run_of_checkpoint


def read_checkpoint(ckpt_path: str) -> dict:
    """The checkpoint's contents, loaded as Lightning loads them (weights only: a pickled object is
    refused before it is built); an error naming the file if it is missing, not a checkpoint, a
    policy-only one (no training state to resume) or one of non-finite weights."""
    if not Path(ckpt_path).is_file():
        raise ConfigError(f"--ckpt_path {ckpt_path}: no such file")
    try:
        data = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, not a torch file at all, or pickled objects
        pickled = "pickled" if "Unsupported global" in str(error) else None
        raise ConfigError(f"--ckpt_path {ckpt_path} is not a Lightning checkpoint (torch.load: "
                          f"{type(error).__name__}; " + ("it holds pickled objects, never loaded here)" if pickled
                                                         else "truncated or another kind of file)")) from None
    if not isinstance(data, dict) or "state_dict" not in data or "global_step" not in data:
        kind = "a policy-only checkpoint" if isinstance(data, dict) and CHECKPOINT_KEY in data else "not one"
        raise ConfigError(f"--ckpt_path {ckpt_path} is {kind}, no Lightning training state (a run's "
                          "checkpoints/*.ckpt); scripts/evaluate.py --policy or --model.init_from reads a policy")
    require_finite_weights(data, ckpt_path, "loaded")
    return data


def flat(namespace) -> dict:
    """A model config as {dotted key: value}, comparable between the config and a checkpoint."""
    return dict(namespace.items()) if isinstance(namespace, Namespace) else {}


def require_same_module(ckpt_path: str, held, asked) -> None:
    """ConfigError when the checkpoint's module (class path `held`) is not the one the config asks for."""
    if held != asked:
        default = " (fit.py's default when neither --config nor --model names one)" if asked == DEFAULT_MODEL else ""
        raise ConfigError(f"--ckpt_path {ckpt_path} holds a {held} model; the config trains {asked}{default}: "
                          "give the config it was trained with (its run's config.yaml)")


def check_checkpoint_model(asked: Namespace | None, saved: Namespace | None, subcommand: str,
                           ckpt_path: str) -> list[str]:
    """Holds the model the config `asked` for against the one Lightning took from the checkpoint
    (`saved`, the subcommand's `model` after LightningCLI parsed the checkpoint's hyperparameters).
    Raises ConfigError where `subcommand` cannot honour the config; otherwise edits `saved` (the
    config's evaluation settings, no arguments the module no longer takes) and returns the notes
    to print about what the checkpoint changed."""
    if asked is None or saved is None or asked == saved:
        return []
    require_same_module(ckpt_path, saved.get("class_path"), asked.get("class_path"))
    notes = []
    unknown = sorted(saved.get("dict_kwargs") or {})  # saved by an older signature of the module
    if unknown and subcommand == "fit":
        raise ConfigError(f"--ckpt_path {ckpt_path} was saved with arguments {saved.class_path} no longer takes "
                          f"({', '.join(unknown)}); it cannot be resumed (scripts/evaluate.py --policy reads it)")
    if unknown:
        saved.dict_kwargs = {}
        notes.append(f"note: {subcommand} ignores the checkpoint's arguments that {saved.class_path} no longer "
                     f"takes: {', '.join(unknown)}")
    want, have = flat(asked.get("init_args")), flat(saved.get("init_args"))
    differing = [key for key in want if key in have and want[key] != have[key]]

    def named(keys: list[str]) -> str:
        return ", ".join(f"model.{key} (checkpoint {have[key]!r}, config {want[key]!r})" for key in keys)

    if subcommand == "fit":
        if differing:
            run = run_of_checkpoint(ckpt_path)
            hint = f"--config {run / 'config.yaml'}" if run else "the config it was trained with"
            raise ConfigError(f"--ckpt_path {ckpt_path} was trained with other settings: {named(differing)}; "
                              f"resume with {hint}, or leave out --ckpt_path to start a new run")
        return notes
    for key in [k for k in differing if k.startswith("evaluation.")]:
        saved.init_args[key] = want[key]
        differing.remove(key)
    cluster = [k for k in differing if k.startswith("cluster.")]
    if cluster:
        raise ConfigError(f"--ckpt_path {ckpt_path} was trained on another cluster: {named(cluster)}")
    if differing:
        notes.append(f"note: {subcommand} uses the checkpoint's settings where the config differs: "
                     f"{named(differing)}")
    return notes
