"""What a policy sees: structured keys always, plus DeepRM's image or compact vector (SPEC "Observation")."""
from __future__ import annotations

import functools
import math

import torch

from ..allocator import Buffers
from ..config import ClusterConfig
from . import native
from .state import ClusterState, divide_exactly, used_now, used_rows


class Observation(dict):
    """A dict of observation tensors that computes each key on first access, so a hot-path policy
    pays only for the keys it reads. `dict(obs)` / `obs.materialize()` computes them all."""

    def __init__(self, state: ClusterState, cfg: ClusterConfig, keys: tuple[str, ...], buffers: Buffers | None = None):
        super().__init__()
        self.state, self.cfg, self.keys_available, self.buffers = state, cfg, keys, buffers

    def __missing__(self, key: str) -> torch.Tensor:
        if key not in self.keys_available:
            raise KeyError(key)
        value = _COMPUTE[key](self.state, self.cfg, self)
        self[key] = value
        return value

    def materialize(self, keys=None) -> dict[str, torch.Tensor]:
        """Every available key, or just `keys`."""
        return {key: self[key] for key in (self.keys_available if keys is None else keys)}


def _backlog(s: ClusterState) -> torch.Tensor:
    return s.num_arrived - s.queue_head


def _since_new(s: ClusterState, cfg: ClusterConfig) -> torch.Tensor:
    """min(t - latest arrival, cap) / cap, 1.0 before the first arrival: FloatTensor[B], the float32
    nearest to the ratio on every device (divide_exactly)."""
    latest = s.arrival.gather(1, (s.num_arrived - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    cap = cfg.max_track_since_new
    return divide_exactly(torch.where(s.num_arrived > 0, (s.time - latest).clamp(max=cap), cap), cap).float()


def _image_or_compact(s: ClusterState, cfg: ClusterConfig, o: Observation) -> torch.Tensor:
    if cfg.observation == "image":
        # on the CPU, the image and the used rows in one pass
        rendered = native.render(s, cfg, o["since_new"], o.buffers)
        if rendered is not None:
            o.setdefault("used", rendered[1])
            return rendered[0]
    parts = (o["used"], o["slot_duration"], o["slot_demand"], _backlog(s), _since_new(s, cfg), cfg)
    return render_image(*parts, buffers=o.buffers) if cfg.observation == "image" else compact_vector(*parts)


_COMPUTE = {
    "action_mask": lambda s, cfg, o: torch.cat([s.slot_offset >= 0,
                                                torch.ones_like(s.slot_offset[:, :1], dtype=torch.bool)], 1),
    "time": lambda s, cfg, o: s.time.unsqueeze(1),
    # a copy: the state's own tensor changes in place at the next step
    "job_start": lambda s, cfg, o: s.job_start[:, : s.max_jobs].clone(),
    "slot_duration": lambda s, cfg, o: s.slot_duration.long(),
    "slot_demand": lambda s, cfg, o: s.slot_demand.transpose(1, 2).long(),
    "slot_offset": lambda s, cfg, o: s.slot_offset,
    "slot_deadline": lambda s, cfg, o: s.deadline.gather(1, s.slot_job) - s.time.unsqueeze(1),
    "slot_waited": lambda s, cfg, o: torch.where(s.slot_duration > 0,
                                                 s.time.unsqueeze(1) - s.arrival.gather(1, s.slot_job), 0),
    "free_now": lambda s, cfg, o: cfg.resource_units - used_now(s, cfg),
    "backlog": lambda s, cfg, o: _backlog(s).unsqueeze(1),
    "since_new": lambda s, cfg, o: _since_new(s, cfg).unsqueeze(1),
    "to_arrive": lambda s, cfg, o: (s.num_jobs - s.num_arrived).unsqueeze(1),
    "arrived": lambda s, cfg, o: s.num_arrived.unsqueeze(1),
    "used": lambda s, cfg, o: used_rows(s, cfg),
    "observation": _image_or_compact,
}
STRUCTURED_KEYS = ("action_mask", "time", "slot_duration", "slot_demand", "slot_offset", "slot_deadline",
                   "free_now", "backlog", "since_new", "to_arrive", "arrived")


def observe(state: ClusterState, cfg: ClusterConfig, job_start: bool = True,
            buffers: Buffers | None = None) -> Observation:
    """The keys of SPEC's contract plus structured ones, each with leading dim B, computed lazily.

    action_mask [M+1] bool, time [1], job_start [L] (original job order, -1 unscheduled),
    slot_duration [M], slot_demand [M, R], slot_offset [M] (earliest start offset, -1 infeasible),
    slot_deadline [M] (steps to the deadline), free_now [R], backlog [1], since_new [1] float,
    to_arrive [1] (jobs of the jobset still to arrive: the simulator's knowledge, which networks do
    not read; acting uses it to tell when waiting on an idle cluster can no longer change anything),
    arrived [1] (jobs of the jobset arrived so far; acting reads their rate);
    slot_waited [M] (steps since the slot job arrived, 0 for an empty slot);
    used [T, R] (in every mode: policies over the structured state read it; the env publishes it
    only with 'image' or 'compact', so a network drives `ClusterEnv` in those modes); and with
    observation 'image' or 'compact': observation.
    `job_start=False` leaves out job_start (an [B, L] scatter the rollout hot path does not need).
    buffers: where the image (and on the CPU the used rows drawn with it) come from, so that a
    caller stepping many times reuses the memory of observations nobody holds any more (the env's).
    """
    keys = STRUCTURED_KEYS + ("used", "slot_waited") + (("job_start",) if job_start else ())
    if cfg.observation != "none":
        keys = keys + ("observation",)
    observation = Observation(state, cfg, keys, buffers)
    observation.update(native.observed_keys(state))  # the ones the native step already computed
    return observation


# The damping of `arrival_rate`: one early arrival does not read as a high rate. The slot network's
# arrival inputs were trained with it, and "while_frequent"'s wait_rate (acting.WAIT_RATE) chosen
# with it: changing it changes how the shipped checkpoints act.
RATE_DAMPING_STEPS = 10


def arrival_rate(obs, damping: float = RATE_DAMPING_STEPS) -> torch.Tensor:
    """Jobs of the jobset arrived a step so far, arrived / (time + damping): DoubleTensor[B]."""
    return obs["arrived"].view(-1).double() / (obs["time"].view(-1).double() + damping)


@functools.lru_cache(maxsize=64)
def _prefix_rows(width: int, device) -> torch.Tensor:
    """Row n holds 1.0 in its first n cells: FloatTensor[width + 1, width] (a constant, cached)."""
    return (torch.arange(width, device=device) < torch.arange(width + 1, device=device).unsqueeze(1)).float()


def _ones_first(count: torch.Tensor, width: int) -> torch.Tensor:
    """Rows of `width` cells with 1.0 in the first count[...] (0 <= count <= width): [..., width].
    A row copied from a table of the width + 1 possible rows: comparing every cell with `count`
    walks rows as short as `width`, several times slower than copying them."""
    table = _prefix_rows(width, count.device)
    return table.index_select(0, count.reshape(-1)).view(*count.shape, width)


def _chunk_counts(count: torch.Tensor, width: int, chunk: int) -> torch.Tensor:
    """A row of `width` cells with count[...] ones first, as the ones in each of its chunks of
    `chunk` cells: [..., width // chunk]."""
    first_cell = torch.arange(0, width, chunk, device=count.device)
    return (count.unsqueeze(-1) - first_cell).clamp(0, chunk)


def render_image(used, duration, demand, backlog, since, cfg: ClusterConfig, buffers: Buffers | None = None
                 ) -> torch.Tensor:
    """DeepRM's image, FloatTensor[B, T, W]: per resource a cluster block [T, U] and M slot blocks
    [T, MU], then the backlog block [T, backlog_width] and the since-new column.

    used: [B, T, R]; duration: [B, M]; demand: [B, M, R]; backlog: [B]; since: [B].
    Every row of a block is ones then zeros: the cluster's row k has used[k][r] ones, a slot's
    row k has q_j[r] ones while k < d_j, the backlog's row k what is left of the backlog after k rows.
    buffers: where the image comes from (a fresh tensor without).
    The resource blocks are chunks of gcd(U, MU) cells, so all of them come from one table lookup
    into one contiguous tensor, copied in as a whole (copying blocks as narrow as U cells one by one
    costs more than the lookup).
    """
    t, u, mu, m, r = cfg.horizon, cfg.resource_units, cfg.max_job_units, cfg.num_slots, cfg.num_resources
    b, dev, width = used.shape[0], used.device, cfg.backlog_width
    chunk = math.gcd(u, mu)
    within = torch.arange(t, device=dev).view(1, t, 1) < duration.unsqueeze(1)  # [B, T, M]
    reach = demand.long().transpose(1, 2).unsqueeze(1) * within.unsqueeze(2)  # [B, T, R, M]
    counts = torch.cat([_chunk_counts(used.long(), u, chunk), _chunk_counts(reach, mu, chunk).flatten(-2)], -1)
    shape = (b, t, cfg.image_width)
    image = buffers.take(shape, torch.float32, dev) if buffers else torch.empty(shape, device=dev, dtype=torch.float32)
    image[..., : r * (u + m * mu)] = _ones_first(counts, chunk).view(b, t, -1)
    before = torch.arange(t, device=dev) * width  # backlog cells in the rows above row k
    left = (backlog.clamp(max=cfg.backlog_size).view(b, 1) - before).clamp(0, width)  # [B, T]
    image[..., r * (u + m * mu) : -1] = _ones_first(left, width)
    image[..., -1] = since.float().view(b, 1)
    return image


def compact_vector(used, duration, demand, backlog, since, cfg: ClusterConfig) -> torch.Tensor:
    """DeepRM's compact state, FloatTensor[B, T*R + M*(1+R) + 2], each part scaled to [0, 1]:
    free units per (row, resource) / U, per slot (d / max_job_len, q / max_job_units),
    backlog / backlog_size (may exceed 1: the backlog is unbounded), since-new; each the float32
    nearest to its ratio on every device (divide_exactly)."""
    b = used.shape[0]
    free = divide_exactly((cfg.resource_units - used).reshape(b, -1), cfg.resource_units)
    slots = torch.cat([divide_exactly(duration.unsqueeze(-1), cfg.max_job_len),
                       divide_exactly(demand, cfg.max_job_units)], -1)
    return torch.cat([free.float(), slots.reshape(b, -1).float(),
                      divide_exactly(backlog.unsqueeze(1), cfg.backlog_size).float(), since.float().unsqueeze(1)], -1)
