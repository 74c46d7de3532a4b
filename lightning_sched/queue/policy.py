"""The per-job policy of the queue env (docs/hpc_queue.md): one small network scores every visible
waiting job with the same weights, so any window size and any cluster size work (the slot
network's idea at job granularity, as RLScheduler's kernel network). A value head for PPO, the
TorchRL actor and critic built on them, greedy acting, and checkpoints readable without training code.

The network reads the env's observation keys (/work/notes/queue_semantics.md):

    job_features:     FloatTensor[B, W, 4 + R]  per slot: wait, requested, processors, fits now (0: empty),
                      and the slot's rank under each rule of QueuePolicySpec.rule_ranks (R of them),
                      and with QueuePolicySpec.fit_delay how long until the job would fit
    cluster_features: FloatTensor[B, 2 (+2)] free nodes share, log queue length (and with
                      QueuePolicySpec.clock the time of day, sin and cos)
    action_mask:      BoolTensor[B, W]      the slot holds a job
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator

from ..config import ConfigError
from ..files import load_torch_file
from .config import CLUSTER_FEATURES, QueueConfig, distinct_rules, row_features
from .reservation import reserve_pick

JOB_FEATURES = 4
IN_KEYS = ("job_features", "cluster_features")
CHECKPOINT_KEY = "lightning_sched"  # the same entry name as the cluster policies' (policies.checkpoints)
POLICY_KIND = "queue"  # tells a queue policy's entry from a cluster policy's


@dataclass
class QueuePolicySpec:
    """The queue policy's sizes (`QueueNetwork`)."""

    hidden: tuple[int, ...] = (32, 16, 8)
    """The job scorer's hidden widths, ReLU. RLScheduler's kernel network: 32, 16, 8."""
    embedding: int = 32
    """Width of the value head's per-job embedding (pooled by mean and max over the window)."""
    value_hidden: tuple[int, ...] = (32, 16)
    """The value head's hidden widths after pooling, ReLU."""
    job_area: bool = False
    """Add a fifth job input, log requested time x processor share: the job's area on a log time
    scale, by which F1-like rules rank (a product that an MLP of RLScheduler's size fits poorly)."""
    context: bool = False
    """Give the scorer the window's make-up: a per-job embedding (width `embedding`) pooled by mean
    and max over the visible jobs enters every job's score beside the cluster features, so that one
    job's score can depend on what else waits (a rule's ranking cannot)."""

    rule_ranks: tuple[str, ...] = ()
    """Rules of the queue's RULES (queue.config) whose ranking of the window each job's inputs also carry (the
    env's `QueueConfig.rule_ranks`, set to these): the scorer can follow a rule, or weigh several
    by the queue it sees (with `context`, by the window's make-up)."""

    fit_delay: bool = False
    """Each job's inputs also carry how long until it would fit (the env's `QueueConfig.fit_delay`)."""
    clock: bool = False
    """The row's inputs also carry the time of day (the env's `QueueConfig.clock`): a departure from
    the prior can depend on where the daily cycle of arrivals stands."""

    prior: str | None = None
    """A rule of `rule_ranks` whose ranking the scores start from (residual policy learning, Silver
    et al. 2018): logit = scorer output - prior_scale x the job's rank feature under the rule, with
    the scorer's last layer zero at the start, so an untrained network plays the rule (sampling
    near it); training learns where to depart from it."""
    prior_mix: bool = False
    """Make the prior a weighted sum of the rank features of every rule of `rule_ranks`, with learned
    weights (`JobScorer.prior_weights`, [R]) that start at 1 on `prior` and 0 on the others: the
    untrained scorer still plays `prior`, and a few gradient steps on R numbers can move the ranking
    toward another rule (a site's adaptation: F1's order on one site, WFP3's aging on another)."""
    prior_scale: float = 20.0
    """The prior's weight on the rank feature log1p(rank) / log1p(window): with a window of 1024,
    20 gives the rule's first pick about 0.8 of the probability."""
    reserve: bool = False
    """Play the ranking with its own reservation (queue.reservation, backfilling off): the sampled
    (or greedy) job is the ranking's first; when it does not fit, a job that ends before its
    reservation starts instead. Needs `fit_delay`."""
    ensemble: int = 1
    """How many scorers of this spec, trained apart (one run each), act together: the logits are their
    mean, so with a shared `prior` the prior plus the mean of the learned residuals (departures the
    members agree on stay, one member's own fade). Built from trained checkpoints by
    scripts/ensemble.py (`ensemble_record`)."""

    def __post_init__(self) -> None:
        self.hidden, self.value_hidden = tuple(self.hidden), tuple(self.value_hidden)
        self.rule_ranks = distinct_rules("QueuePolicySpec.rule_ranks", self.rule_ranks)
        for name in ("hidden", "value_hidden"):
            widths = getattr(self, name)
            if not widths or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in widths):
                raise ConfigError(f"QueuePolicySpec.{name} must be one or more integers >= 1, got {widths!r}")
        for name in ("job_area", "context", "fit_delay", "clock", "prior_mix"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"QueuePolicySpec.{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.embedding, bool) or not isinstance(self.embedding, int) or self.embedding < 1:
            raise ConfigError(f"QueuePolicySpec.embedding must be an integer >= 1, got {self.embedding!r}")
        if self.prior is not None and self.prior not in self.rule_ranks:
            ranks = ", ".join(self.rule_ranks) or "none"
            raise ConfigError(f"QueuePolicySpec.prior must be one of rule_ranks ({ranks}), got {self.prior!r}")
        if self.prior_mix and self.prior is None:
            raise ConfigError("QueuePolicySpec.prior_mix needs a prior (the rule its weights start on)")
        if isinstance(self.prior_scale, bool) or not isinstance(self.prior_scale, (int, float)) or \
                not self.prior_scale > 0:
            raise ConfigError(f"QueuePolicySpec.prior_scale must be a number > 0, got {self.prior_scale!r}")
        if not isinstance(self.reserve, bool):
            raise ConfigError(f"QueuePolicySpec.reserve must be true or false, got {self.reserve!r}")
        if self.reserve and not self.fit_delay:
            raise ConfigError("QueuePolicySpec.reserve needs fit_delay: true (the reservation reads each job's "
                              "fit delay)")
        if isinstance(self.ensemble, bool) or not isinstance(self.ensemble, int) or self.ensemble < 1:
            raise ConfigError(f"QueuePolicySpec.ensemble must be an integer >= 1, got {self.ensemble!r}")

    def observation(self) -> dict:
        """The QueueConfig fields of the extra features this network reads."""
        return {"rule_ranks": self.rule_ranks, "fit_delay": self.fit_delay, "clock": self.clock}

    @property
    def cluster_inputs(self) -> int:
        """Row inputs: the cluster features, and the time of day with `clock` (config.row_features)."""
        return row_features(self.clock)

    @property
    def extra_inputs(self) -> int:
        """Job inputs after the four features."""
        return len(self.rule_ranks) + int(self.fit_delay)

    def to_dict(self) -> dict:
        """Plain lists and ints: readable by torch.load(weights_only=True)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> QueuePolicySpec:
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"QueuePolicySpec: unknown field(s) {', '.join(unknown)}")
        return cls(**values)


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of `sizes` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# The job features enter as log1p(gain x feature): wait and requested time (in units of 12 hours) as
# log1p(seconds / 60), which spreads 10 s .. days over 0.15 .. 8, the processor share and "fits now"
# as they are. Divided by 8, every input stays within about [0, 1].
FEATURE_GAIN = (720.0, 720.0, 0.0, 0.0)  # 0: the feature enters unchanged
LOG_SCALE = 8.0


def job_inputs(job_features: torch.Tensor, job_area: bool = False) -> torch.Tensor:
    """The network's view of job features [..., 4 + R]: log-scaled times (FEATURE_GAIN), the rest
    (processor share, fits now, rule ranks) unchanged, and with `job_area` the log requested time x
    processor share appended ([..., 5 + R])."""
    gain = job_features.new_zeros(job_features.shape[-1])
    gain[:len(FEATURE_GAIN)] = gain.new_tensor(FEATURE_GAIN)
    logged = torch.log1p(job_features.clamp(min=0) * gain) / LOG_SCALE
    inputs = torch.where(gain > 0, logged, job_features)
    if job_area:
        inputs = torch.cat([inputs, inputs[..., 1:2] * inputs[..., 2:3]], -1)
    return inputs


def flat(job_features, cluster_features, action_mask):
    """The inputs with their leading dims ([B] or [B, T]) as one: [N, W, F], [N, C], [N, W]."""
    w = action_mask.shape[-1]
    rows = cluster_features.reshape(-1, cluster_features.shape[-1])
    return job_features.reshape(-1, w, job_features.shape[-1]), rows, action_mask.reshape(-1, w)


class SlotMLP(nn.Module):
    """One MLP applied to every visible job: [N, widths[-1]] for the N jobs of `action_mask` (in
    row-major order) from job_features [B, W, 4 + extra] and the rows' features [B, row_inputs] (the
    cluster features, and the pooled window with `QueuePolicySpec.context`). Only the slots holding
    a job are computed: a queue rarely fills the window. The first layer is split in a job part and
    a row part, the row part computed once a row."""

    def __init__(self, widths: list[int], job_area: bool = False, row_inputs: int = CLUSTER_FEATURES,
                 extra: int = 0):
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


def pooled_window(embed: SlotMLP, jobs: torch.Tensor, cluster: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The window's make-up as one vector a row, [N, 2E]: the per-job embedding `embed` (one layer,
    the same weights for every job) pooled by mean and max over the visible jobs of job_features
    [N, W, F], cluster_features [N, C] and action_mask [N, W]."""
    embedded, row = embed(jobs, cluster, mask)
    embedded = torch.relu(embedded)  # [n, E] >= 0, so 0 is a neutral start for the max
    b, e = mask.shape[0], embedded.shape[-1]
    total = embedded.new_zeros(b, e).index_add(0, row, embedded)
    largest = embedded.new_zeros(b, e).scatter_reduce(0, row.unsqueeze(1).expand(-1, e), embedded, "amax")
    count = mask.sum(-1, keepdim=True).clamp(min=1)
    return torch.cat([total / count, largest], -1)


