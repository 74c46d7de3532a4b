"""Queue policies on disk: `QueuePolicyRecord` (plain values, torch.load(weights_only=True)),
reading and loading a checkpoint, and merging trained runs into an ensemble."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ...config import CHECKPOINT_KEY, QUEUE_POLICY_KIND, QUEUE_RULE_KIND, ConfigError, is_number
from ...files import damaged_record, load_torch_file, require_finite_weights, require_state_dict, write_torch
from ..config import QueueConfig
from .networks import QueueNetwork
from .spec import QueuePolicySpec

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
    train_fraction: float | tuple[float, ...] = 1.0
    """The share of each log's jobs (in submit order, from the first) its run read: the training
    sequences, and the validation sequences that chose the checkpoint. One for every log, or one a
    log in `log`'s order (a policy adapted on a site's history after training on other logs)."""
    adaptation: dict | None = None
    """A meta-policy's inner loop (steps, lr, sequences, episodes: what scripts/adapt.py defaults to);
    None for a policy trained to act as it is."""
    version: int = QUEUE_RECORD_VERSION

    @classmethod
    def of(cls, net: QueueNetwork, cfg: QueueConfig, log=(), train_fraction: float | tuple[float, ...] = 1.0,
           adaptation: dict | None = None) -> QueuePolicyRecord:
        return cls(cfg, net.spec, {k: v.detach().cpu() for k, v in net.state_dict().items()},
                   tuple([log] if isinstance(log, str) else log), shares(train_fraction), adaptation)

    def __post_init__(self) -> None:
        if isinstance(self.train_fraction, tuple) and len(self.train_fraction) != len(self.log):
            raise ConfigError(f"QueuePolicyRecord.train_fraction holds {len(self.train_fraction)} shares for "
                              f"{len(self.log)} logs")

    def log_shares(self) -> dict[str, float]:
        """{log: the share of its jobs the run read}, one entry a log of `log`."""
        share = self.train_fraction
        return dict(zip(self.log, share if isinstance(share, tuple) else [share] * len(self.log)))

    def trained_on(self) -> tuple[tuple[str, ...], float | tuple[float, ...], str]:
        """(the logs its run read, the share of each: one for all or one a log, its backfilling)."""
        return self.log, self.train_fraction, self.queue.backfill

    def save(self, path, overwrite: bool = False) -> Path:
        """A policy-only checkpoint file, written by files.write_torch (whole or not at all; an existing
        file replaced only with `overwrite`). Returns the path written."""
        return write_torch({CHECKPOINT_KEY: self.to_dict()}, path, overwrite)

    def to_dict(self) -> dict:
        return {"kind": QUEUE_POLICY_KIND, "queue": self.queue.to_dict(), "policy": self.policy.to_dict(),
                "state_dict": self.state_dict, "log": list(self.log),
                "train_fraction": list(self.train_fraction) if isinstance(self.train_fraction, tuple)
                else self.train_fraction,
                **({} if self.adaptation is None else {"adaptation": dict(self.adaptation)}),
                "version": QUEUE_RECORD_VERSION}

    @classmethod
    def from_dict(cls, entry: dict) -> QueuePolicyRecord:
        """ConfigError naming the field when one is unknown, or the version is."""
        entry = dict(entry)
        if entry.pop("kind", None) != QUEUE_POLICY_KIND:
            raise ConfigError(f"not a queue policy: no 'kind: {QUEUE_POLICY_KIND}' (a cluster policy is read by "
                              "lightning_sched.policies.checkpoints.load_policy)")
        entry.pop("greedy", None)  # accepted and ignored: a queue policy always acts by its argmax
        version = entry.pop("version", QUEUE_RECORD_VERSION)
        if version != QUEUE_RECORD_VERSION:
            raise ConfigError(f"QueuePolicyRecord.version must be {QUEUE_RECORD_VERSION}, got {version!r}")
        unknown = sorted(set(entry) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"QueuePolicyRecord: unknown field(s) {', '.join(unknown)}")
        require_state_dict(entry.get("state_dict"), "QueuePolicyRecord.state_dict")
        log = entry.get("log", ())
        return cls(QueueConfig.from_dict(entry["queue"]), QueuePolicySpec.from_dict(entry["policy"]),
                   entry["state_dict"], tuple([log] if isinstance(log, str) else log),
                   shares(entry.get("train_fraction", 1.0)), entry.get("adaptation"))


def shares(value) -> float | tuple[float, ...]:
    """A record's train_fraction as stored: one number in (0, 1], or one a log (a list on disk);
    ConfigError naming the field otherwise."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(is_number(v) and 0 < v <= 1 for v in values):
        raise ConfigError(f"QueuePolicyRecord.train_fraction must be a share in (0, 1] or one a log, got {value!r}")
    return tuple(float(v) for v in values) if isinstance(value, (list, tuple)) else float(value)


def read_queue_record(path) -> QueuePolicyRecord:
    """The `QueuePolicyRecord` of a checkpoint written by tasks.queue_ppo or tasks.queue_maml (or a
    record saved under "lightning_sched"), read with weights_only=True; ConfigError naming the file."""
    return queue_record(load_torch_file(path, "queue policy checkpoint", weights_only=True), path)


def queue_record(data, path) -> QueuePolicyRecord:
    """`read_queue_record` of a checkpoint's content `data`, read from `path` (which errors name)."""
    saved = data.get(CHECKPOINT_KEY, data) if isinstance(data, dict) else None
    kind = saved.get("kind") if isinstance(saved, dict) else None
    if kind == QUEUE_RULE_KIND:
        raise ConfigError(f"{path}: a linear queue rule, not a network: evaluate.py --env queue and decide.py run it "
                          "(lightning_sched.queue.linear_rule); a network's checkpoint is needed here")
    if kind != QUEUE_POLICY_KIND:
        raise ConfigError(f"{path}: not a queue policy checkpoint (no '{CHECKPOINT_KEY}' entry of kind "
                          f"'{QUEUE_POLICY_KIND}'; a cluster policy is read by "
                          "lightning_sched.policies.checkpoints.load_policy)")
    require_finite_weights(data, path, "loaded")
    try:
        return QueuePolicyRecord.from_dict(saved)
    except (ConfigError, KeyError) as error:
        raise ConfigError(f"{path}: {error}") from None
    except (TypeError, ValueError, RuntimeError) as error:  # a hand-edited field of another type (a list, a tensor)
        raise damaged_record(path, error) from None


def load_queue_policy(path, device="cpu") -> tuple[QueueNetwork, QueueConfig]:
    """(network in eval mode, the QueueConfig it trained on) of a queue policy checkpoint (`read_queue_record`)."""
    record = read_queue_record(path)
    return queue_network(record, path).to(device).eval(), record.queue


def queue_network(record: QueuePolicyRecord, path="") -> QueueNetwork:
    """The network of `record` (read from `path`, which a ConfigError names when its weights do not fit)."""
    try:
        net = QueueNetwork(record.policy)
    except ConfigError as error:  # a spec too large to build
        raise ConfigError(f"{path}: {error}") from None
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
