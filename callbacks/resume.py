"""`--ckpt_path` in `scripts/fit.py`: the checkpoint read once, and its model settings held against
the config's. LightningCLI lets a checkpoint's hyperparameters replace the config's model silently;
here `fit` (a resume) refuses a model of another class or any model field that differs, naming
them, and `test`, `validate` and `predict` refuse another class or cluster: they measure on the
config's `model.evaluation` and take the rest from the checkpoint, naming what replaced the
config's values."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import torch
from jsonargparse import Namespace

from lightning_sched import ConfigError
from lightning_sched.config import CHECKPOINT_KEY
from lightning_sched.files import load_torch_file, require_finite_weights, require_state_dict

from .cli import DEFAULT_MODEL
from .run_folder import run_of_checkpoint

# what a resume restores from a checkpoint (Lightning's keys, the sampler's and the policy record),
# and the types it reads them as
RESTORED = {"pytorch-lightning_version": str, "global_step": int, "epoch": int, "state_dict": dict,
            "optimizer_states": list, "lr_schedulers": list, "loops": dict, "callbacks": dict,
            "hyper_parameters": dict, "sampler_state": torch.Tensor, CHECKPOINT_KEY: dict}


def read_training_checkpoint(ckpt_path: str, resume: bool = True) -> dict:
    """The checkpoint's contents, loaded as Lightning loads them (weights only: a pickled object is
    refused before it is built); an error naming the file if it is missing, not a checkpoint, a
    policy-only one, one of non-finite weights or of keys of the wrong type, or, to `resume` training
    (fit; test and validate read the weights only), one saved with weights only."""
    try:  # truncated, not a torch file at all, or pickled objects: named by the one reader of them
        data = load_torch_file(ckpt_path, "Lightning checkpoint", weights_only=True)
    except ConfigError as error:
        raise ConfigError(f"--ckpt_path {error}") from None
    if not isinstance(data, dict) or "state_dict" not in data or "global_step" not in data:
        kind = "a policy-only checkpoint" if isinstance(data, dict) and CHECKPOINT_KEY in data else "not one"
        raise ConfigError(f"--ckpt_path {ckpt_path} is {kind}, no Lightning training state (a run's "
                          "checkpoints/*.ckpt); scripts/evaluate.py --policy or --model.init_from reads a policy")
    if resume and ("optimizer_states" not in data or "loops" not in data):  # test and validate need weights only
        raise ConfigError(f"--ckpt_path {ckpt_path} holds weights only (checkpoint.save_weights_only): no training "
                          f"state to resume; start a new run from its weights with --model.init_from {ckpt_path}")
    for key, kind in RESTORED.items():  # a damaged or hand-edited file: named here, not in Lightning's traceback
        if key in data and (not isinstance(data[key], kind) or kind is int and isinstance(data[key], bool)):
            raise ConfigError(f"--ckpt_path {ckpt_path}: its {key!r} is a {type(data[key]).__name__}, not a "
                              f"{kind.__name__}")
    try:
        require_state_dict(data["state_dict"], "state_dict")
    except ConfigError as error:
        raise ConfigError(f"--ckpt_path {ckpt_path}: {error}") from None
    require_finite_weights(data, ckpt_path, "loaded")
    require_files_in_their_folder(data, ckpt_path)
    return data


def require_fitting_weights(ckpt_path: str, saved: dict[str, tuple], model: torch.nn.Module) -> None:
    """ConfigError naming the first weight the checkpoint lacks, has in excess or holds in another
    shape than `model`'s (`saved`: name -> shape), before Lightning loads it."""
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for name in sorted(set(own) | set(saved)):
        if own.get(name) != saved.get(name):
            raise ConfigError(f"--ckpt_path {ckpt_path}: weight {name} is {saved.get(name, 'missing')} in the "
                              f"checkpoint and {own.get(name, 'absent')} in the config's model; give the config "
                              "it was trained with (its run's config.yaml)")


PROJECT_PACKAGES = ("lightning_sched.", "tasks.", "callbacks.")
"""Where a checkpoint's hyperparameters may name classes: LightningCLI imports what they name."""
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
DATA_SUFFIXES = {"swf", "gz", "csv", "ckpt", "pt", "onnx", "txt", "npz"}  # "trace.swf.gz" names a log, not a class
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".jsonnet")


def require_project_classes(data: dict, ckpt_path: str, given: set[str] = frozenset()) -> None:
    """ConfigError naming the first value in the checkpoint's hyperparameters, other than the strings
    the config holds (`given`), that could make LightningCLI, which parses them as the model's
    config, import or read code: a class path (a `class_path` entry, or a dotted string whose first
    name is an importable module, not a file or a log's name: jsonargparse takes a class from a
    string too) outside this project's packages, or the name of a config file on disk."""
    def refuse(where: str, item, what: str):
        raise ConfigError(f"--ckpt_path {ckpt_path}: {where} names {item!r}, {what}; not read")

    def walk(value, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("class_path", "_class_path") and not isinstance(item, str):
                    refuse(f"{where}.{key}", item, "not a class path")
                walk(item, f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, str) and value not in given:
            if DOTTED.fullmatch(value) and not value.startswith(PROJECT_PACKAGES) and \
                    value.rsplit(".", 1)[1] not in DATA_SUFFIXES and not Path(value).exists() and \
                    importlib.util.find_spec(value.split(".")[0]) is not None:
                refuse(where, value, "a class outside lightning_sched, tasks and callbacks that the config does "
                                     "not name")
            if Path(value).suffix in CONFIG_SUFFIXES and Path(value).is_file():
                refuse(where, value, "a config file")

    saved = dict(data.get("hyper_parameters") or {})
    saved.pop("_instantiator", None)  # Lightning's own entry, dropped before it parses the rest
    walk(saved, "hyper_parameters")


def config_strings(config) -> set[str]:
    """Every string a (part of a) config holds, its class paths among them: what the user chose."""
    value = config.as_dict() if isinstance(config, Namespace) else config
    if isinstance(value, dict):
        return set().union(*(config_strings(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(config_strings(v) for v in value))
    return {value} if isinstance(value, str) else set()


def require_files_in_their_folder(data: dict, ckpt_path: str) -> None:
    """ConfigError when a checkpoint callback's saved state names a file outside its own folder:
    resumed, Lightning would delete such a file as an outdated checkpoint."""
    for name, state in (data.get("callbacks") or {}).items():
        if not isinstance(state, dict):
            continue
        named = [state.get(k) for k in ("best_model_path", "kth_best_model_path", "last_model_path")]
        named += list(state.get("best_k_models") or {})
        # without its folder Lightning would take the resumed run's, and a "../" path would pass its check
        folder = Path(str(state["dirpath"])).resolve() if state.get("dirpath") else None
        for path in named:
            if path and (folder is None or not isinstance(path, str) or Path(path).resolve().parent != folder):
                raise ConfigError(f"--ckpt_path {ckpt_path}: the state of {str(name).split('{')[0]} names "
                                  f"{path!r}, outside its folder ({folder or 'none given'}); not resumed")


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
