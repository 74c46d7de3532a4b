"""What the two MAML tasks share (tasks/maml.py on DeepRM's cluster, tasks/queue_maml.py on queue
sites): Meta-SGD's learned step sizes and first-order MAML's meta-gradient.

    MAML (Finn et al., 2017), for each task i of a meta-batch:
        theta_i' = theta - alpha * grad L_i(theta)                  (inner step; Meta-SGD: alpha is a tensor)
    theta <- theta - beta * grad_theta sum_i L_i(theta_i')          (outer step)
    first order: grad_theta L_i(theta_i') is taken as grad L_i at theta_i' (no derivative of the inner step)
"""
from __future__ import annotations

import torch
from torch import nn

from ..config import ConfigError


class LearnedStepSizes(nn.ParameterList):
    """Meta-SGD (Li et al., 2017): a log step size s for every weight of `module`, 0 at the start, so
    the inner step moves each weight by inner_lr x exp(s) x its gradient. The outer step trains s
    (only second-order gradients reach it); a checkpoint records exp(s) by parameter name."""

    def __init__(self, module: nn.Module):
        super().__init__([nn.Parameter(torch.zeros_like(p)) for p in module.parameters()])
        self.names = [name for name, _ in module.named_parameters()]

    def sizes(self) -> dict[str, torch.Tensor]:
        """{parameter name: exp(s)} in the module's parameter order, differentiable (the inner step's)."""
        return {name: s.exp() for name, s in zip(self.names, self, strict=True)}

    def record(self) -> dict[str, torch.Tensor]:
        """The step sizes as plain CPU tensors, for a checkpoint read with weights_only=True."""
        return {name: s.detach().exp().cpu().clone() for name, s in zip(self.names, self, strict=True)}

    def geometric_means(self) -> dict[str, float]:
        """Each tensor's geometric mean step multiplier, exp(mean s): what training logs."""
        return {name: float(s.detach().mean().exp()) for name, s in zip(self.names, self, strict=True)}


def require_learnable_step_sizes(owner: str, inner_optimizer: str, first_order: bool, inner_steps: int) -> None:
    """A ConfigError unless the step sizes can be learned: an SGD inner step (Adam divides any scale of
    the gradient away), second-order gradients and at least one inner step (else none reaches them)."""
    if inner_optimizer != "sgd":
        raise ConfigError(f"{owner}.learn_step_sizes needs inner_optimizer 'sgd' (Adam divides the step sizes "
                          f"away), got {inner_optimizer!r}")
    if first_order:
        raise ConfigError(f"{owner}.learn_step_sizes needs second-order gradients (first_order=True gives the step "
                          "sizes none)")
    if inner_steps == 0:
        raise ConfigError(f"{owner}.learn_step_sizes needs inner_steps >= 1 (there is no step to size)")


def add_first_order_gradients(meta_params: list[torch.Tensor], loss: torch.Tensor,
                              adapted: list[list[torch.Tensor]]) -> None:
    """First-order MAML's meta-gradient: the gradient of `loss` at each task's adapted weights
    (`adapted`: one list a task, in the order of `meta_params`), added to the meta-parameters' .grad.
    `higher` without tracking the inner steps leaves the meta-parameters outside the graph, so nothing
    reaches them otherwise. A weight that `loss` does not reach keeps its .grad."""
    grads = torch.autograd.grad(loss, [p for task in adapted for p in task], allow_unused=True)
    n = len(meta_params)
    for task in range(len(adapted)):
        for p, g in zip(meta_params, grads[task * n:(task + 1) * n], strict=True):
            if g is not None:
                p.grad = g if p.grad is None else p.grad + g
