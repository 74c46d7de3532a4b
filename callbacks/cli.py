"""What `scripts/fit.py`'s LightningCLI needs beside its callbacks: bad input as one line, the module
trained when nothing names one, and a start-up without messages a user cannot act on."""
from __future__ import annotations

import logging
import os
import re
import shlex
import warnings
from pathlib import Path

import yaml

from lightning_sched import ConfigError

# DeepRM's REINFORCE (paper settings): trained when neither --model nor a config picks the module
DEFAULT_MODEL = "tasks.reinforce.Reinforce"
SUBCOMMANDS = ("fit", "validate", "test", "predict")
# the lines of jsonargparse's message that only give its structure, not a reason
STRUCTURE = ("Parser key", "Does not validate", "Subtypes:", "Errors:", "- Problem with given class_path",
             "Given value")


def one_line(message: str) -> str:
    """jsonargparse's message, nested one level per config key and one branch per class a value could
    be, as `key.path: reason`: the keys down the first branch (the class the config names) and the
    first reason found there. jsonargparse gives these only as text."""
    keys = []
    for line in (line.strip() for line in message.splitlines()):
        key = re.match(r'Parser key "([^"]+)"', line)
        if key:
            keys.append(key.group(1))
        elif line and not line.startswith(STRUCTURE):
            return f"{'.'.join(keys)}: {line.lstrip('- ')}" if keys else line
    return message.strip().splitlines()[0] if message.strip() else message


def causes(error: BaseException | None):
    """`error` and the exceptions it was raised from or while handling, innermost last."""
    seen = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or error.__context__


# Lightning's refusal of an accelerator or strategy it does not know (a ValueError, not a misconfiguration)
TRAINER_NAMES = ("You selected an invalid accelerator name", "You selected an invalid strategy name")
UNION_ERROR = "Does not validate against any of the Union subtypes"
# a union branch's reason that only says the value was meant for another branch
OTHER_BRANCH = ("got an unexpected keyword argument", "Expected a <class 'NoneType'>", UNION_ERROR,
                "does not correspond to a subclass")
# jsonargparse's own refusal of a value's type (the other reasons a config gives are ConfigErrors)
TYPE_REFUSAL = "Expected a <class '"


def torch_build() -> str:
    import torch

    return torch.__version__


def union_reason(message: str) -> str | None:
    """Why a value fits none of a union's classes (jsonargparse tries each: a workload is DeepRM's, a
    family or a trace), from the innermost union of its message: the reasons of the branches the
    value was meant for, "as Class: reason" each. None when the message is not laid out so, or when a
    reason is neither a ConfigError of this run nor jsonargparse's type refusal: a crash inside a
    class, which keeps its traceback."""
    lines = message.splitlines()
    inner = [i for i, line in enumerate(lines) if line.strip().startswith("Subtypes:")]
    if not inner or inner[-1] + 1 >= len(lines) or lines[inner[-1] + 1].strip() != "Errors:":
        return None
    start = inner[-1]
    names = [name.rsplit(".", 1)[-1] for name in re.findall(r"<class '([\w.]+)'>", lines[start])]
    reasons = []
    for line in lines[start + 2:]:
        if not line.strip().startswith("- "):
            break
        reasons.append(line.strip()[2:])
    if len(reasons) != len(names):
        return None
    meant = [(name, reason) for name, reason in zip(names, reasons) if not any(o in reason for o in OTHER_BRANCH)]
    if not meant or not all(reason in ConfigError.recent or reason.startswith(TYPE_REFUSAL) for _, reason in meant):
        return None
    return meant[0][1] if len(meant) == 1 else "; or ".join(f"as {name}: {reason}" for name, reason in meant)


def config_error(error: BaseException | None) -> ConfigError | None:
    """The ConfigError that caused `error` (jsonargparse wraps those raised while instantiating),
    Lightning's refusal of a trainer setting (`--trainer.max_steps -5`, no GPU for `accelerator gpu`)
    as one (its first line, prefixed "trainer: "), or why a value fits none of a union's classes."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    for e in causes(error):
        if isinstance(e, ConfigError):
            return e
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, MisconfigurationException) and "gpu backend" in first:
            return ConfigError(f"trainer.accelerator: {first} (this machine's torch {torch_build()} sees no GPU); "
                               "use --trainer.accelerator cpu")
        if isinstance(e, MisconfigurationException) or (isinstance(e, ValueError) and first.startswith(TRAINER_NAMES)):
            return ConfigError(f"trainer: {first}")
    for e in causes(error):  # a ConfigError raised inside a union's branch reaches us as text only
        if isinstance(e, ValueError) and str(e).startswith(UNION_ERROR):
            reason = union_reason(str(e))
            if reason is not None:
                return ConfigError(reason)
    return None


def config_paths(args: list[str]) -> list[str]:
    """The `--config`/`-c` files of a command line, in the order given (a later one wins)."""
    return [value if flag in ("--config", "-c") else flag.split("=", 1)[1]
            for flag, value in zip(args, args[1:] + [""])
            if flag in ("--config", "-c") or flag.startswith("--config=")]


def key_lines(node, path: tuple = ()):
    """(key path, line, whether its value is a mapping) for each mapping key under a composed YAML
    node, lines from 1."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield path + (key.value,), key.start_mark.line + 1, isinstance(value, yaml.MappingNode)
                yield from key_lines(value, path + (key.value,))