class JobScorer(nn.Module):
    """The actor: masked logits [B, W] from job_features [B, W, 4 + R], cluster_features [B, C] and
    action_mask [B, W], the same MLP for every job (with `spec.context`, also fed the pooled
    window); -inf on empty slots."""

    def __init__(self, spec: QueuePolicySpec):
        super().__init__()
        self.context = SlotMLP([spec.embedding], spec.job_area, spec.cluster_inputs, spec.extra_inputs) \
            if spec.context else None
        rows = spec.cluster_inputs + 2 * spec.embedding * spec.context
        self.mlp = SlotMLP([*spec.hidden, 1], spec.job_area, rows, spec.extra_inputs)
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
    """`spec.ensemble` JobScorers of one spec acting as one: their mean masked logits [B, W]."""

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
    """The critic: state value [B, 1] from the pooled window (`pooled_window`) and the cluster features."""

    def __init__(self, spec: QueuePolicySpec):
        super().__init__()
        self.embed = SlotMLP([spec.embedding], spec.job_area, spec.cluster_inputs, spec.extra_inputs)
        self.head = mlp([2 * spec.embedding + spec.cluster_inputs, *spec.value_hidden, 1])

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> torch.Tensor:
        lead = action_mask.shape[:-1]
        jobs, cluster, mask = flat(job_features, cluster_features, action_mask)
        return self.head(torch.cat([pooled_window(self.embed, jobs, cluster, mask), cluster], -1)).reshape(*lead, 1)


