"""Rollout lookahead on the queue env (Bertsekas' rollout algorithm; docs/hpc_queue.md, "What
beating the best rule takes"): a scheduler that plans at each decision in copies of the state.

    for each decision, in every row of the batch:
        candidates = the base's first picks (a rule's first k, or with base "rules" each rule's first)
        for each candidate c, in a copy of the state whose future is a forecast:
            start c, then let the base decide H more times         (candidate j of "rules": rule j)
            cost(c) = summed bounded slowdown at the horizon of the jobs arrived by then
                      (started jobs: their own; waiting ones: as if they started then)
        pick argmin_c cost(c)

What a copy knows of the future (`future`):
    known        no more arrivals: only the jobs already submitted
    repeat       the last m arrivals repeat from now on, their gaps kept (a naive forecast a site
                 can always make from its own history); with `samples` s > 1, cost(c) is the mean
                 over s forecasts: that one and s - 1 blocks of m consecutive arrivals drawn from
                 random earlier points of the history (a block bootstrap of the arrival process),
                 the same s futures for every candidate of a row (common random numbers)
    daily        the arrivals of the last 24 hours repeat 24 hours later (the daily cycle of a site's
                 submissions, which the repeat forecast replays out of phase)
    clairvoyant  the log's actual next arrivals (no real scheduler has them: a bound)
Copies run jobs for their requested time, what a scheduler knows. The all-rules lookahead with the
repeat forecast is the teacher of `tasks.queue_ppo`'s expert-iteration warm start (`imitate:
lookahead`): it needs no base rule chosen on any range.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import ConfigError
from .config import DAY, RULES, QueueConfig
from .heuristics import order_ranks, priority, rule_keys
from .state import KERNEL_ORDERS, QueueState
from .step import step_and_observe
from .step_torch import bounded_slowdown

FUTURES = ("known", "repeat", "daily", "clairvoyant")
FAR_FUTURE = 1 << 50  # a submit time no copy reaches within its horizon


@dataclass(frozen=True)
class LookaheadSettings:
    """base: "rules" (every rule's first pick a candidate, its copy following that rule) or one rule
    of queue.config.RULES; candidates: k, the rule's first picks tried (one rule only); horizon: H,
    the base's decisions in each copy; future: see the module; repeat: m, arrivals the "repeat"
    forecast replays; samples: s, forecasts averaged ("repeat" only); seed: the draw of the
    forecasts' blocks; sim_window: the window the base ranks in the copies."""

    base: str = "rules"
    candidates: int = 4
    horizon: int = 64
    future: str = "repeat"
    repeat: int = 128
    sim_window: int = 128
    samples: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.base != "rules" and self.base not in RULES:
            raise ConfigError(f"lookahead.base must be 'rules' or one of {', '.join(RULES)}, got {self.base!r}")
        if self.future not in FUTURES:
            raise ConfigError(f"lookahead.future must be one of {', '.join(FUTURES)}, got {self.future!r}")
        for name in ("candidates", "horizon", "repeat", "sim_window", "samples"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"lookahead.{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.samples > 1 and self.future != "repeat":
            raise ConfigError(f"lookahead.samples > 1 needs future 'repeat', got future {self.future!r}")

    def make_base(self) -> RuleBase:
        return RulesBase() if self.base == "rules" else RuleBase(self.base)


def with_future(state: QueueState, future: str, repeat: int, back: torch.Tensor | None = None
                ) -> tuple[QueueState, torch.Tensor]:
    """A copy of `state` whose jobs run for their requested time and whose not-yet-submitted jobs
    follow `future`; and the jobs whose bounded slowdown the lookahead counts (BoolTensor[B, L]).
    back (LongTensor[B], "repeat"): how many arrivals before the last m the replayed block ends
    (0, the default: the last m arrivals)."""
    sim = state.clone()
    sim.run = sim.requested.clamp(min=1)
    arrived = torch.arange(sim.length).unsqueeze(0) < sim.next_arrival.unsqueeze(1)
    for name in KERNEL_ORDERS:  # rebuilt by the kernel from the changed queue
        getattr(sim, name).zero_()
    if future == "known":
        sim.submit = torch.where(arrived, sim.submit, FAR_FUTURE)
        return sim, arrived
    first, now = sim.next_arrival.unsqueeze(1), sim.time.unsqueeze(1)  # [B, 1]
    j = (torch.arange(sim.length).unsqueeze(0) - first).clamp(min=0)  # future job a + j, a = first
    if future == "repeat":  # job a + j copies arrived job e - m + (j mod m), e = a - back, from now on
        m = first.clamp(max=repeat)
        end = first if back is None else first - back.unsqueeze(1).clamp(min=0).minimum(first - m)
        source = (end - m + j % m).clamp(0, sim.length - 1)
        anchor = sim.submit.gather(1, end - m)
        # a block repeats every span: from its first arrival to the next block's
        span = torch.where(end < first, sim.submit.gather(1, end.clamp(max=sim.length - 1)), now) - anchor
        shifted = sim.submit.gather(1, source) - anchor + now + (j // m) * span.clamp(min=1)
    elif future == "daily":  # job a + j copies the (j mod m)-th of the m arrivals of the last day, a day on
        start = torch.searchsorted(sim.submit.contiguous(), now - DAY).minimum(first - 1).clamp(min=0)
        m = (first - start).clamp(min=1)
        source = (start + j % m).clamp(0, sim.length - 1)
        shifted = sim.submit.gather(1, source) + DAY * (1 + j // m)
    else:  # clairvoyant: the log's own next arrivals
        return sim, torch.ones_like(arrived)
    for name in ("run", "requested", "processors", "nodes"):  # the forecast jobs are copies of `source`
        column = getattr(sim, name)
        setattr(sim, name, torch.where(arrived, column, column.gather(1, source)))
    sim.submit = torch.cummax(torch.where(arrived, sim.submit, shifted.clamp(min=now)), 1).values
    return sim, torch.ones_like(arrived)


def horizon_cost(sim: QueueState, counted: torch.Tensor, threshold: float) -> torch.Tensor:
    """Summed bounded slowdown (DoubleTensor[B]) of the `counted` jobs that have arrived by the
    copy's time: started jobs their own, waiting ones as if they started now."""
    requested = sim.requested.double()
    started = sim.start >= 0
    now = sim.time.unsqueeze(1)
    wait = torch.where(started, sim.start - sim.submit, now - sim.submit).double()
    cost = bounded_slowdown(wait + requested, requested, threshold)
    return torch.where(counted & (sim.submit <= now), cost, 0.0).sum(1)


class RuleBase:
    """A rule as the lookahead's base: its first picks are the candidates and it decides in the copies."""

    def __init__(self, rule: str):
        self.name = rule

    def scores(self, state: QueueState, obs) -> torch.Tensor:
        """[B, W], lower first: the rule's priority of the window of `obs` (a td or a step's output)."""
        return priority(self.name, rule_keys(state, obs["window_job"]))


class RulesBase(RuleBase):
    """Every rule at once as the lookahead's base: the candidates are the rules' first picks, and the
    copy of candidate j follows rule j, so that at each decision the lookahead picks the rule whose
    next H decisions look best."""

    def __init__(self):
        super().__init__("rules")

    def first_picks(self, state: QueueState, td) -> torch.Tensor:
        """LongTensor[B, R]: each rule's first pick of td's window (a slot), R = len(RULES)."""
        keys = rule_keys(state, td["window_job"])
        return torch.stack([priority(rule, keys).argmin(-1) for rule in RULES], 1)

    def scores(self, state: QueueState, obs) -> torch.Tensor:
        """[B, W] in the copies, copy b*R + j following rule j: its rule's order (0 first)."""
        keys, rows = rule_keys(state, obs["window_job"]), torch.arange(state.batch)
        ranks = torch.stack([order_ranks(priority(rule, keys)) for rule in RULES])  # [R, B, W]
        return ranks[rows % len(RULES), rows]


def lookahead_pick(state: QueueState, td, base, k: int, horizon: int, future: str, repeat: int,
                   sim_cfg: QueueConfig, samples: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
    """The window slot (LongTensor[B]) of the best of the base's first k picks of td's window
    (`base` has `scores(state, obs)`, lower first; a RulesBase brings one candidate a rule), its cost
    the mean over `samples` forecasts (see the module; blocks drawn with `generator`)."""
    b, s = state.batch, samples
    if isinstance(base, RulesBase):
        slots, k = base.first_picks(state, td), len(RULES)
    else:
        k = min(k, td["action_mask"].shape[-1])
        slots = base.scores(state, td).topk(k, largest=False).indices  # [B, k]
    picks = td["window_job"].long().gather(1, slots)  # [B, k], -1 where fewer than k jobs wait
    first = picks.unsqueeze(1).expand(b, s, k).reshape(-1)  # copy (row, sample, candidate)
    back = None
    if s > 1:  # sample 0 replays the last block; the others a uniform earlier one
        history = (state.next_arrival - state.next_arrival.clamp(max=repeat)).unsqueeze(1)  # [B, 1]
        u = torch.rand(b, s, generator=generator, dtype=torch.float64)
        back = (u * (history + 1)).long()  # with_future keeps it within the history
        back[:, 0] = 0
        back = back.unsqueeze(2).expand(b, s, k).reshape(-1)
    sim, counted = with_future(state.rows(torch.arange(b).repeat_interleave(s * k)), future, repeat, back)
    out = step_and_observe(sim, torch.where((first >= 0) & ~sim.done, first, -1), sim_cfg)
    for _ in range(horizon - 1):
        slot = base.scores(sim, out).argmin(-1, keepdim=True)
        job = out["window_job"].long().gather(1, slot).squeeze(1)
        out = step_and_observe(sim, torch.where(sim.done | (job < 0), -1, job), sim_cfg)
    cost = horizon_cost(sim, counted, sim_cfg.bsld_threshold).reshape(b, s, k).mean(1)
    best = torch.where(picks >= 0, cost, torch.inf).argmin(1, keepdim=True)
    return slots.gather(1, best).squeeze(1)


def simulation_config(cfg: QueueConfig, sim_window: int) -> QueueConfig:
    """The copies' queue: `cfg`'s, with the base's window and no extra job features (rules read none)."""
    return replace(cfg, window=sim_window, rule_ranks=(), fit_delay=False)


class LookaheadPolicy:
    """The lookahead as a policy of a QueueEnv (called on the td the env last returned, as
    QueueHeuristic): it plans in copies of `env.state`, so it acts on that env only."""

    def __init__(self, env, settings: LookaheadSettings = LookaheadSettings()):
        self.env, self.settings, self.base = env, settings, settings.make_base()
        if torch.device(env.device or "cpu").type != "cpu":  # copies are built with CPU indices
            raise ConfigError(f"lookahead: plans on the CPU only, got an env on {env.device}")
        self.sim_cfg = simulation_config(env.cfg, settings.sim_window)
        self.generator = torch.Generator().manual_seed(settings.seed)

    @torch.no_grad()
    def __call__(self, td):
        s = self.settings
        td["action"] = lookahead_pick(self.env.state, td, self.base, s.candidates, s.horizon, s.future, s.repeat,
                                      self.sim_cfg, s.samples, self.generator)
        return td
