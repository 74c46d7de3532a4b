"""What MAML over DeepRM's workloads (tasks.maml) and over queue sites (tasks.queue_maml) share on the
Lightning side: the meta-gradient, the outer optimizer and the logging of Meta-SGD's learned step sizes."""
from __future__ import annotations

import torch

from lightning_sched.learning.meta import add_first_order_gradients


class MetaOptimization:
    """A mixin for a meta-learning module with `hparams` meta_lr, step_size_lr and first_order, and
    `log_step_sizes` (learning.meta.LearnedStepSizes, or None without Meta-SGD)."""

    def meta_parameters(self) -> list[torch.nn.Parameter]:
        """The weights the outer step trains (the inner loop's start)."""
        raise NotImplementedError

    def meta_backward(self, loss: torch.Tensor, fnets) -> None:
        """The meta-gradient of `loss`, the adapted policies' outer loss. Second order: backpropagated
        through the inner steps into the meta-parameters. First order (`first_order`): the gradient at
        each of `fnets`' adapted weights (higher's functional copies), added onto the meta-parameters'
        (higher leaves their .grad empty when it does not track the inner steps); under DDP the caller
        averages these over the ranks (`mean_over_ranks`) once every task's are in."""
        if not self.hparams.first_order:
            self.manual_backward(loss)
            return
        add_first_order_gradients(self.meta_parameters(), loss, [list(fnet.parameters()) for fnet in fnets])

    def configure_optimizers(self):
        """One Adam over the meta-parameters (meta_lr) and Meta-SGD's log step sizes (step_size_lr:
        they move much further than the weights)."""
        if self.hparams.first_order:
            self.require_full_precision("first-order meta-gradients are set by hand, past the loss scaling the "
                                        "precision plugin undoes")
        groups = [{"params": list(self.meta_parameters()), "lr": self.hparams.meta_lr}]
        if self.log_step_sizes is not None:
            groups.append({"params": list(self.log_step_sizes), "lr": self.hparams.step_size_lr})
        return torch.optim.Adam(groups)

    def log_step_size_means(self) -> None:
        """Each weight tensor's learned step multiplier (its geometric mean), when Meta-SGD learns them."""
        if self.log_step_sizes is not None:
            means = self.log_step_sizes.geometric_means()
            self.log_dict({f"train/step_size/{name}": size for name, size in means.items()}, on_step=True,
                          on_epoch=False)
