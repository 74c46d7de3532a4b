"""`ClusterEnv`: the batched DeepRM cluster as a TorchRL `EnvBase` (../SPEC.md "Public contract").

The env is a thin wrapper: the state machine is `cluster.py`, rewards and metrics `objectives.py`,
observations `observations.py`. The hot path (`rollout.py`) drives those functions directly and
skips TorchRL's per-step bookkeeping; `check_env_specs` holds the wrapper to its specs.
"""
from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Categorical, Composite, Unbounded

from ..allocator import Buffers
from ..batched import EveryRowReset, require_slot_actions, rows_to_reset
from ..config import ClusterConfig, ConfigError
from ..jobs import JobSet
from .cluster import compiled_step, init_state, step_state
from .objectives import METRICS, episode_metrics
from .observations import observe
from .state import ClusterState, require_state_fits

# the per-episode metrics a step writes under "episode" when a row's episode ends (objectives.episode_metrics)
EPISODE_KEYS = (*METRICS, "final_time")


class ClusterEnv(EveryRowReset):
    """B cluster episodes stepped as one TensorDict.

    Args:
        cfg: the cluster.
        workload: a `JobSet` (row b replays jobset b at every reset) or a workload generator with
            `sample(batch_size, generator, device)` and `max_jobs` (fresh jobsets at every reset).
        batch_size: [B], or [] for one unbatched episode (TorchRL's and Gymnasium-style single-env
            tools; the state keeps one row, the TensorDicts have no batch dim).
        device: where every tensor of the state lives.
        seed: seeds the env's own generator of workload draws (None is 0: envs built alike draw
            alike; give each worker its seed). Random decisions draw from their policy's generator
            (`make_heuristic("random", cfg, generator=g)`), `rand_action` from torch's global one.
        compile_step: step the state with `cluster.compiled_step` (torch.compile, tens of seconds at
            the first reset; the eager step with a warning where compiling fails).
    """

    batch_locked = True
    EPISODE_KEYS = EPISODE_KEYS
    STEP_ONLY_KEYS = tuple(("episode", key) for key in EPISODE_KEYS)  # NaN at a reset (_finished_metrics)

    def __init__(self, cfg: ClusterConfig, workload, batch_size=(1,), device="cpu", seed: int | None = None,
                 compile_step: bool = False):
        batch_size = torch.Size(batch_size if not isinstance(batch_size, int) else [batch_size])
        if len(batch_size) > 1:
            raise ConfigError(f"ClusterEnv batch_size must be [B] or [], got {list(batch_size)}")
        super().__init__(device=device, batch_size=batch_size)
        self.rows = batch_size[0] if batch_size else 1  # the state's rows: one for an unbatched env
        self.cfg = cfg
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(0 if seed is None else seed)
        self.set_workload(workload)
        self.state: ClusterState | None = None
        self.compile_step = compile_step
        self._step_state = None  # step_state, or its compiled form, chosen at the first reset
        # the image observations' memory, used again once nobody holds a step's (allocator.Buffers):
        # without it every step of a large batch maps and faults in fresh pages
        self._kept_observations = Buffers()
        self._make_specs()

    # ----- workload ------------------------------------------------------------------------
    def set_workload(self, workload) -> None:
        """Swap the jobsets or generator (same number of job columns, so the specs stay valid)."""
        b = self.rows
        if isinstance(workload, JobSet):
            if workload.batch_size != b:
                raise ConfigError(f"JobSet has {workload.batch_size} jobsets but the env batch_size is {b}; "
                                  "use JobSet.repeat_interleave for several episodes per jobset")
            workload = workload.validate(self.cfg).to(self.device)
            max_jobs = workload.max_jobs
        else:
            if not hasattr(workload, "sample"):
                raise ConfigError(f"workload must be a JobSet or have sample(batch_size, generator, device), "
                                  f"got {type(workload).__name__}")
            workload.validate(self.cfg)
            max_jobs = workload.max_jobs
        require_state_fits(self.cfg, b, max_jobs, copies=2 if isinstance(workload, JobSet) else 1)
        if getattr(self, "max_jobs", max_jobs) != max_jobs:
            raise ConfigError(f"new workload has {max_jobs} job columns, the env's specs have {self.max_jobs}")
        self.workload, self.max_jobs = workload, max_jobs
        self._first_state = None  # fixed jobsets: their state at time 0, made once, copied at each reset

    def draw_jobs(self, rows: torch.Tensor | None = None) -> JobSet:
        """The jobsets of the next reset, or of its rows `rows` (LongTensor[N]) only: a generator
        draws those rows alone (a collector resets a few rows a step; a draw of the whole batch for
        them cost as much as the steps between)."""
        if isinstance(self.workload, JobSet):
            return self.workload if rows is None else self.workload[rows]
        return self.workload.sample(self.rows if rows is None else len(rows), self.generator,
                                    self.device).validate(self.cfg)

    # ----- specs -----------------------------------------------------------------------------
    def _make_specs(self) -> None:
        cfg, b, dev = self.cfg, self.batch_size, self.device
        m, r, t = cfg.num_slots, cfg.num_resources, cfg.horizon
        spec = {
            "action_mask": Binary(n=m + 1, shape=(*b, m + 1), dtype=torch.bool, device=dev),
            "time": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
            "job_start": Unbounded(shape=(*b, self.max_jobs), dtype=torch.int64, device=dev),
            "slot_duration": Unbounded(shape=(*b, m), dtype=torch.int64, device=dev),
            "slot_demand": Unbounded(shape=(*b, m, r), dtype=torch.int64, device=dev),
            "slot_offset": Unbounded(shape=(*b, m), dtype=torch.int64, device=dev),
            "slot_deadline": Unbounded(shape=(*b, m), dtype=torch.int64, device=dev),
            "free_now": Unbounded(shape=(*b, r), dtype=torch.int64, device=dev),
            "backlog": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
            "since_new": Unbounded(shape=(*b, 1), dtype=torch.float32, device=dev),
            "to_arrive": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
            "arrived": Unbounded(shape=(*b, 1), dtype=torch.int64, device=dev),
        }
        if cfg.observation == "image":
            spec["observation"] = Unbounded(shape=(*b, t, cfg.image_width), dtype=torch.float32, device=dev)
        elif cfg.observation == "compact":
            spec["observation"] = Unbounded(shape=(*b, cfg.compact_size), dtype=torch.float32, device=dev)
        if cfg.observation != "none":  # what a network over the structured state also reads
            spec["used"] = Unbounded(shape=(*b, t, r), dtype=torch.int64, device=dev)
            spec["slot_waited"] = Unbounded(shape=(*b, m), dtype=torch.int64, device=dev)
        self._observation_keys = tuple(spec)
        spec["episode"] = Composite({k: Unbounded(shape=(*b, 1), dtype=torch.float64, device=dev)
                                     for k in EPISODE_KEYS}, shape=b)
        self.observation_spec = Composite(spec, shape=b)
        self.action_spec = Categorical(n=m + 1, shape=b, dtype=torch.int64, device=dev)
        self.reward_spec = Unbounded(shape=(*b, 1), dtype=torch.float32, device=dev)
        done = Categorical(n=2, shape=(*b, 1), dtype=torch.bool, device=dev)
        self.done_spec = Composite(done=done.clone(), terminated=done.clone(), truncated=done.clone(), shape=b)

    # ----- EnvBase hooks -----------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        index = rows_to_reset(tensordict, self.state is not None)
        if index is None:
            self.state = self.initial_state()
        elif index.numel():  # only the rows asked for start again; an all-False "_reset" resets (and draws) nothing
            self.state = self.state.put_rows(index, self.initial_state(index))
        if self._step_state is None:
            self._step_state = compiled_step(self.state, self.cfg) if self.compile_step else step_state
        return self._output(reward=None)

    def initial_state(self, rows: torch.Tensor | None = None) -> ClusterState:
        """The state at time 0 of the next reset's jobsets, or of its rows `rows` (LongTensor[N]) only:
        a copy of the fixed jobsets' first state (made once; a reset may not change it), else the
        state of fresh draws."""
        if not isinstance(self.workload, JobSet):
            return init_state(self.draw_jobs(rows), self.cfg)
        if self._first_state is None:
            self._first_state = init_state(self.workload, self.cfg)
        every = torch.arange(self.rows, device=self.device)
        return self._first_state.rows(every if rows is None else rows)  # advanced indexing: a copy

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = require_slot_actions(tensordict, self.state, self.rows)
        was_done = self.state.done.clone()  # the state is stepped in place
        reward = self._step_state(self.state, action, self.cfg)
        return self._output(reward=reward, ended=self.state.done & ~was_done)

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(0 if seed is None else int(seed))

    def _output(self, reward: torch.Tensor | None, ended: torch.Tensor | None = None) -> TensorDictBase:
        s = self.state
        out = observe(s, self.cfg, buffers=self._kept_observations).materialize(self._observation_keys)
        out["terminated"] = s.terminated.unsqueeze(-1)
        out["truncated"] = s.truncated.unsqueeze(-1)
        out["done"] = s.done.unsqueeze(-1)
        if reward is not None:
            out["reward"] = reward.unsqueeze(-1)
        out["episode"] = self._finished_metrics(ended)
        if not self.batch_size:  # unbatched: drop the state's single row
            out = {k: (v[0] if torch.is_tensor(v) else {m: x[0] for m, x in v.items()}) for k, v in out.items()}
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def finished_results(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return episode_metrics(self.state.rows(rows))

    def size_fields(self) -> dict:
        return {"batch_size": self.rows, "observation": self.cfg.observation}

    # ----- results ---------------------------------------------------------------------------
    def episode_metrics(self) -> dict[str, torch.Tensor]:
        """SPEC's episode metrics of the current episodes (see objectives.episode_metrics): after a
        rollout that resets finished rows, those are the new, unfinished episodes; the finished
        ones' are in the rollout's ("next", "episode", ...) on their last step."""
        if self.state is None:
            raise RuntimeError("episode_metrics() before reset()")
        return episode_metrics(self.state)
