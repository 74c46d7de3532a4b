"""`QueueEnv`: B replays of a batch-queue log as one TorchRL `EnvBase` (docs/hpc_queue.md).

Each row replays a sequence of `cfg.sequence_length` consecutive jobs of a `QueueLog` in seconds:
an action picks one job of the visible window, the env starts it as soon as the queue's rules
allow (holding it, and with EASY backfilling starting others meanwhile) and runs time forward to
the next decision. Rows draw fresh random sequences at every reset from `positions`, or replay
fixed `starts`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Categorical, Composite, Unbounded

from ..batched import EveryRowReset, require_slot_actions, rows_to_reset
from ..config import ConfigError, is_int
from ..limits import require_memory
from .config import SEQUENCE_KEYS, QueueConfig
from .log import QueueLog
from .state import JOB_COLUMNS, QueueState, init_state
from .step import step_and_observe


def env_bytes(cfg: QueueConfig, rows: int) -> int:
    """The bytes of `rows` episodes' state (QueueState: 7 int64 columns, 2 int32 orders and a status
    byte a job) and observation (3 int64 job columns; the window's float features, int32 job index and mask)."""
    return rows * (cfg.sequence_length * (7 * 8 + 2 * 4 + 1 + 3 * 8) + cfg.window * (cfg.job_features * 4 + 4 + 1))


# a lower estimate of one decision's cost (with backfilling off, one a job): the batched rollout
# alone steps about 40,000 decisions a second on one core (a training update costs more)
DECISION_SECONDS = 1e-5


def rollout_bytes(cfg: QueueConfig, rows: int) -> int:
    """The bytes of the decisions a training rollout of `rows` episodes keeps (at most one a job:
    the window's features and mask, and a few scalars each)."""
    return rows * cfg.sequence_length * (cfg.window * (cfg.job_features * 4 + 1) + 64)

# the state's sequences the observation hands out as they are (job_submit, job_requested, job_processors)
HANDED_OUT = ("submit", "requested", "processors")


# the per-episode results a step writes under "episode" when a row's episode ends (episode_metrics)
EPISODE_KEYS = ("mean_bounded_slowdown", "mean_wait", "mean_slowdown", "utilization", "makespan")


class QueueEnv(EveryRowReset):
    """B queue episodes stepped as one TensorDict.

    Args:
        cfg: the queue (the log's processors per node, and at least its nodes).
        log: the jobs to replay, or several logs of one cluster size: row b replays log
            (b // episodes_per_sequence) % len(logs).
        batch_size: [B].
        starts: LongTensor[B]: row b replays jobs [starts[b], starts[b] + L) of its log at every reset.
        positions: (lowest, highest) start positions (inclusive) that resets draw from, or one such
            pair per log; default: every sequence of each log. Ignored with `starts`.
        device, seed: where the state lives; the seed of the start draws (None is 0: envs built alike
            draw alike, so give each worker of a SerialEnv/ParallelEnv its seed, or `set_seed` the
            batched env, as a collector given a seed does).
        episodes_per_sequence: E; rows b*E .. b*E+E-1 replay the same fresh sequence (a policy's
            episodes compared on one sequence, as DeepRM's baseline compares them on one jobset).
            A row's n-th episode plays its group's n-th sequence, so rows a collector resets apart
            stay on shared sequences (`group_sequence_starts`).
        episode_results: write each episode's results under "episode" at the step it ends
            (`_finished_metrics`), which a collector that resets finished rows needs to keep them.
            Off by default: a few dozen small tensor ops in each step where rows end cost up to a
            third of a step at B = 4096 (most with EASY, whose episodes end in fewer steps), and a
            caller that plays rows to their end reads `episode_metrics()` instead.

    The observation's job_submit, job_requested and job_processors are the state's own sequences (a
    copy each step would cost more than the step): read them, do not change them in place.
    """

    batch_locked = True
    # what a policy may read: the window and the cluster now; the observation's job_submit,
    # job_requested and job_processors hold the whole sequence, jobs not yet submitted too (the rules
    # read only the window's), and "episode" holds results: leave them out of a generic network's inputs
    POLICY_KEYS = ("job_features", "cluster_features", "action_mask", "window_job", "time", "queue_length",
                   "free_nodes")
    EPISODE_KEYS = EPISODE_KEYS
    STEP_ONLY_KEYS = tuple(("episode", key) for key in EPISODE_KEYS)  # NaN at a reset (_finished_metrics)

    def __init__(self, cfg: QueueConfig, log: QueueLog | Sequence[QueueLog], batch_size=(1,), starts=None,
                 positions=None, device="cpu", seed: int | None = None, episodes_per_sequence: int = 1,
                 episode_results: bool = False):
        batch_size = torch.Size(batch_size if not isinstance(batch_size, int) else [batch_size])
        if len(batch_size) != 1:
            raise ConfigError(f"QueueEnv batch_size must be [B], got {list(batch_size)}")
        super().__init__(device=device, batch_size=batch_size)
        self.logs = [log] if isinstance(log, QueueLog) else list(log)
        if not self.logs or len(self.logs) > batch_size[0]:
            raise ConfigError(f"QueueEnv needs 1 to B={batch_size[0]} logs, got {len(self.logs)}")
        for one in self.logs:
            if cfg.processors_per_node != one.processors_per_node or cfg.nodes < one.nodes:
                raise ConfigError(f"QueueConfig cluster ({cfg.nodes} nodes x {cfg.processors_per_node}) is not the "
                                  f"log's ({one.nodes} x {one.processors_per_node}): {Path(one.path).name}")
        self.cfg, self.episode_results = cfg, episode_results
        require_memory("QueueEnv", env_bytes(cfg, batch_size[0]),
                       {"batch_size": batch_size[0], "sequence_length": cfg.sequence_length, "window": cfg.window})
        e = episodes_per_sequence
        if not is_int(e, 1) or batch_size[0] % e:
            raise ConfigError(f"episodes_per_sequence must be an integer >= 1 dividing B={batch_size[0]}, got {e!r}")
        # rows b*E .. b*E+E-1 replay one sequence (fresh draws), of log b % len(logs)
        self.episodes_per_sequence = e
        self.row_group = torch.arange(batch_size[0]) // e
        self.row_log = self.row_group % len(self.logs)
        self.row_episode = torch.zeros(batch_size[0], dtype=torch.long)  # episodes each row has started
        self.group_starts: dict[int, dict[int, int]] = {}  # group -> {episode: its sequence's start}
        self.generator = torch.Generator()
        self.generator.manual_seed(0 if seed is None else seed)
        if starts is not None:
            starts = torch.as_tensor(starts, dtype=torch.long).reshape(-1)
            if starts.numel() != batch_size[0]:
                raise ConfigError(f"starts has {starts.numel()} sequences, the env batch_size is {batch_size[0]}")
            for i, one in enumerate(self.logs):  # checks every start
                one.sequences(starts[self.row_log == i], cfg.sequence_length)
        self.starts = starts
        if positions is None:
            positions = [one.positions(0, one.num_jobs, cfg.sequence_length) for one in self.logs]
        elif isinstance(positions[0], int):
            positions = [tuple(positions)] * len(self.logs)
        self.positions = [tuple(p) for p in positions]
        for one, (lo, hi) in zip(self.logs, self.positions, strict=True):
            if not 0 <= lo <= hi <= one.num_jobs - cfg.sequence_length:
                raise ConfigError(f"positions {(lo, hi)} with sequence_length {cfg.sequence_length} run past the "
                                  f"{one.num_jobs} jobs of {Path(one.path).name}")
        self.state: QueueState | None = None
        self.window_job: torch.Tensor | None = None
        self._make_specs()

    def _make_specs(self) -> None:
        b, w, length, dev = self.batch_size, self.cfg.window, self.cfg.sequence_length, self.device
        spec = {"job_features": Unbounded(shape=(*b, w, self.cfg.job_features), dtype=torch.float32, device=dev),
                "cluster_features": Unbounded(shape=(*b, self.cfg.cluster_features), dtype=torch.float32, device=dev),
                "action_mask": Binary(n=w, shape=(*b, w), dtype=torch.bool, device=dev),
                "window_job": Unbounded(shape=(*b, w), dtype=torch.int32, device=dev),
                "time": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
                "queue_length": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
                "free_nodes": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev)}
        for key in SEQUENCE_KEYS:
            spec[key] = Unbounded(shape=(*b, length), dtype=torch.int64, device=dev)
        if self.episode_results:
            spec["episode"] = Composite({k: Unbounded(shape=(*b, 1), dtype=torch.float64, device=dev)
                                         for k in EPISODE_KEYS}, shape=b)
        self.observation_spec = Composite(spec, shape=b)
        self.action_spec = Categorical(n=w, shape=b, dtype=torch.int64, device=dev)
        self.reward_spec = Unbounded(shape=(*b, 1), dtype=torch.float32, device=dev)
        done = Categorical(n=2, shape=(*b, 1), dtype=torch.bool, device=dev)
        self.done_spec = Composite(done=done.clone(), terminated=done.clone(), truncated=done.clone(), shape=b)

    # ----- EnvBase hooks -----------------------------------------------------------------------
    def initial_state(self, rows: torch.Tensor | None = None) -> QueueState:
        """The first state of the next reset's sequences, of rows `rows` (LongTensor[N]) only when given:
        the fixed `starts`, or fresh draws from each row's log within its `positions`."""
        whole_batch = rows is None
        rows = torch.arange(self.batch_size[0]) if rows is None else rows.cpu()
        length = self.cfg.sequence_length
        parts = {}
        for i, one in enumerate(self.logs):
            mine = rows[self.row_log[rows] == i]
            if mine.numel() == 0:
                continue
            if self.starts is not None:
                starts = self.starts[mine]
            elif self.episodes_per_sequence == 1:  # a fresh sequence for each row
                lo, hi = self.positions[i]
                starts = torch.randint(lo, hi + 1, (mine.numel(),), generator=self.generator)
            else:
                starts = self.group_sequence_starts(mine, i, whole_batch)
            parts[i] = (mine, one.sequences(starts, length, self.device))
        if len(parts) == 1:  # one log: its rows are `rows` in order
            jobs = next(iter(parts.values()))[1]
        else:
            order = torch.cat([mine for mine, _ in parts.values()]).argsort()  # back to the order of `rows`
            jobs = {k: torch.cat([cols[k] for _, cols in parts.values()])[order.to(self.device)]
                    for k in JOB_COLUMNS}
        return init_state(jobs, self.cfg.nodes, self.cfg.processors_per_node)

    def group_sequence_starts(self, rows: torch.Tensor, log: int, whole_batch: bool) -> torch.Tensor:
        """The starts of the next sequences of `rows` (LongTensor[N], rows of log `log`), as groups of
        episodes_per_sequence rows share them. A row's n-th episode plays its group's n-th sequence,
        drawn when the first of the group's rows reaches it, so rows a collector resets apart stay on
        shared sequences; `reset()` without "_reset" starts every group on a new one together."""
        e, group = self.episodes_per_sequence, self.row_group[rows]
        if whole_batch:  # every row of a group past the furthest one's episode
            furthest = self.row_episode.view(-1, e).max(1).values
            self.row_episode[rows] = furthest[group] + 1
        else:
            self.row_episode[rows] += 1
        lo, hi = self.positions[log]
        keys = list(zip(group.tolist(), self.row_episode[rows].tolist()))
        new = sorted({(g, n) for g, n in keys if n not in self.group_starts.get(g, {})})  # in order: reproducible
        for (g, n), start in zip(new, torch.randint(lo, hi + 1, (len(new),), generator=self.generator).tolist()):
            self.group_starts.setdefault(g, {})[n] = start
        starts = torch.tensor([self.group_starts[g][n] for g, n in keys], dtype=torch.long)
        for g in set(group.tolist()):  # forget the sequences every row of the group has left
            oldest, kept = int(self.row_episode[g * e:(g + 1) * e].min()), self.group_starts[g]
            for n in [n for n in kept if n < oldest]:
                del kept[n]
        return starts

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        index = rows_to_reset(tensordict, self.state is not None)
        if index is None:
            self.state = self.initial_state()
        elif index.numel():  # only the rows asked for start again; the steps a caller holds keep their jobs
            self.state.put_rows(index, self.initial_state(index), new_tensors=HANDED_OUT)
        none = torch.full((self.batch_size[0],), -1, dtype=torch.int64, device=self.device)
        return self._output(step_and_observe(self.state, none, self.cfg), reward=None, ended=None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        slot = require_slot_actions(tensordict, self.state, self.batch_size[0]).reshape(-1, 1)
        job = self.window_job.gather(1, slot.clamp(0, self.cfg.window - 1)).squeeze(1).long()
        active = ~self.state.done
        bad = active & ((slot.squeeze(1) < 0) | (slot.squeeze(1) >= self.cfg.window) | (job < 0))
        if bool(bad.any()):
            row = int(bad.nonzero()[0])
            visible = int((self.window_job[row] >= 0).sum())
            raise ValueError(f"QueueEnv: row {row}: action {int(slot[row])} is not a waiting job's slot (window "
                             f"{self.cfg.window}, slots 0..{visible - 1} visible); draw from the observation's "
                             "action_mask (QueueHeuristic('random'), a MaskedCategorical actor): TorchRL's "
                             "RandomPolicy never reads it")
        length = self.cfg.sequence_length
        out = step_and_observe(self.state, torch.where(active, job, torch.full_like(job, -1)), self.cfg)
        if self.cfg.reward == "per_job":
            reward = -out["bsld_added"] / length
        else:  # all at the step that ends the episode: the rows active before it and done after it
            reward = torch.where(self.state.done & active, -self.state.bsld_sum / length, 0.0)
        return self._output(out, reward=reward.float(), ended=self.state.done & active)

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """A uniform draw over each row's visible jobs, from the mask of the env's last output (torch's
        global generator). A TransformedEnv hands its draws here only while its copy of the action
        spec equals the env's (TorchRL's ActionMask keeps it so); with a stale copy TorchRL refuses
        the draw instead of drawing from the mask it copied."""
        if self.state is None:
            return super().rand_action(tensordict)
        action = torch.multinomial(self.action_spec.mask.float(), 1).squeeze(-1)
        if tensordict is None:
            return TensorDict({"action": action}, batch_size=self.batch_size, device=self.device)
        return tensordict.set("action", action)

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(0 if seed is None else int(seed))

    def size_fields(self) -> dict:
        return {"batch_size": self.batch_size[0], "sequence_length": self.cfg.sequence_length,
                "window": self.cfg.window}

    def _output(self, out: dict[str, torch.Tensor], reward: torch.Tensor | None,
                ended: torch.Tensor | None) -> TensorDictBase:
        self.window_job = out["window_job"]
        self.full_action_spec["action"].update_mask(out["action_mask"])  # rand_action() draws visible jobs only
        done = self.state.done.unsqueeze(-1)
        td = {**observation(self.state, out), "done": done.clone(), "terminated": done.clone(),
              "truncated": torch.zeros_like(done)}
        if self.episode_results:
            td["episode"] = self._finished_metrics(ended)
        if reward is not None:
            td["reward"] = reward.unsqueeze(-1)
        return TensorDict(td, batch_size=self.batch_size, device=self.device)

    @property
    def rows(self) -> int:
        return self.batch_size[0]

    def finished_results(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """EPISODE_KEYS of the episodes of rows `rows` (LongTensor[N]), DoubleTensor[N] each."""
        return episode_metrics(self.state, self.cfg, rows)

    # ----- results ---------------------------------------------------------------------------
    def episode_metrics(self) -> dict[str, torch.Tensor]:
        """Per row (DoubleTensor[B]), over the jobs started so far (all of them once the row is
        done): mean_bounded_slowdown, mean_wait, mean_slowdown, makespan (first submit to last
        actual end) and utilization (node-seconds held over nodes x makespan); and
        "finished" (BoolTensor[B])."""
        if self.state is None:
            raise RuntimeError("episode_metrics() before reset()")
        return episode_metrics(self.state, self.cfg)


def observation(state: QueueState, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a policy is handed of `state` after `step_and_observe` gave `out`: the window's
    "job_features", "cluster_features", "action_mask" and "window_job", each row's "time",
    "queue_length" and "free_nodes" ([B, 1]), and the [B, L] sequences the rules read (SEQUENCE_KEYS)."""
    return {"job_features": out["job_features"], "cluster_features": out["cluster_features"],
            "action_mask": out["action_mask"], "window_job": out["window_job"],
            "time": state.time.unsqueeze(-1).clone(),
            "queue_length": out["queue_length"].unsqueeze(-1), "free_nodes": state.free_nodes.unsqueeze(-1).clone(),
            "job_submit": state.submit, "job_requested": state.requested, "job_processors": state.processors}


def episode_metrics(state: QueueState, cfg: QueueConfig, rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """See QueueEnv.episode_metrics; of rows `rows` (LongTensor[N]) only when given."""
    def of(tensor: torch.Tensor) -> torch.Tensor:
        return tensor if rows is None else tensor[rows]

    start, submit, run_time, nodes = of(state.start), of(state.submit), of(state.run), of(state.nodes)
    started = start >= 0
    count = started.sum(1).clamp(min=1).double()
    wait = torch.where(started, start - submit, 0).double()
    run = run_time.double()
    slowdown = torch.where(started, (wait + run) / run, 0.0)
    end = torch.where(started, start + run_time, submit[:, :1])
    makespan = (end.max(1).values - submit[:, 0]).double().clamp(min=1)
    # jobs hold whole nodes (a 1-processor job on a 4-processor node takes the node), so the cluster is
    # busy in node-seconds, as the offered load counts it
    work = torch.where(started, run * nodes.double(), 0.0).sum(1)
    return {"mean_bounded_slowdown": of(state.bsld_sum) / count, "mean_wait": wait.sum(1) / count,
            "mean_slowdown": slowdown.sum(1) / count, "makespan": makespan,
            "utilization": work / (makespan * cfg.nodes), "finished": of(state.done).clone()}