class QueueNetwork(nn.Module):
    """The actor (`scorer`) and the critic (`value`) of one queue policy; separate weights, as
    RLScheduler's actor and critic. `forward` gives the masked logits [B, W] (-inf on empty slots)."""

    def __init__(self, spec: QueuePolicySpec = QueuePolicySpec()):
        super().__init__()
        self.spec = spec
        self.scorer = JobScorer(spec) if spec.ensemble == 1 else EnsembleScorer(spec)
        self.value = QueueValue(spec)

    def forward(self, job_features: torch.Tensor, cluster_features: torch.Tensor,
                action_mask: torch.Tensor) -> torch.Tensor:
        return self.scorer(job_features, cluster_features, action_mask)


def make_actor(net: QueueNetwork) -> ProbabilisticActor:
    """The TorchRL actor: job_features, cluster_features -> "logits" -> MaskedCategorical over the
    slots allowed by "action_mask" -> "action" (int64 [B]) and "action_log_prob". A finished row's
    mask allows slot 0 (the env sets it, and ignores the action), so the distribution stays defined."""
    scores = TensorDictModule(net.scorer, in_keys=[*IN_KEYS, "action_mask"], out_keys=["logits"])
    return ProbabilisticActor(scores, in_keys={"logits": "logits", "mask": "action_mask"}, out_keys=["action"],
                              distribution_class=MaskedCategorical, return_log_prob=True)


def make_critic(net: QueueNetwork) -> ValueOperator:
    """The TorchRL critic: job_features, cluster_features, action_mask -> "state_value" [B, 1]."""
    return ValueOperator(net.value, in_keys=[*IN_KEYS, "action_mask"])


def reserved_action(spec: QueuePolicySpec, logits: torch.Tensor, first: torch.Tensor, td) -> torch.Tensor:
    """The slot the env starts, LongTensor[B]: `first` (the job picked from `logits` [B, W]), or with
    `spec.reserve` the reservation's pick (queue.reservation.reserve_pick) for the ranking that puts
    `first` ahead and the rest in the order of their logits."""
    if not spec.reserve:
        return first
    score = torch.where(td["action_mask"], -logits.double(), torch.inf)
    score = score.scatter(1, first.unsqueeze(1), -torch.inf)
    return reserve_pick(score, td, len(spec.rule_ranks))


