"""`HeuristicComparison`: at every validation (every `val_check_interval` iterations), the policy's
metrics on the module's fixed validation jobsets beside those of the heuristics on the same jobsets;
logged as metrics (`eval/<heuristic>/<metric>`), a learning-curve figure and a table."""
from __future__ import annotations

import torch
from lightning.pytorch import Callback
from lightning.pytorch.loggers import WandbLogger

from lightning_sched.deeprm.objectives import METRICS
from lightning_sched.evaluation import evaluate
from lightning_sched.heuristics import make_heuristic


class HeuristicComparison(Callback):
    """Args:
        heuristics: names (make_heuristic) to compare with; evaluated once, the jobsets are fixed.
        figure_every: log the figure and table at every n-th validation (W&B only).
    """

    def __init__(self, heuristics: tuple[str, ...] = ("tetris", "sjf", "packer", "random"), figure_every: int = 1):
        self.heuristics = tuple(heuristics)
        self.figure_every = figure_every
        self.reference: dict[str, dict[str, float]] | None = None
        self.history: list[tuple[int, float]] = []  # (iteration, policy's eval mean slowdown)

    def _reference(self, pl_module) -> dict[str, dict[str, float]]:
        if self.reference is None:
            jobs, cfg = pl_module.val_jobs, pl_module.cluster
            self.reference = {}
            for name in self.heuristics:
                kwargs = ({"generator": torch.Generator(device=pl_module.device).manual_seed(0)}
                          if name == "random" else {})
                self.reference[name] = evaluate(make_heuristic(name, cfg, **kwargs), cfg, jobs,
                                                device=pl_module.device).summary
        return self.reference

    def validation_metrics(self, pl_module) -> set[str]:
        """The keys it logs beside `pl_module`'s validation: the heuristics' metrics, for modules whose
        validation leaves an EvalResult (`last_eval`: DeepRM's)."""
        if not hasattr(pl_module, "evaluate_and_log"):
            return set()
        return {f"eval/{name}/{m}" for name in self.heuristics for m in METRICS} | {"eval/slowdown_vs_best_heuristic"}

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking or getattr(pl_module, "last_eval", None) is None:
            return
        reference = self._reference(pl_module)
        policy = pl_module.last_eval.summary
        values = {f"eval/{name}/{m}": s[m] for name, s in reference.items() for m in METRICS}
        best = min(s["mean_slowdown"] for s in reference.values())
        values["eval/slowdown_vs_best_heuristic"] = policy["mean_slowdown"] / best
        pl_module.log_dict(values, on_epoch=True, batch_size=1, sync_dist=True)
        self.history.append((trainer.global_step, policy["mean_slowdown"]))
        if trainer.is_global_zero and len(self.history) % self.figure_every == 0:
            self._log_figure(trainer, reference, policy)

    def _log_figure(self, trainer, reference, policy) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers:
            return
        import matplotlib.pyplot as plt

        from lightning_sched.plots import learning_curve

        iterations, slowdown = zip(*self.history)
        fig = learning_curve(list(iterations), list(slowdown), {n: s["mean_slowdown"] for n, s in reference.items()},
                             title="validation mean slowdown vs heuristics")
        rows = ([["policy", *(policy[m] for m in METRICS)]]
                + [[n, *(s[m] for m in METRICS)] for n, s in reference.items()])
        for logger in loggers:
            logger.log_image("eval/learning_curve", [fig], step=trainer.global_step)
            logger.log_table("eval/comparison", columns=["scheme", *METRICS], data=rows, step=trainer.global_step)
        plt.close(fig)
