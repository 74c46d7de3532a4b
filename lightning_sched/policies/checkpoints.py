"""Trained policies on disk: the `PolicyRecord` a checkpoint of this project holds under
CHECKPOINT_KEY, and reading it back without the training code (scripts/evaluate.py,
scripts/adapt.py, warm starts).

Files are read with `torch.load(weights_only=True)`: a record is stored as plain dicts, tensors,
strings and numbers (as are the Lightning keys beside it), so loading a file never runs its code.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch
from torch import nn

from ..config import CHECKPOINT_KEY, REWARD_FIELDS, SIZE_FIELDS, ClusterConfig, ConfigError
from ..files import damaged_record, load_torch_file, require_finite_weights, require_state_dict, write_torch
from .acting import Acting, NetworkPolicy
from .networks import DeepRMNetwork, PolicySpec, make_policy

# 2: the record as written by `PolicyRecord.to_dict`. 1 (no "version" key): the entries written
# before it, with the acting mode as loose "greedy", "idle_void" and "wait_rate" keys.
RECORD_VERSION = 2


@dataclass(frozen=True)
class PolicyRecord:
    """What a checkpoint needs to rebuild and run its policy without the training code, and how it
    came to be. Written and read only through `to_dict` / `from_dict`."""

    cluster: ClusterConfig
    """The cluster (and reward) the network was trained on."""
    policy: PolicySpec
    """The network."""
    state_dict: dict[str, torch.Tensor] = field(repr=False)
    """The network's weights (on the CPU)."""
    acting: Acting = Acting()
    """How the policy is meant to act."""
    adaptation: dict | None = None
    """A meta-policy's inner loop (tasks.maml: jobsets, episodes, lr, optimizer, normalize_advantage,
    step_sizes {weight name: tensor} when learned), or the steps scripts/adapt.py took (also steps)."""
    adapted_from: str | None = None
    """scripts/adapt.py: the checkpoint it adapted."""
    adapted_on: str | None = None
    """scripts/adapt.py: the workload it adapted on."""
    acting_selected: dict | None = None
    """scripts/adapt.py --acting select: how the acting mode was chosen (metric, jobsets, seed, scores)."""
    selected: dict | None = None
    """scripts/select_checkpoint.py --write: how this checkpoint and its mode were chosen."""
    wait_rate_selected: dict | None = None
    """How `acting.wait_rate` was chosen (scripts/experiments/idle_rules.py), while the rule reads it."""
    provenance: str | None = None
    """A note on how the file was made, where its commands do not say (older files)."""
    version: int = RECORD_VERSION
    """The layout this record was read from; `to_dict` writes RECORD_VERSION."""

    @classmethod
    def of(cls, net: DeepRMNetwork, acting: Acting = Acting(), **notes) -> PolicyRecord:
        """The record of network `net` (its cluster, spec and weights) acting as `acting`."""
        return cls(net.cfg, net.spec, {k: v.detach().cpu() for k, v in net.state_dict().items()}, acting, **notes)

    def save(self, path, overwrite: bool = False, numbered: bool = False) -> Path:
        """A policy-only checkpoint file (no Lightning state), written by files.write_torch (atomic;
        an existing file replaced only with `overwrite`; `numbered`: -2, -3, ... when taken).
        Returns the path written."""
        return write_torch({CHECKPOINT_KEY: self.to_dict()}, path, overwrite, numbered)

    def to_dict(self) -> dict:
        """Plain dicts, tensors, strings and numbers (torch.load(weights_only=True) reads them)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "cluster": self.cluster.to_dict(), "policy": self.policy.to_dict(),
                "acting": self.acting.to_dict(), "version": RECORD_VERSION}

    @classmethod
    def from_dict(cls, entry: dict) -> PolicyRecord:
        """From `to_dict`'s form, or from a version 1 entry (its loose acting keys; a rule under its
        old name acts as it did). ConfigError naming the field when a field is unknown or bad."""
        if "kind" in entry:  # lightning_sched.queue's policies share the key, not the record
            raise ConfigError(f"not a cluster policy: its entry is of kind {entry['kind']!r} "
                              "(a queue policy: scripts/evaluate.py --env queue reads it)")
        entry = dict(entry)
        version = entry.pop("version", 1)
        if version == 1:  # every acting key optional: a missing rule is the mode's default
            loose = {"greedy": entry.pop("greedy", True), "idle_rule": entry.pop("idle_void", None)}
            if "wait_rate" in entry:
                loose["wait_rate"] = entry.pop("wait_rate")
            entry["acting"] = loose
        elif version != RECORD_VERSION:
            raise ConfigError(f"PolicyRecord.version must be 1 or {RECORD_VERSION}, got {version!r}")
        names = {f.name for f in fields(cls)} - {"version"}
        unknown = sorted(set(entry) - names)
        missing = sorted({"cluster", "policy", "state_dict"} - set(entry))
        if unknown or missing:
            raise ConfigError(f"PolicyRecord has no field {unknown[0]!r}" if unknown
                              else f"PolicyRecord.{missing[0]} is missing")
        require_state_dict(entry["state_dict"], "PolicyRecord.state_dict")
        try:
            cluster, policy = ClusterConfig(**entry["cluster"]), PolicySpec(**entry["policy"])
        except TypeError as error:  # an unknown field of either
            raise ConfigError(f"PolicyRecord.cluster/policy: {error}") from None
        acting = Acting.from_dict(entry.get("acting", {}))
        return cls(**{**entry, "cluster": cluster, "policy": policy, "acting": acting, "version": version})


def read_checkpoint(path) -> dict:
    """The whole checkpoint dict of a file written by this project (torch.load(weights_only=True):
    a file with pickled objects is refused), refused when it has no policy entry."""
    data = load_torch_file(path, "lightning_sched checkpoint", weights_only=True)
    if not isinstance(data, dict) or CHECKPOINT_KEY not in data:
        raise ConfigError(f"{path}: not a lightning_sched checkpoint (no '{CHECKPOINT_KEY}' entry)")
    if not isinstance(data[CHECKPOINT_KEY], dict):
        kind = type(data[CHECKPOINT_KEY]).__name__
        raise ConfigError(f"{path}: its '{CHECKPOINT_KEY}' entry is a {kind}, not a dict")
    require_finite_weights(data, path, "loaded")
    return data


def read_record(path, data: dict | None = None) -> PolicyRecord:
    """The PolicyRecord of checkpoint `path` (of its already read dict `data`), errors naming the file."""
    data = read_checkpoint(path) if data is None else data
    try:
        return PolicyRecord.from_dict(data[CHECKPOINT_KEY])
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    except (TypeError, ValueError, RuntimeError) as error:  # a hand-edited field of another type (a list, a tensor)
        raise damaged_record(path, error) from None


def load_network(path, device="cpu", cluster: ClusterConfig | None = None) -> tuple[nn.Module, ClusterConfig,
                                                                                      PolicyRecord]:
    """(network, its ClusterConfig, the checkpoint's record) from a checkpoint written by this
    project. With `cluster`, the network runs on that cluster's size (its ClusterConfig takes the
    cluster's size fields): a slot policy runs on any size, DeepRM's image network only on its own,
    and another is refused naming the fields."""
    record = read_record(path)
    cfg, spec = record.cluster, record.policy
    if cluster is not None:
        resized = {k: getattr(cluster, k) for k in SIZE_FIELDS if getattr(cluster, k) != getattr(cfg, k)}
        if resized and not spec.any_cluster:
            raise ConfigError(
                f"{path}: DeepRM's image network runs only on the cluster it was trained on (its input is that "
                f"cluster's image), and this cluster differs in "
                + ", ".join(f"{k} ({getattr(cfg, k)} -> {v})" for k, v in resized.items())
                + "; a policy trained with policy.kind 'slots' runs on any size")
        cfg = cfg.replace(**resized)
    try:
        net = make_policy(spec, cfg)
    except ConfigError as error:  # a spec too large to build, read from a damaged or hand-edited file
        raise ConfigError(f"{path}: {error}") from None
    try:
        net.load_state_dict(record.state_dict)
    except RuntimeError as error:  # missing or misshapen weights: a damaged or hand-edited file
        raise ConfigError(f"{path}: its weights do not fit its policy {spec!r} "
                          f"({str(error).strip().splitlines()[-1].strip()[:200]})") from error
    return net.to(device), cfg, record


def load_policy(path, device="cpu", override: dict | None = None, generator: torch.Generator | None = None,
                cluster: ClusterConfig | None = None) -> tuple[NetworkPolicy, ClusterConfig]:
    """(NetworkPolicy, its ClusterConfig) from a checkpoint (see load_network), acting as the
    checkpoint says with `override`'s flags on top (`Acting.override`: greedy, idle_rule,
    wait_rate). A sampled policy with no generator gets one seeded with 0, so evaluations repeat.
    The config's observation mode is one that publishes the keys the network reads ('compact' for
    a file trained with 'none'), so `ClusterEnv(cfg, workload).rollout(n, policy)` runs."""
    net, cfg, record = load_network(path, device, cluster)
    try:
        acting = record.acting.override(**(override or {}))
    except ConfigError as error:  # a mode the flags ask for that cannot act
        raise ConfigError(f"{path}: {error}") from None
    if not acting.greedy and generator is None:
        generator = torch.Generator(device=device).manual_seed(0)
    if cfg.observation == "none":  # training's mode publishes no "used"/"slot_waited", which the network reads
        cfg = cfg.replace(observation="compact")
    return NetworkPolicy(net.eval(), acting, generator), cfg


def warm_start(net: DeepRMNetwork, path: str) -> None:
    """Load the policy weights of checkpoint `path` into `net`, refused with the differing fields
    when its cluster or network is not `net`'s (its objective may differ: the network does not
    depend on it); a slot policy starts a run on any cluster size. A network without deadline or
    arrival inputs may start one with them: `net` keeps its own weights for them, which start at zero."""
    source, cfg, _ = load_network(path)
    if source.spec.any_cluster:  # a slot policy runs on the run's cluster, whatever its size
        source, cfg, _ = load_network(path, cluster=net.cfg)
    cfg.require_same_cluster(net.cfg, f"init_from={path}", "run", may_differ=(*REWARD_FIELDS, "slo_slowdown"))
    # inputs whose weights start at zero may be added: the run's network starts as the source acts
    added = {name: False for name in ("deadline_inputs", "arrival_inputs")
             if getattr(net.spec, name) and not getattr(source.spec, name)}
    if source.spec != replace(net.spec, **added):
        differ = [f.name for f in fields(source.spec) if getattr(source.spec, f.name) != getattr(net.spec, f.name)]
        flags = " ".join(f"--model.init_args.policy.{name} {_flag_value(getattr(source.spec, name))}"
                         for name in differ)
        raise ConfigError(f"init_from={path}: its policy {source.spec!r} is not this run's {net.spec!r}; start from it "
                          f"with {flags}")
    net.load_state_dict(source.state_dict(), strict=not added)


def _flag_value(value) -> str:
    """`value` as a LightningCLI flag takes it (a list as JSON, quoted for the shell)."""
    if isinstance(value, str):
        return shlex.quote(value)
    return shlex.quote(json.dumps(list(value) if isinstance(value, tuple) else value))


def with_acting(path, out, acting: Acting, overwrite: bool = False, **notes) -> Path:
    """Copy checkpoint `path` to `out` (Lightning's keys kept) with its policy set to act as
    `acting`, and the record's `notes` set (e.g. `selected`: how the mode was chosen). Written to a
    temporary file first and renamed, so `out` is never a partial file; an existing `out` is
    replaced only with `overwrite`, and never when it is `path`."""
    if Path(out).resolve() == Path(path).resolve():
        raise ConfigError(f"{out} is the checkpoint being copied; name another file")
    data = read_checkpoint(path)
    record = read_record(path, data)
    if acting.idle_rule != "while_frequent":  # how the rate was chosen no longer describes how it acts
        notes.setdefault("wait_rate_selected", None)
    data[CHECKPOINT_KEY] = replace(record, acting=acting, **notes).to_dict()
    return write_torch(data, out, overwrite)
