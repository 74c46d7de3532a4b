"""The per-job networks: one scorer shared by every visible job (`JobScorer`), an ensemble of them,
the value head, and `QueueNetwork` holding actor and critic. Shapes: the package docstring."""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ...config import ConfigError
from ...limits import require_memory
from ..config import JOB_FEATURES, LOG_SPAN, MINUTE, QueueConfig
from .spec import QueuePolicySpec


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of `sizes` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# The job features enter as log1p(gain x feature) / LOG_SPAN: wait and requested time (in units of
# QueueConfig's scales, which a network keeps: evaluation.network_config) as the env's span features
# (config.MINUTE, config.LOG_SPAN: 10 s .. days within about [0, 1]), the processor share and "fits
# now" as they are.
FEATURE_GAIN = (QueueConfig.max_wait / MINUTE, QueueConfig.max_requested / MINUTE, 0.0, 0.0)  # 0: unchanged


def job_inputs(job_features: torch.Tensor, job_area: bool = False) -> torch.Tensor:
    """The network's view of job features [..., F] (F = 4 + R, + 1 with the fit delay: QueueConfig.job_features):
    log-scaled times (FEATURE_GAIN), the rest (processor share, fits now, rule ranks, fit delay) unchanged,
    and with `job_area` the log requested time x processor share appended ([..., F + 1])."""
    gain = job_features.new_zeros(job_features.shape[-1])
    gain[:len(FEATURE_GAIN)] = gain.new_tensor(FEATURE_GAIN)
    logged = torch.log1p(job_features.clamp(min=0) * gain) / LOG_SPAN
    inputs = torch.where(gain > 0, logged, job_features)
    if job_area:
        inputs = torch.cat([inputs, inputs[..., 1:2] * inputs[..., 2:3]], -1)
    return inputs


def flat(job_features, cluster_features, action_mask):
    """The inputs with their leading dims ([B] or [B, T]) as one: [N, W, F], [N, C], [N, W]."""
    w = action_mask.shape[-1]
    rows = cluster_features.reshape(-1, cluster_features.shape[-1])
    return job_features.reshape(-1, w, job_features.shape[-1]), rows, action_mask.reshape(-1, w)