def key_path(keys) -> str:
    """A config key's dotted path as parse errors name it: without the init_args levels."""
    return ".".join(k for k in keys if k != "init_args")


def where_set(message: str, args: list[str]) -> str:
    """` (--config FILE, line N)` for the file that sets the key a one-line parse error names (an
    option refused, or a value of the wrong type), the last such file as that one wins; '' if none
    does or a flag of the command line sets it. Keys match by their whole path, init_args levels aside."""
    refused = (re.match(r"([\w.]+): Option '()([^']+)' is not accepted", message)
               or re.match(r"([\w.]+): Group '([^']+)' does not accept option '([^']+)'", message))
    typed = re.match(r"([\w.]+): ", message)
    wanted = ".".join(part for part in refused.groups() if part) if refused else typed.group(1) if typed else ""
    if not wanted:
        return ""
    flags = [key_path(arg[2:].split("=", 1)[0].split(".")) for arg in args if arg.startswith("--")]
    if wanted in flags:  # the command line set it, after every config
        return ""
    for path in reversed(config_paths(args)):
        try:
            with open(path, encoding="utf-8") as file:
                keys = key_lines(yaml.compose(file))
                lines = [line for path_keys, line, section in keys  # a section's whole block: no one line
                         if not section and key_path(path_keys) == wanted]
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if lines:
            return f" (--config {path}, line {lines[0]})"
    return ""


def require_text_configs(args: list[str]) -> None:
    """A ConfigError naming the file when a `--config` is no text file (a checkpoint, say) or no
    valid YAML (a !!python tag, a tab), before jsonargparse fails on it without naming it."""
    for path in config_paths(args):
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as file:
                    yaml.safe_load(file)
            except UnicodeDecodeError:
                raise ConfigError(f"--config {path}: not a YAML config (binary content; a checkpoint goes to "
                                  "--ckpt_path or --model.init_from)") from None
            except yaml.YAMLError as error:  # a python/* tag, a tab, an unclosed bracket: named with the file
                mark = getattr(error, "problem_mark", None)
                where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
                reason = getattr(error, "problem", None) or one_line(str(error))
                raise ConfigError(f"--config {path}{where}: not valid YAML ({reason[:300]})") from None


def with_default_model(args: list[str]) -> list[str]:
    """`args` with `--model=DEFAULT_MODEL` after the subcommand when neither --model nor a config
    picks the module. Not a parser default: jsonargparse keeps a default's init_args when a config's
    class_path replaces it, so tasks.maml.MAML silently took Reinforce's values for the arguments
    both have (normalize_advantage False instead of MAML's True). Another module (a second task)
    is picked by its config's `model.class_path` or by --model."""
    # --model NAME / --config FILE pick the module; --model.<arg> only sets one of its arguments
    picks_model = any(a in ("--model", "--config", "-c") or a.startswith(("--model=", "--config=")) for a in args)
    if picks_model or not args or args[0] not in SUBCOMMANDS:
        return args
    return [args[0], f"--model={DEFAULT_MODEL}", *args[1:]]


def require_base(args: list[str]) -> None:
    """ConfigError naming the base when the first --config file is an overlay: a file whose `# Run:`
    line chains other configs before it (configs/README.md). Alone it would parse against the
    default module, or fail on the first key the base's module has, with no word of the base."""
    first = next((args[i + 1] if a in ("--config", "-c") else a.split("=", 1)[1] for i, a in enumerate(args)
                  if (a in ("--config", "-c") and i + 1 < len(args)) or a.startswith("--config=")), None)
    if first is None or not Path(first).is_file():
        return
    run = [line[len("# Run: "):] for line in Path(first).read_text().splitlines() if line.startswith("# Run: ")]
    words = shlex.split(run[0]) if run else []
    chain = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--config", "-c")]
    if len(chain) > 1:
        raise ConfigError(f"--config {first} is an overlay: its base comes first, as its # Run: line says: "
                          + " ".join(f"--config {c}" for c in chain))


class _DropMessages(logging.Filter):
    def __init__(self, *starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


def quiet_start() -> None:
    """Silence the start-up messages a user of fit.py cannot act on; other warnings still show."""
    os.environ.setdefault("WANDB_SILENT", "true")
    # torch's pytree API as Lightning calls it
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # jobsets are drawn from the iteration's seed, so a resume inside an epoch draws the same ones
    warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before the epoch ended")
    drop = _DropMessages("💡 Tip", "TPU available", "HPU available", "Seed set to")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed"):
        logging.getLogger(name).addFilter(drop)