def network_inputs(td: TensorDictBase, device) -> TensorDictBase:
    """What a queue network reads of the env's TensorDict `td`, on `device` (the network's, which
    may not be the env's: the [B, L] sequences and the state stay behind)."""
    return td.select(*IN_KEYS, "action_mask").to(device)


@torch.no_grad()
def choose(net, spec: QueuePolicySpec, td: TensorDictBase, device, greedy: bool = True,
           generator: torch.Generator | None = None) -> tuple[TensorDictBase, torch.Tensor]:
    """One decision of `net` (a QueueNetwork, its scorer or a functional copy of it, of policy `spec`)
    running on `device` for every row of the env's `td`: the job it picks first, the argmax of the
    masked logits (greedy) or a draw from their softmax with `generator` (on the generator's device);
    writes td["action"], that job played with the reservation when `spec.reserve` (`reserved_action`,
    on the env's device). Returns (what the network read, on `device`; the first picks, LongTensor[B]
    on `device`). A finished row's mask allows slot 0 only (the env ignores its action)."""
    seen = network_inputs(td, device)
    logits = net(seen["job_features"], seen["cluster_features"], seen["action_mask"])
    if greedy:
        first = logits.argmax(-1)
    else:
        probs = torch.softmax(logits, -1)
        draw_on = probs.device if generator is None else generator.device
        first = torch.multinomial(probs.to(draw_on), 1, generator=generator).squeeze(-1).to(device)
    env_device = td["action_mask"].device
    td["action"] = reserved_action(spec, logits.to(env_device), first.to(env_device), td)
    return seen, first


class QueuePolicy:
    """A network as a policy of the queue env: td -> td with "action" (`choose`, the network on its
    own device): greedy, for evaluation, or sampled with `generator`."""

    def __init__(self, net: QueueNetwork, greedy: bool = True, generator: torch.Generator | None = None):
        self.net, self.greedy, self.generator = net, greedy, generator

    def __call__(self, td):
        choose(self.net, self.net.spec, td, next(self.net.parameters()).device, self.greedy, self.generator)
        return td


QUEUE_RECORD_VERSION = 1


@dataclass(frozen=True)
class QueuePolicyRecord:
    """What a checkpoint needs to rebuild and run a queue policy without the training code, and what
    it trained on; kept under the checkpoint's "lightning_sched" entry with `kind: queue`, written
    and read only through `to_dict` / `from_dict` (plain values: torch.load(weights_only=True))."""

    queue: QueueConfig
    """The queue it trained on: its window and feature scales are what the network reads."""
    policy: QueuePolicySpec
    """The network."""
    state_dict: dict = field(repr=False)
    """The network's weights (on the CPU)."""
    log: tuple[str, ...] = ()
    """The logs it trained on."""
    train_fraction: float = 1.0
    """The share of each log's jobs (in submit order, from the first) its run read: the training
    sequences, and the validation sequences that chose the checkpoint."""
    adaptation: dict | None = None
    """A meta-policy's inner loop (steps, lr, sequences, episodes: what scripts/adapt.py defaults to);
    None for a policy trained to act as it is."""
    version: int = QUEUE_RECORD_VERSION

    @classmethod
    def of(cls, net: QueueNetwork, cfg: QueueConfig, log=(), train_fraction: float = 1.0,
           adaptation: dict | None = None) -> QueuePolicyRecord:
        return cls(cfg, net.spec, {k: v.detach().cpu() for k, v in net.state_dict().items()},
                   tuple([log] if isinstance(log, str) else log), float(train_fraction), adaptation)

    def to_dict(self) -> dict:
        return {"kind": POLICY_KIND, "queue": self.queue.to_dict(), "policy": self.policy.to_dict(),
                "state_dict": self.state_dict, "log": list(self.log), "train_fraction": self.train_fraction,
                **({} if self.adaptation is None else {"adaptation": dict(self.adaptation)}),
                "version": QUEUE_RECORD_VERSION}

    @classmethod
    def from_dict(cls, entry: dict) -> QueuePolicyRecord:
        """ConfigError naming the field when one is unknown, or the version is."""
        entry = dict(entry)
        if entry.pop("kind", None) != POLICY_KIND:
            raise ConfigError(f"not a queue policy: no 'kind: {POLICY_KIND}' (a cluster policy is read by "
                              "lightning_sched.policies.checkpoints.load_policy)")
        entry.pop("greedy", None)  # the first files wrote it; a queue policy always acts by its argmax
        version = entry.pop("version", QUEUE_RECORD_VERSION)
        if version != QUEUE_RECORD_VERSION:
            raise ConfigError(f"QueuePolicyRecord.version must be {QUEUE_RECORD_VERSION}, got {version!r}")
        unknown = sorted(set(entry) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"QueuePolicyRecord: unknown field(s) {', '.join(unknown)}")
        log = entry.get("log", ())
        return cls(QueueConfig.from_dict(entry["queue"]), QueuePolicySpec.from_dict(entry["policy"]),
                   entry["state_dict"], tuple([log] if isinstance(log, str) else log),
                   float(entry.get("train_fraction", 1.0)), entry.get("adaptation"))


