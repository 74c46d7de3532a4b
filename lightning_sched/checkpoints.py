"""Trained policies on disk: what a checkpoint of this project holds under CHECKPOINT_KEY, and reading
it back without the training code (scripts/evaluate.py, scripts/adapt.py, warm starts)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from .config import REWARD_FIELDS, SIZE_FIELDS, ClusterConfig, ConfigError
from .files import atomic_torch_save, load_torch_file
from .policies import WAIT_RATE, DeepRMNetwork, NetworkPolicy, PolicySpec, default_idle_void, make_policy

CHECKPOINT_KEY = "lightning_sched"


def policy_checkpoint(net: DeepRMNetwork, greedy: bool = True, idle_void: str | None = None,
                      wait_rate: float = WAIT_RATE) -> dict:
    """What a checkpoint needs to rebuild the policy without the training code: plain dicts and
    tensors, and how the policy is meant to act: greedily or by sampling, with its idle-void rule
    (policies.IDLE_VOID; None: the mode's default) and that rule's arrival rate, if it reads one."""
    idle_void = default_idle_void(greedy) if idle_void is None else idle_void
    return {"cluster": net.cfg.to_dict(), "policy": net.spec.to_dict(), "greedy": greedy, "idle_void": idle_void,
            "wait_rate": wait_rate, "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()}}


def saved_acting(saved: dict) -> dict:
    """How a checkpoint's lightning_sched entry says its policy acts, as NetworkPolicy's arguments:
    {"greedy", "idle_void", "wait_rate"}."""
    greedy = saved.get("greedy", True)
    return {"greedy": greedy, "idle_void": saved.get("idle_void", default_idle_void(greedy)),
            "wait_rate": saved.get("wait_rate", WAIT_RATE)}


def read_checkpoint(path) -> dict:
    """The whole checkpoint dict of a file written by this project, refused when it has no policy
    entry. Checkpoints are pickles (as Lightning's): load only files you trust."""
    data = load_torch_file(path, "lightning_sched checkpoint", weights_only=False)
    if not isinstance(data, dict) or CHECKPOINT_KEY not in data:
        raise ConfigError(f"{path}: not a lightning_sched checkpoint (no '{CHECKPOINT_KEY}' entry)")
    return data


def load_network(path, device="cpu", cluster: ClusterConfig | None = None) -> tuple[nn.Module, ClusterConfig, dict]:
    """(network, its ClusterConfig, the checkpoint's lightning_sched entry) from a checkpoint written
    by a task of this project. With `cluster`, the network runs on that cluster's size (its
    ClusterConfig takes the cluster's size fields): a slot policy runs on any size, DeepRM's image
    network only on its own, and another is refused naming the fields."""
    saved = read_checkpoint(path)[CHECKPOINT_KEY]
    cfg = ClusterConfig(**saved["cluster"])
    spec = PolicySpec(**saved["policy"])
    if cluster is not None:
        resized = {k: getattr(cluster, k) for k in SIZE_FIELDS if getattr(cluster, k) != getattr(cfg, k)}
        if resized and not spec.any_cluster:
            raise ConfigError(
                f"{path}: DeepRM's image network runs only on the cluster it was trained on (its input is that "
                f"cluster's image), and this cluster differs in "
                + ", ".join(f"{k} ({getattr(cfg, k)} -> {v})" for k, v in resized.items())
                + "; a policy trained with policy.kind 'slots' runs on any size")
        cfg = cfg.replace(**resized)
    net = make_policy(spec, cfg)
    try:
        net.load_state_dict(saved["state_dict"])
    except RuntimeError as error:  # missing or misshapen weights: a damaged or hand-edited file
        raise ConfigError(f"{path}: its weights do not fit its policy {spec!r} "
                          f"({str(error).strip().splitlines()[-1].strip()[:200]})") from error
    return net.to(device), cfg, saved


def load_policy(path, device="cpu", greedy: bool | None = None, generator: torch.Generator | None = None,
                cluster: ClusterConfig | None = None, idle_void: str | None = None, wait_rate: float | None = None):
    """(NetworkPolicy, its ClusterConfig) from a checkpoint (see load_network). greedy=None acts as
    the checkpoint says (argmax, or sampled as DeepRM evaluates), with its idle-void rule
    (policies.IDLE_VOID); a mode given here gets `idle_void`, else that mode's default. `wait_rate`
    (None: the checkpoint's) is the rate "while_frequent" reads. A sampled policy with no generator
    gets one seeded with 0, so evaluations repeat."""
    net, cfg, saved = load_network(path, device, cluster)
    acting = saved_acting(saved)
    if greedy is None:
        greedy = acting["greedy"]
        idle_void = acting["idle_void"] if idle_void is None else idle_void
    wait_rate = acting["wait_rate"] if wait_rate is None else wait_rate
    if not greedy and generator is None:
        generator = torch.Generator(device=device).manual_seed(0)
    try:
        policy = NetworkPolicy(net.eval(), greedy=greedy, generator=generator, idle_void=idle_void, wait_rate=wait_rate)
    except ConfigError as error:  # a hand-edited acting entry: say which file
        raise ConfigError(f"{path}: {error}") from None
    return policy, cfg


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
        raise ConfigError(f"init_from={path}: its policy {source.spec!r} is not this run's {net.spec!r}")
    net.load_state_dict(source.state_dict(), strict=not added)


def with_acting_mode(path, out, greedy: bool, idle_void: str | None = None, wait_rate: float | None = None,
                     **record) -> Path:
    """Copy checkpoint `path` to `out` with its policy set to act greedily or by sampling, with
    the idle-void rule `idle_void` (None: the mode's default) and its `wait_rate` (None: the file's),
    and `record` kept beside it (e.g. how the mode was chosen). Written to a temporary file first
    and renamed, so `out` is never a partial file."""
    data = read_checkpoint(path)
    saved = dict(data[CHECKPOINT_KEY])
    idle_void = default_idle_void(greedy) if idle_void is None else idle_void
    wait_rate = saved_acting(saved)["wait_rate"] if wait_rate is None else wait_rate
    if idle_void != "while_frequent":  # how the rate was chosen no longer describes how it acts
        saved.pop("wait_rate_selected", None)
    data[CHECKPOINT_KEY] = {**saved, "greedy": greedy, "idle_void": idle_void, "wait_rate": wait_rate, **record}
    atomic_torch_save(data, out)
    return Path(out)
