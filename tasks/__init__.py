"""LightningModules: the training algorithms."""
