"""The console commands an installed wheel has (pyproject.toml's [project.scripts]): each runs its
script's `main` as `python scripts/<name>.py` does in the checkout.

Installed, tasks/, callbacks/ and scripts/ are lightning_sched.tasks, .callbacks and .scripts; the
scripts, configs (`class_path: tasks.reinforce.Reinforce`) and saved runs name them `tasks`,
`callbacks`, `_common` and `_checkout` as the checkout does. `use_checkout_names` makes those names the installed
modules themselves (the same module objects, not copies), for these commands only: nothing
top-level is installed into site-packages.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

CHECKOUT_NAMES = {"tasks": "lightning_sched.tasks", "callbacks": "lightning_sched.callbacks",
                  "_common": "lightning_sched.scripts._common", "_checkout": "lightning_sched.scripts._checkout"}


class _CheckoutNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `tasks.x` as the module `lightning_sched.tasks.x` (and likewise CHECKOUT_NAMES)."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, rest = fullname.partition(".")
        if head not in CHECKOUT_NAMES:
            return None
        real = CHECKOUT_NAMES[head] + ("." + rest if rest else "")
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, loader_state=real)

    def create_module(self, spec):
        return importlib.import_module(spec.loader_state)

    def exec_module(self, module) -> None:  # already executed under its real name
        pass


def use_checkout_names() -> None:
    """Let `tasks`, `callbacks`, `_common` and `_checkout` import as the installed modules, before any other
    package of those names (once)."""
    if not any(isinstance(f, _CheckoutNames) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutNames())


def _run(name: str, exits_itself: bool = False) -> None:
    use_checkout_names()
    script = importlib.import_module(f"lightning_sched.scripts.{name}")
    if exits_itself:
        script.main()
        return
    from _common import run_main

    run_main(script.main)


def fit() -> None:
    _run("fit", exits_itself=True)


def evaluate() -> None:
    _run("evaluate")


def adapt() -> None:
    _run("adapt")


def figures() -> None:
    _run("figures")


def select_checkpoint() -> None:
    _run("select_checkpoint")


def decide() -> None:  # no _common (and so no torch) on this path: an .onnx policy starts in a fraction of a second
    use_checkout_names()  # its _checkout
    sys.exit(importlib.import_module("lightning_sched.scripts.decide").main())
