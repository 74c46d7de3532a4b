"""What a policy sees: structured keys always, plus DeepRM's image or compact vector (SPEC "Observation")."""
from __future__ import annotations

import torch

from .cluster import ClusterState, slot_jobs, used_now, used_rows
from .config import ClusterConfig


def observe(state: ClusterState, cfg: ClusterConfig) -> dict[str, torch.Tensor]:
    """The keys of SPEC's contract plus structured ones, each with leading dim B.

    action_mask [M+1] bool, time [1], job_start [L] (original job order, -1 unscheduled),
    slot_duration [M], slot_demand [M, R], slot_offset [M] (earliest start offset, -1 infeasible),
    slot_deadline [M] (steps to the deadline), free_now [R], backlog [1], since_new [1] float;
    and with observation 'image' or 'compact': used [T, R] and observation.
    """
    b = state.time.shape[0]
    duration, demand = slot_jobs(state)
    mask = torch.cat([state.slot_offset >= 0, torch.ones(b, 1, dtype=torch.bool, device=state.time.device)], 1)
    job_start = torch.full_like(state.order, -1).scatter(1, state.order, state.start[:, : state.max_jobs])
    backlog = state.num_arrived - state.queue_head
    latest = state.arrival.gather(1, (state.num_arrived - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    cap = cfg.max_track_since_new
    since = torch.where(state.num_arrived > 0, (state.time - latest).clamp(max=cap), cap).float() / cap
    out = {
        "action_mask": mask,
        "time": state.time.unsqueeze(1),
        "job_start": job_start,
        "slot_duration": duration,
        "slot_demand": demand,
        "slot_offset": state.slot_offset,
        "slot_deadline": state.deadline.gather(1, state.slot_job) - state.time.unsqueeze(1),
        "free_now": cfg.resource_units - used_now(state, cfg),
        "backlog": backlog.unsqueeze(1),
        "since_new": since.unsqueeze(1),
    }
    if cfg.observation == "none":
        return out
    used = used_rows(state, cfg)
    out["used"] = used
    if cfg.observation == "image":
        out["observation"] = render_image(used, duration, demand, backlog, since, cfg)
    else:
        out["observation"] = compact_vector(used, duration, demand, backlog, since, cfg)
    return out


def render_image(used, duration, demand, backlog, since, cfg: ClusterConfig) -> torch.Tensor:
    """DeepRM's image, FloatTensor[B, T, W]: per resource a cluster block [T, U] and M slot blocks
    [T, MU], then the backlog block [T, backlog_width] and the since-new column.

    used: [B, T, R]; duration: [B, M]; demand: [B, M, R]; backlog: [B]; since: [B].
    """
    t, u, mu, m, r = cfg.horizon, cfg.resource_units, cfg.max_job_units, cfg.num_slots, cfg.num_resources
    b, dev = used.shape[0], used.device
    cluster = torch.arange(u, device=dev) < used.unsqueeze(-1)  # [B, T, R, U]
    rows = torch.arange(t, device=dev) < duration.unsqueeze(-1)  # [B, M, T]
    cols = torch.arange(mu, device=dev) < demand.unsqueeze(-1)  # [B, M, R, MU]
    slots = rows.permute(0, 2, 1)[:, :, None, :, None] & cols.permute(0, 2, 1, 3).unsqueeze(1)  # [B, T, R, M, MU]
    per_resource = torch.cat([cluster, slots.reshape(b, t, r, m * mu)], dim=-1).reshape(b, t, -1)
    width = cfg.backlog_width
    cell = torch.arange(t * width, device=dev).view(t, width)
    shown = backlog.clamp(max=cfg.backlog_size).view(b, 1, 1)
    backlog_block = cell < shown
    since_col = since.view(b, 1, 1).expand(b, t, 1)
    return torch.cat([per_resource.float(), backlog_block.float(), since_col.float()], dim=-1)


def compact_vector(used, duration, demand, backlog, since, cfg: ClusterConfig) -> torch.Tensor:
    """DeepRM's compact state, FloatTensor[B, T*R + M*(1+R) + 2], each part scaled to [0, 1]:
    free units per (row, resource) / U, per slot (d / max_job_len, q / max_job_units),
    backlog / backlog_size (may exceed 1: the backlog is unbounded), since-new."""
    b = used.shape[0]
    free = (cfg.resource_units - used).float().reshape(b, -1) / cfg.resource_units
    slots = torch.cat([duration.unsqueeze(-1).float() / cfg.max_job_len, demand.float() / cfg.max_job_units], -1)
    return torch.cat([free, slots.reshape(b, -1), backlog.float().unsqueeze(1) / cfg.backlog_size, since.unsqueeze(1)], -1)
