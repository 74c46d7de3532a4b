"""Stopping a step that would leave non-finite weights: gradients are checked before the optimizer
applies them and the weights after, so a diverging run (too large a step size, an overflow) stops
with one line naming the tensors and the last finite state is what its checkpoints hold."""
from __future__ import annotations

from torch import nn

from ..config import ConfigError


class NonFiniteUpdate(ConfigError, FloatingPointError):
    """A gradient or weight became NaN or infinite (a ConfigError: scripts report it in one line)."""


def non_finite(module: nn.Module, gradients: bool = False) -> list[str]:
    """The names of `module`'s parameters (their gradients with `gradients`) holding NaN or inf."""
    tensors = ((name, p.grad if gradients else p) for name, p in module.named_parameters())
    return [name for name, t in tensors if t is not None and not bool(t.isfinite().all())]


def require_finite(module: nn.Module, where: str, gradients: bool = False) -> None:
    """NonFiniteUpdate naming the first tensors when any of `module`'s weights (or gradients, checked
    before the optimizer step: the step is then never applied) is not finite. `where`: e.g.
    "at iteration 12"."""
    bad = non_finite(module, gradients)
    if bad:
        what = "gradients of" if gradients else "weights"
        raise NonFiniteUpdate(f"non-finite {what} {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} {where}; "
                              "training stops before applying it, the last finite state is kept (lower lr?)")