class JobMLP(nn.Module):
    """One MLP applied to every visible job: [N, widths[-1]] for the N jobs of `action_mask` (in
    row-major order) from job_features [B, W, 4 + extra] and the rows' features [B, row_inputs] (the
    cluster features, and the pooled window with `QueuePolicySpec.context`). Only the slots holding
    a job are computed: a queue rarely fills the window. The first layer is split in a job part and
    a row part, the row part computed once a row."""

    def __init__(self, widths: list[int], job_area: bool, row_inputs: int, extra: int = 0):
        super().__init__()
        self.job_area = job_area
        self.job_in = nn.Linear(JOB_FEATURES + extra + int(job_area), widths[0])
        self.cluster_in = nn.Linear(row_inputs, widths[0], bias=False)
        self.rest = nn.Sequential(nn.ReLU(), mlp(widths)) if len(widths) > 1 else nn.Identity()

    def jobs(self, job_features: torch.Tensor, cluster_features: torch.Tensor) -> torch.Tensor:
        """Outputs [N, widths[-1]] of N jobs' features [N, 4 + extra] with their rows' features
        [N, row_inputs] (or [1, row_inputs]: one queue)."""
        first = self.job_in(job_inputs(job_features, self.job_area)) + self.cluster_in(cluster_features)
        return self.rest(first)

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs [N, widths[-1]], the row of each, LongTensor[N])."""
        row, slot = action_mask.nonzero(as_tuple=True)
        return self.jobs(job_features[row, slot], cluster_features[row]), row


def pooled_window(embed: JobMLP, jobs: torch.Tensor, cluster: torch.Tensor, mask: torch.Tensor,
                  dense: bool = False) -> torch.Tensor:
    """The window's make-up as one vector a row, [N, 2E]: the per-job embedding `embed` (one layer,
    the same weights for every job) pooled by mean and max over the visible jobs of job_features
    [N, W, F], cluster_features [N, C] and action_mask [N, W]. `dense` embeds every slot and zeroes
    the empty ones (the same values, W slots of work a row): no shape depends on the data, which
    torch.vmap needs (TorchRL's value estimators run the critic under it)."""
    if dense:  # empty slots zeroed before and after: whatever they hold, no NaN reaches a gradient
        jobs = jobs.masked_fill(~mask.unsqueeze(-1), 0.0)
        embedded = torch.relu(embed.jobs(jobs, cluster.unsqueeze(1)))  # [N, W, E]
        embedded = torch.where(mask.unsqueeze(-1), embedded, 0.0)
        total, largest = embedded.sum(1), embedded.amax(1)
    else:
        embedded, row = embed(jobs, cluster, mask)
        embedded = torch.relu(embedded)  # [n, E] >= 0, so 0 is a neutral start for the max
        b, e = mask.shape[0], embedded.shape[-1]
        total = embedded.new_zeros(b, e).index_add(0, row, embedded)
        largest = embedded.new_zeros(b, e).scatter_reduce(0, row.unsqueeze(1).expand(-1, e), embedded, "amax")
    count = mask.sum(-1, keepdim=True).clamp(min=1)
    return torch.cat([total / count, largest], -1)


class JobScorer(nn.Module):
    """The actor: masked logits [B, W] from job_features [B, W, F] (QueueConfig.job_features of
    `spec.observation()`), cluster_features [B, C] and action_mask [B, W], the same MLP for every job
    (with `spec.context`, also fed the pooled window); -inf on empty slots. Leading dims [B] or [B, T]."""

    def __init__(self, spec: QueuePolicySpec):
        super().__init__()
        self.context = JobMLP([spec.embedding], spec.job_area, spec.cluster_inputs, spec.extra_inputs) \
            if spec.context else None
        rows = spec.cluster_inputs + 2 * spec.embedding * spec.context
        self.mlp = JobMLP([*spec.hidden, 1], spec.job_area, rows, spec.extra_inputs)
        # the prior's rank column; the residual starts at zero, so the untrained scorer is the rule
        self.prior_column = None if spec.prior is None else JOB_FEATURES + spec.rule_ranks.index(spec.prior)
        self.prior_scale = spec.prior_scale
        self.observation = spec.observation()  # what the env must be built with (inputs: JOB_FEATURES + extra)
        self.inputs = (JOB_FEATURES + spec.extra_inputs, spec.cluster_inputs)
        self.rank_columns = slice(JOB_FEATURES, JOB_FEATURES + len(spec.rule_ranks))
        self.prior_weights = nn.Parameter(torch.eye(len(spec.rule_ranks))[spec.rule_ranks.index(spec.prior)]) \
            if spec.prior_mix else None
        if spec.prior is not None:
            last = self.mlp.rest[-1][-1]  # hidden has one width at least: rest ends in mlp's last Linear
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> torch.Tensor:
        if (job_features.shape[-1], cluster_features.shape[-1]) != self.inputs:
            raise ConfigError(f"the queue policy reads {self.inputs[0]} job and {self.inputs[1]} row features "
                              f"({self.observation}), the env gives {job_features.shape[-1]} and "
                              f"{cluster_features.shape[-1]}: build the env's QueueConfig with the policy's "
                              "observation (log.config(..., **net.spec.observation()))")
        jobs, cluster, mask = flat(job_features, cluster_features, action_mask)
        rows = cluster if self.context is None else \
            torch.cat([cluster, pooled_window(self.context, jobs, cluster, mask)], -1)
        scores, _ = self.mlp(jobs, rows, mask)
        logits = torch.full(action_mask.shape, float("-inf"), dtype=scores.dtype, device=scores.device)
        logits = logits.masked_scatter(action_mask, scores.squeeze(-1))  # row-major, as nonzero() listed them
        return logits if self.prior_column is None else logits + self.prior_logits(job_features, action_mask)

    def prior_logits(self, job_features: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The prior rule's logits alone, [B, W] (-inf on empty slots): what the scorer plays with a
        zero residual. ConfigError without `QueuePolicySpec.prior`."""
        if self.prior_column is None:
            raise ConfigError("the scorer has no prior (QueuePolicySpec.prior)")
        if self.prior_weights is None:
            rank = job_features[..., self.prior_column]
        else:  # QueuePolicySpec.prior_mix: the rules' rank features weighed
            rank = (job_features[..., self.rank_columns] * self.prior_weights).sum(-1)
        return torch.where(action_mask, -self.prior_scale * rank, float("-inf"))


class EnsembleScorer(nn.Module):
    """`spec.ensemble` JobScorers of one spec acting as one: their mean masked logits [B, W] (inputs as
    JobScorer's)."""

    def __init__(self, spec: QueuePolicySpec):
        super().__init__()
        self.members = nn.ModuleList(JobScorer(replace(spec, ensemble=1)) for _ in range(spec.ensemble))

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(job_features, cluster_features, action_mask) for m in self.members]).mean(0)

    def prior_logits(self, job_features: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The members' shared prior (`JobScorer.prior_logits`)."""
        return self.members[0].prior_logits(job_features, action_mask)


class QueueValue(nn.Module):
    """The critic: state value [B, 1] from the pooled window (`pooled_window`, `dense` or not) and the
    cluster features (inputs as JobScorer's)."""

    def __init__(self, spec: QueuePolicySpec):
        super().__init__()
        self.embed = JobMLP([spec.embedding], spec.job_area, spec.cluster_inputs, spec.extra_inputs)
        self.head = mlp([2 * spec.embedding + spec.cluster_inputs, *spec.value_hidden, 1])

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor, dense: bool = False) -> torch.Tensor:
        lead = action_mask.shape[:-1]
        jobs, cluster, mask = flat(job_features, cluster_features, action_mask)
        pooled = pooled_window(self.embed, jobs, cluster, mask, dense)
        return self.head(torch.cat([pooled, cluster], -1)).reshape(*lead, 1)


def weight_bound(spec: QueuePolicySpec) -> int:
    """An upper bound on the weights of `QueueNetwork(spec)` (training holds each four times over:
    the weight, its gradient, two Adam moments)."""
    inputs = JOB_FEATURES + spec.extra_inputs + 1 + spec.cluster_inputs + 2 * spec.embedding

    def layers(widths) -> int:
        return sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))

    scorer = layers([inputs, *spec.hidden, 1]) + (inputs + 1) * spec.embedding + 8
    return spec.ensemble * scorer + (inputs + 1) * spec.embedding + layers([inputs, *spec.value_hidden, 1])


class QueueNetwork(nn.Module):
    """The actor (`scorer`) and the critic (`value`) of one queue policy; separate weights, as
    RLScheduler's actor and critic. `forward` gives the masked logits [B, W] (-inf on empty slots)."""

    def __init__(self, spec: QueuePolicySpec = QueuePolicySpec()):
        super().__init__()
        self.spec = spec
        weights = weight_bound(spec)  # before allocating: a spec read from a file may ask for terabytes
        require_memory(f"the queue policy network (about {weights:,} weights)", 16 * weights,
                       {"QueuePolicySpec.hidden": spec.hidden, "value_hidden": spec.value_hidden,
                        "embedding": spec.embedding, "ensemble": spec.ensemble})
        self.scorer = JobScorer(spec) if spec.ensemble == 1 else EnsembleScorer(spec)
        self.value = QueueValue(spec)

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> torch.Tensor:
        return self.scorer(job_features, cluster_features, action_mask)
