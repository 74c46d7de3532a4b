"""Policy networks over the cluster state and the action head (how they act: acting.py; on disk:
checkpoints.py).

DeepRM's network (Mao et al., HotNets 2016, section 4.1): the image [T, W] flattened, one fully
connected hidden layer of 20 ReLU units, a softmax over the M+1 actions. `PolicySpec` describes a
network (more or wider hidden layers, masked or unmasked softmax); `make_policy(spec, cfg)` builds it.

**The first layer without the image.** The image is a fixed 0/1 function of the structured state:
cluster row k of resource r holds ones in its first used[k][r] cells; slot i's block holds ones
in rows k < d and columns u < q[r]; the backlog block holds min(backlog, backlog_size) ones
row-major; the last column is since_new in every row. So the first dense layer's output,
sum over cells of weight * cell, is a sum of prefix sums of the weights:

    h = sum_{k,r} C_r[k, used[k][r]] + sum_{i,r} S_{i,r}[d_i, q_i[r]] + B[backlog] + since * c + bias

with C_r the cumulative sum of resource r's cluster-block weights along the unit axis, S_{i,r}
the 2-D cumulative sum of slot i's block along time and units, B the cumulative sum of the
backlog block in row-major order, c the sum of the last column. All prefix sums are rows of one
table built from the weight matrix, so the layer is one `embedding_bag` over T*R + M*R + 1 table
rows per state: the same function and the same gradients as multiplying the rendered image
(tests/test_policies.py holds both), about 70x fewer multiply-adds, and no image in the hot path.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from ..config import ClusterConfig, ConfigError, is_finite
from ..deeprm.observations import arrival_rate, render_image
from ..heuristics import EDF, SJF, Packer, Tetris
from ..limits import require_memory

PRIORS = {"tetris": Tetris, "sjf": SJF, "packer": Packer, "edf": EDF}


@dataclass
class PolicySpec:
    """Which network to build (`make_policy`)."""

    hidden: tuple[int, ...] = (20,)
    """Hidden layer widths, ReLU. DeepRM: one layer of 20 units (section 4.1)."""
    masked: bool = False
    """Softmax over the valid actions only (action_mask). DeepRM: False, invalid actions act as void."""
    deadline_inputs: bool = False
    """Also read each slot job's slack, deadline - now - duration (DeepRM's image shows no job
    ages or deadlines): two inputs a slot, min(slack, T) / T and whether the deadline can no
    longer be met. DeepRM: False."""
    kind: str = "image"
    """"image": DeepRM's network over the flattened image, for one cluster size. "slots": one
    small network scores every slot job from its own size-normalized features (`SlotNetwork`), so
    the same weights run on any num_slots, resource_units, horizon and max_job_len (needs masked)."""
    prior: str | None = None
    """kind "slots": a heuristic ("tetris", "sjf", "packer", "edf") whose preference is added to
    the logits, so the untrained network already acts like it and learning only has to find where
    to deviate. None: no prior."""
    prior_scale: float = 10.0
    """The prior's weight at initialization (learned from there)."""
    arrival_inputs: bool = False
    """kind "slots": the context also reads how fast jobs have been arriving: the arrivals seen so
    far per step (observations.arrival_rate), times horizon / num_slots (jobs expected
    within the horizon per slot), and time / horizon (how much that estimate has seen), each at
    most 4. Their weights start at zero, so a network without them warm-starts one with them."""

    def __post_init__(self) -> None:
        for name in ("masked", "deadline_inputs", "arrival_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"PolicySpec.{name} must be true or false, got {getattr(self, name)!r}")
        self.hidden = tuple(self.hidden)
        if not self.hidden or any((not isinstance(h, int)) or h < 1 for h in self.hidden):
            raise ConfigError(f"PolicySpec.hidden must be one or more integers >= 1, got {self.hidden!r}")
        if self.kind not in ("image", "slots"):
            raise ConfigError(f"PolicySpec.kind must be 'image' or 'slots', got {self.kind!r}")
        if self.kind == "slots" and not self.masked:
            raise ConfigError("PolicySpec.masked must be true for kind 'slots' (it scores only the jobs that can be "
                              "placed), got false")
        if self.arrival_inputs and self.kind != "slots":
            raise ConfigError(f"PolicySpec.arrival_inputs needs kind 'slots', got kind {self.kind!r}")
        if self.prior is not None and (self.kind != "slots" or self.prior not in PRIORS):
            raise ConfigError(f"PolicySpec.prior={self.prior!r} needs kind 'slots' and one of {sorted(PRIORS)}")
        if not is_finite(self.prior_scale) or self.prior_scale <= 0:
            raise ConfigError(f"PolicySpec.prior_scale must be a finite number > 0, got {self.prior_scale!r}")

    @property
    def any_cluster(self) -> bool:
        """Whether the network runs on a cluster of another size than it was trained on."""
        return self.kind == "slots"

    def to_dict(self) -> dict:
        return asdict(self)


class TableSum(torch.autograd.Function):
    """out[n] = sum_j table[cells[n, j]] (`embedding_bag`'s sum), with a backward that adds the
    gradient column by column (`index_add_`) instead of sorting all D*K indices as
    `embedding_bag`'s dense backward does: about 5x faster on a CPU for a rollout's worth of
    decisions, the same values. Written with differentiable ops, so second-order gradients
    (MAML) flow through it."""

    @staticmethod
    def forward(ctx, cells: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cells)
        ctx.rows = table.shape[0]
        return F.embedding_bag(cells, table, mode="sum")

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (cells,) = ctx.saved_tensors
        grad_table = grad_out.new_zeros(ctx.rows, grad_out.shape[1])
        for j in range(cells.shape[1]):
            grad_table = grad_table.index_add(0, cells[:, j].long(), grad_out)
        return None, grad_table


def action_logits(logits: torch.Tensor, mask: torch.Tensor, masked: bool) -> torch.Tensor:
    """The action head's logits [B, M+1]: with `masked`, invalid actions get -inf (never sampled);
    without, DeepRM's plain softmax (an invalid pick advances time like void)."""
    return logits.masked_fill(~mask, float("-inf")) if masked else logits


class PolicyNetwork(Protocol):
    """What a rollout (`rollout.collect`) and a policy-gradient step need of a network: features
    from an observation, and logits from features. `DeepRMNetwork` and `SlotNetwork` are such
    networks; so is a block of per-task networks acting on their own rows of one batch (tasks.maml)."""

    cfg: ClusterConfig

    def encode(self, obs) -> dict[str, torch.Tensor]:
        """The features the network reads, from an observation's structured keys: each [B, ...]."""

    def frozen(self) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
        """features -> logits [B, M+1] with the weights as they are now (for rollouts under no_grad)."""


class DeepRMNetwork(nn.Module):
    """DeepRM's policy: MLP over the flattened image, first layer computed from the structured
    state (module docstring). Features per state (see `encode`):

        cells: IntTensor[B, T*R + M*R + 1]  rows of the prefix table to sum
        since: FloatTensor[B]              the since-new column's value
        mask:  BoolTensor[B, M+1]          valid actions
        slack: FloatTensor[B, 2M]          only with spec.deadline_inputs (PolicySpec)
    """

    def __init__(self, cfg: ClusterConfig, spec: PolicySpec = PolicySpec()):
        super().__init__()
        self.cfg, self.spec = cfg, spec
        t, width = cfg.horizon, cfg.image_width
        sizes = (t * width, *spec.hidden)
        self.first = nn.Linear(sizes[0], sizes[1])  # weight [H, T*W] in the image's row-major layout
        layers: list[nn.Module] = []
        for a, b in zip(sizes[1:-1], sizes[2:]):
            layers += [nn.ReLU(), nn.Linear(a, b)]
        self.body = nn.Sequential(*layers, nn.ReLU(), nn.Linear(sizes[-1], cfg.num_actions))
        if spec.deadline_inputs:
            # starts at zero: the network first acts as without these inputs (and a warm start
            # from a network without them keeps its policy)
            self.deadline = nn.Linear(2 * cfg.num_slots, sizes[1], bias=False)
            nn.init.zeros_(self.deadline.weight)
        self._layout()

    def _layout(self) -> None:
        """Where each part of the image starts, as table rows (module docstring)."""
        cfg = self.cfg
        t, u, mu, m, r = cfg.horizon, cfg.resource_units, cfg.max_job_units, cfg.num_slots, cfg.num_resources
        self.cluster_rows = t * (u + 1)  # per resource: row k*(U+1) + n = first n cells of time row k
        self.slot_rows = (t + 1) * (mu + 1)  # per (resource, slot): row d*(MU+1) + q
        self.slot_base = r * self.cluster_rows
        self.backlog_base = self.slot_base + r * m * self.slot_rows
        self.table_rows = self.backlog_base + t * cfg.backlog_width + 1
        k = torch.arange(t)
        self.register_buffer("cluster_offset",
                             (torch.arange(r) * self.cluster_rows).view(1, r) + (k * (u + 1)).view(t, 1),
                             persistent=False)  # [T, R]
        self.register_buffer("slot_offset",
                             self.slot_base + (torch.arange(r).view(1, r) * m + torch.arange(m).view(m, 1))
                             * self.slot_rows, persistent=False)  # [M, R]

    # ----- features ------------------------------------------------------------------------------
    def encode(self, obs) -> dict[str, torch.Tensor]:
        """The features `logits` needs, from an observation's structured keys (any mode)."""
        cfg = self.cfg
        used = obs["used"]  # [B, T, R]
        self.require_its_cluster(used, obs["slot_demand"])
        b = used.shape[0]
        cluster = self.cluster_offset + used  # [B, T, R]
        # [B, M, R]
        slots = self.slot_offset + (obs["slot_duration"] * (cfg.max_job_units + 1)).unsqueeze(-1) + obs["slot_demand"]
        backlog = self.backlog_base + obs["backlog"].clamp(max=cfg.backlog_size)  # [B, 1]
        cells = torch.cat([cluster.reshape(b, -1), slots.reshape(b, -1), backlog.reshape(b, 1)], dim=1)
        features = {"cells": cells.int(), "since": obs["since_new"].reshape(b).float(), "mask": obs["action_mask"]}
        if self.spec.deadline_inputs:
            features["slack"] = self.slack_inputs(obs)
        return features

    def slack_inputs(self, obs) -> torch.Tensor:
        """[B, 2M]: per slot min(slack, T) / T and 1.0 if slack < 0 (the deadline cannot be met
        any more), zeros for an empty slot; slack = deadline - now - duration."""
        present = obs["slot_duration"] > 0
        slack = obs["slot_deadline"] - obs["slot_duration"]
        horizon = self.cfg.horizon
        scaled = torch.where(present, slack.clamp(0, horizon).float() / horizon, 0.0)
        late = (present & (slack < 0)).float()
        return torch.cat([scaled, late], dim=1)

    def prefix_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(table [rows, H] of prefix sums of the first layer's weights, since-column weights [H])."""
        cfg = self.cfg
        t, u, mu, m, r = cfg.horizon, cfg.resource_units, cfg.max_job_units, cfg.num_slots, cfg.num_resources
        h = self.first.out_features
        w = self.first.weight.view(h, t, cfg.image_width).permute(1, 2, 0)  # [T, W, H]
        parts = []
        per_resource = w[:, : r * (u + m * mu)].reshape(t, r, u + m * mu, h)
        cluster = F.pad(per_resource[:, :, :u].cumsum(2), (0, 0, 1, 0))  # [T, R, U+1, H]
        parts.append(cluster.permute(1, 0, 2, 3).reshape(-1, h))
        slots = per_resource[:, :, u:].reshape(t, r, m, mu, h).cumsum(0).cumsum(3)
        slots = F.pad(slots, (0, 0, 1, 0, 0, 0, 0, 0, 1, 0))  # [T+1, R, M, MU+1, H]
        parts.append(slots.permute(1, 2, 0, 3, 4).reshape(-1, h))
        start = r * (u + m * mu)
        backlog = w[:, start : start + cfg.backlog_width].reshape(-1, h).cumsum(0)  # row-major cells
        parts.append(F.pad(backlog, (0, 0, 1, 0)))
        return torch.cat(parts), w[:, -1].sum(0)

    # ----- the network -----------------------------------------------------------------------------
    def forward(self, features: dict[str, torch.Tensor], table: tuple | None = None) -> torch.Tensor:
        """Action logits [B, M+1] (masked per the spec). `table`: `prefix_table()`, when the caller
        evaluates many batches with the same weights (a rollout)."""
        table, since_weight = table or self.prefix_table()
        hidden = TableSum.apply(features["cells"], table)
        hidden = hidden + features["since"].unsqueeze(1) * since_weight + self.first.bias
        if self.spec.deadline_inputs:
            hidden = hidden + self.deadline(features["slack"])
        return action_logits(self.body(hidden), features["mask"], self.spec.masked)

    def require_its_cluster(self, used: torch.Tensor, slot_demand: torch.Tensor) -> None:
        """ConfigError unless the observation (used [B, T, R], slot_demand [B, M, R]) is of the cluster
        the network was built for: its input is that cluster's image, and another's would index the
        wrong cells. Units are checked on the CPU only (a GPU would wait for the value)."""
        cfg = self.cfg
        shapes = (tuple(used.shape[1:]), tuple(slot_demand.shape[1:]))
        if shapes != ((cfg.horizon, cfg.num_resources), (cfg.num_slots, cfg.num_resources)) or (
                used.device.type == "cpu" and used.numel() and int(used.max()) > cfg.resource_units):
            raise ConfigError(f"DeepRM's image network reads its own cluster's image (horizon {cfg.horizon}, "
                              f"{cfg.num_resources} resources of {cfg.resource_units} units, {cfg.num_slots} "
                              f"slots); this observation has used {list(shapes[0])}, slot_demand {list(shapes[1])}"
                              f" and up to {int(used.max()) if used.numel() else 0} units used: build the env with "
                              "the checkpoint's ClusterConfig, or use a slot policy (any cluster size)")

    def logits_from_image(self, image: torch.Tensor, mask: torch.Tensor,
                          slack: torch.Tensor | None = None) -> torch.Tensor:
        """The same logits from the rendered image [B, T, W] (reference path, for tests)."""
        hidden = self.first(image.flatten(1))
        if self.spec.deadline_inputs:
            hidden = hidden + self.deadline(slack)
        return action_logits(self.body(hidden), mask, self.spec.masked)

    def render(self, obs) -> torch.Tensor:
        """DeepRM's image [B, T, W] of an observation, whatever the env's observation mode."""
        b = obs["used"].shape[0]
        return render_image(obs["used"], obs["slot_duration"], obs["slot_demand"], obs["backlog"].reshape(b),
                            obs["since_new"].reshape(b), self.cfg)

    def frozen(self):
        """features -> logits with the weights as they are now (the prefix table built once): what a
        rollout under torch.no_grad calls at every step."""
        table = self.prefix_table()
        return lambda features: self(features, table)


def log_prob(net: nn.Module, features: dict[str, torch.Tensor],
             action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(action | state) [N], entropy [N]) for N states, through `net`'s forward (so a
    `higher` functional copy of the network works the same)."""
    logp = torch.log_softmax(net(features), -1)
    p = logp.exp()
    entropy = -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)
    return logp.gather(1, action.unsqueeze(1)).squeeze(1), entropy


class SlotNetwork(nn.Module):
    """A slot-equivariant policy: the same small network scores every waiting job in a slot from
    that job's own features, and the void action from the cluster's context; every feature is a
    fraction of the cluster's size (capacity, horizon, slots), so the weights run on any num_slots,
    resource_units, horizon and max_job_len (the number of resources R is fixed: demands and free
    capacity are read per resource). Masked softmax. Features per state (see `encode`):

        slots:   FloatTensor[B, M, 9 + 3R]  per slot job (zeros for an empty slot)
        present: BoolTensor[B, M]           the slot holds a job
        context: FloatTensor[B, 4 + 3R]
        arrivals: FloatTensor[B, 2]         with spec.arrival_inputs: arrivals a step x T / M, time / T
        mask:    BoolTensor[B, M+1]         valid actions
        prior:   FloatTensor[B, M+1]        with spec.prior: the heuristic's preference

    The slot jobs are also pooled (mean and max of their embeddings) into the context, so each
    job's score can depend on what else waits. With a prior, logits = network + scale x prior and
    the scoring layers start at zero: the untrained policy acts like the heuristic.
    """

    def __init__(self, cfg: ClusterConfig, spec: PolicySpec):
        super().__init__()
        self.cfg, self.spec = cfg, spec
        h, r = spec.hidden[0], cfg.num_resources
        self.slot_in = nn.Linear(9 + 3 * r, h)  # the job's embedding
        self.context_in = nn.Linear(4 + 3 * r + 2 * h, h)  # the cluster and the pooled jobs
        self.slot_mix, self.context_mix = nn.Linear(h, h), nn.Linear(h, h, bias=False)  # job x context
        self.slot_out = nn.Linear(h, 1)
        self.void_mix, self.void_out = nn.Linear(h, h), nn.Linear(h, 1)
        if spec.arrival_inputs:  # starts at zero: the network acts as it did without them
            self.arrivals = nn.Linear(2, h, bias=False)
            nn.init.zeros_(self.arrivals.weight)
        self.heuristic = PRIORS[spec.prior](cfg) if spec.prior else None
        if self.heuristic is not None:
            self.log_prior_scale = nn.Parameter(torch.tensor(math.log(spec.prior_scale)))
            for out in (self.slot_out, self.void_out):
                nn.init.zeros_(out.weight)
                nn.init.zeros_(out.bias)

    def encode(self, obs) -> dict[str, torch.Tensor]:
        """The features `forward` needs, from an observation's structured keys (any mode)."""
        cfg = self.cfg
        horizon, units = cfg.horizon, cfg.resource_units
        duration = obs["slot_duration"].float()  # [B, M]
        present = duration > 0
        length = duration.clamp(min=1)
        demand = obs["slot_demand"].float() / units  # [B, M, R], share of capacity
        free = obs["free_now"].float() / units  # [B, R]
        offset = obs["slot_offset"]
        feasible, fits = offset >= 0, offset == 0
        waited = obs["slot_waited"].float()
        slack = obs["slot_deadline"].float() - duration
        used = obs["used"].float() / units  # [B, T, R]
        b = used.shape[0]
        # free capacity over the rows a job placed now would occupy, [B, M, R]: prefix sums over time
        rows_used = torch.cat([used.new_zeros(b, 1, used.shape[2]), used.cumsum(1)], 1)  # [B, T+1, R]
        span = duration.long().clamp(1, horizon)
        during = rows_used.gather(1, span.unsqueeze(-1).expand(-1, -1, used.shape[2])) / span.unsqueeze(-1)
        columns = [
            duration / horizon, 1 / length,  # SJF's quantity
            torch.where(feasible, offset.float() / horizon, 1.0), fits.float(), feasible.float(),
            (waited / horizon).clamp(max=4), (slack / horizon).clamp(-2, 2),
            torch.log((waited + offset.clamp(min=0) + length) / length),  # its slowdown if placed at its offset
            (free.unsqueeze(1) * demand).mean(-1),  # Tetris's packing term, per unit of capacity
            *demand.unbind(-1), *(free.unsqueeze(1) - demand).unbind(-1),  # per resource: ask, left now,
            *(1 - during - demand).unbind(-1),  # left during its rows
        ]
        # stacked feature-first (whole [B, M] blocks), then one transposing copy: several times
        # cheaper than stacking [B, M] columns along the last dimension
        slot = (torch.stack(columns) * present).permute(1, 2, 0).contiguous()  # [B, M, 9 + 3R]
        context = torch.cat([
            free, 1 - used.mean(1), 1 - used[:, : max(1, horizon // 4)].mean(1),  # per resource
            torch.stack([(obs["backlog"].reshape(b).float() / cfg.num_slots).clamp(max=5), present.float().mean(-1),
                         obs["since_new"].reshape(b).float(), fits.any(-1).float()], -1),
        ], -1)
        features = {"slots": slot, "present": present, "context": context, "mask": obs["action_mask"]}
        if self.spec.arrival_inputs:
            time = obs["time"].view(b).double()
            arrivals = torch.stack([arrival_rate(obs) * horizon / cfg.num_slots, time / horizon], -1)
            features["arrivals"] = arrivals.clamp(max=4).float()
        if self.heuristic is not None:
            features["prior"] = self.prior_preference(obs, fits)
        return features

    def prior_preference(self, obs, fits: torch.Tensor) -> torch.Tensor:
        """[B, M+1]: 1 + the heuristic's score scaled to [0, 1] among the jobs that fit now, 0 for
        the others, and 0.5 for void: the work-conserving heuristic's choice has the largest value."""
        score = self.heuristic.score(obs).float()
        low = score.masked_fill(~fits, float("inf")).amin(-1, keepdim=True)
        high = score.masked_fill(~fits, float("-inf")).amax(-1, keepdim=True)
        scaled = torch.where(high > low, (score - low) / (high - low), 1.0)
        slots = torch.where(fits, 1 + scaled, 0.0)
        return torch.cat([slots, torch.full_like(slots[:, :1], 0.5)], -1)

    def forward(self, features: dict[str, torch.Tensor], table=None) -> torch.Tensor:
        """Masked action logits [B, M+1]."""
        slots, present = features["slots"], features["present"]
        b, m, _ = slots.shape
        # only the slots that hold a job are computed (often a few of M): rows of the flat [B*M] view
        rows = present.reshape(-1).nonzero().squeeze(1)
        owner = rows // m  # [N]: the state each present slot belongs to
        embedded = torch.relu(self.slot_in(slots.reshape(b * m, -1)[rows]))  # [N, H]
        # mean and max over each state's present jobs, straight from the [N, H] rows (a dense
        # [B, M, H] grid would cost more than the layers themselves); ReLU outputs are >= 0, so
        # the zeros a state starts from never win the max
        total = embedded.new_zeros(b, embedded.shape[1]).index_add(0, owner, embedded)
        peak = embedded.new_zeros(b, embedded.shape[1]).scatter_reduce(
            0, owner.unsqueeze(1).expand_as(embedded), embedded, "amax")
        count = present.sum(1, keepdim=True).clamp(min=1)
        pooled = torch.cat([features["context"], total / count, peak], -1)
        context = self.context_in(pooled)
        if self.spec.arrival_inputs:
            context = context + self.arrivals(features["arrivals"])
        context = torch.relu(context)  # [B, H]
        mixed = torch.relu(self.slot_mix(embedded) + self.context_mix(context)[owner])  # [N, H]
        scores = embedded.new_zeros(b * m).index_copy(0, rows, self.slot_out(mixed).squeeze(1))  # empty: masked
        void = self.void_out(torch.relu(self.void_mix(context)))  # [B, 1]
        logits = torch.cat([scores.view(b, m), void], -1)
        if self.heuristic is not None:
            logits = logits + self.log_prior_scale.exp() * features["prior"]
        return action_logits(logits, features["mask"], masked=True)

    def frozen(self):
        return self


def make_policy(spec: PolicySpec, cfg: ClusterConfig) -> DeepRMNetwork | SlotNetwork:
    """The network a `PolicySpec` describes, for cluster `cfg`; refused (ConfigError naming the
    sizes) when training it would not fit in memory."""
    network = SlotNetwork if spec.kind == "slots" else DeepRMNetwork
    with torch.device("meta"):  # the same module without storage: its exact sizes, nothing allocated
        probe = network(cfg, spec)
    weights = sum(p.numel() for p in probe.parameters())
    table = getattr(probe, "table_rows", 0) * spec.hidden[0]  # DeepRM's prefix table [rows, H]
    # the sizes the weights grow with: the image's for DeepRM's network, the widths for the slot network
    sizes = ("num_resources",) if spec.kind == "slots" else ("num_resources", "resource_units", "horizon",
                                                             "num_slots", "max_job_units")
    # training holds float32 weights, their gradients and two Adam moments; the prefix table, its
    # gradient and the cumulative sums that build it
    require_memory(f"the policy network ({weights:,} weights)", 4 * (4 * weights + 3 * table),
                   {"PolicySpec.hidden": spec.hidden, **{f"ClusterConfig.{k}": getattr(cfg, k) for k in sizes}})
    return network(cfg, spec)
