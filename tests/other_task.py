"""A LightningModule of another family than DeepRM's tasks, trained through `scripts/fit.py` by a
test (as a queue-level task would be): no cluster, no jobsets, its own validation metric."""
from __future__ import annotations

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader


class OtherTask(LightningModule):
    """Fits y = 2x with one weight; logs `eval/mean_error` at each validation."""

    def __init__(self, lr: float = 0.1, batches: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def error(self) -> torch.Tensor:
        x = torch.linspace(0, 1, 8)
        return ((self.weight * x - 2 * x) ** 2).mean()

    def training_step(self, batch, batch_idx):
        return self.error()

    def validation_step(self, batch, batch_idx):
        self.log("eval/mean_error", self.error(), batch_size=1)

    def train_dataloader(self):
        return DataLoader(range(self.hparams.batches), batch_size=None)

    def val_dataloader(self):
        return DataLoader(range(1), batch_size=None)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