def read_queue_record(path) -> QueuePolicyRecord:
    """The `QueuePolicyRecord` of a checkpoint written by tasks.queue_ppo or tasks.queue_maml (or a
    record saved under "lightning_sched"), read with weights_only=True; ConfigError naming the file."""
    data = load_torch_file(path, "queue policy checkpoint", weights_only=True)
    saved = data.get(CHECKPOINT_KEY, data) if isinstance(data, dict) else None
    kind = saved.get("kind") if isinstance(saved, dict) else None
    if kind == "queue_linear_rule":  # linear_rule.RULE_KIND (that module imports this one)
        raise ConfigError(f"{path}: a linear queue rule, not a network: evaluate.py --env queue runs it "
                          "(lightning_sched.queue.linear_rule); a network's checkpoint is needed here")
    if kind != POLICY_KIND:
        raise ConfigError(f"{path}: not a queue policy checkpoint (no '{CHECKPOINT_KEY}' entry of kind "
                          f"'{POLICY_KIND}'; a cluster policy is read by "
                          "lightning_sched.policies.checkpoints.load_policy)")
    try:
        return QueuePolicyRecord.from_dict(saved)
    except (ConfigError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: {error}") from None


def load_queue_policy(path, device="cpu") -> tuple[QueueNetwork, QueueConfig]:
    """(network in eval mode, the QueueConfig it trained on) of a queue policy checkpoint (`read_queue_record`)."""
    record = read_queue_record(path)
    return queue_network(record, path).to(device).eval(), record.queue


def queue_network(record: QueuePolicyRecord, path="") -> QueueNetwork:
    """The network of `record` (read from `path`, which a ConfigError names when its weights do not fit)."""
    net = QueueNetwork(record.policy)
    try:
        net.load_state_dict(record.state_dict)
    except RuntimeError as error:  # missing or misshapen weights: a damaged or hand-edited file
        raise ConfigError(f"{path}: its weights do not fit its policy {net.spec!r} "
                          f"({str(error).strip().splitlines()[-1].strip()[:200]})") from error
    return net


def ensemble_record(records: dict[str, QueuePolicyRecord]) -> QueuePolicyRecord:
    """One record acting as the mean of the scorers of `records` (path -> record; QueuePolicySpec.ensemble),
    with the first one's value head. They must be runs of one recipe: the same queue config, policy
    spec, logs and train fraction (ConfigError naming the field and the file that differs); ensembles
    and meta-policies are refused as members."""
    if len(records) < 2:
        raise ConfigError(f"an ensemble needs two policies at least, got {len(records)}")
    (first_path, first), *_ = records.items()
    described = {"queue": lambda r: r.queue.to_dict(), "policy": lambda r: r.policy.to_dict(),
                 "log": lambda r: list(r.log), "train_fraction": lambda r: r.train_fraction}
    for path, record in records.items():
        if record.policy.ensemble != 1 or record.adaptation is not None:
            raise ConfigError(f"{path}: already an ensemble or a meta-policy; members are single trained policies")
        for name, value in described.items():
            mine, theirs = value(record), value(first)
            if mine != theirs:
                if isinstance(mine, dict):
                    key = next(k for k in mine if mine[k] != theirs.get(k))
                    name, mine, theirs = f"{name}.{key}", mine[key], theirs.get(key)
                raise ConfigError(f"{path}: {name} is {mine!r}, {first_path} has {theirs!r}; an ensemble's members "
                                  "are runs of one recipe")
    state = {k: v for k, v in first.state_dict.items() if not k.startswith("scorer.")}
    for i, record in enumerate(records.values()):
        state.update({f"scorer.members.{i}.{k[len('scorer.'):]}": v for k, v in record.state_dict.items()
                      if k.startswith("scorer.")})
    return replace(first, policy=replace(first.policy, ensemble=len(records)), state_dict=state)
