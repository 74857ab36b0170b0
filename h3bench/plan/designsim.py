"""Whole campaigns simulated through the verdict code: which blocks run, which verdicts come out.

A :class:`Design` is what a spec's protocol would declare: the fixed design
of today (every duration's ABBAABBA, one look at the end) or the sequential
one (:mod:`h3bench.stats.sequential`), with its block budget, looks, spending,
futility, durations in order of cost, the first-request and audit rules, and
the lossless test's level. :func:`simulate_campaigns` draws latencies from a
:class:`LatencyModel` (lognormal request noise, a lognormal offset per
server process, and where asked a warmup leak, slow outliers, a cache, an
audit seed that costs more) and runs them through
:func:`h3bench.stats.sequential.judge_series`, the function a live campaign calls
(through :func:`h3bench.stats.sequential.decide`). Its :class:`CampaignRun` says,
per simulated campaign, candidate and duration, the outcome, why, and how
many pairs and control blocks ran; :mod:`h3bench.plan.devicetime` prices them.

Lossless campaigns: the relabelling test's outcome for a truly lossless
candidate is drawn at its exact level ``floor(α L) / L`` for the processes
it has (:func:`h3bench.quality.lossless_design.false_reject_per_candidate`); the
control blocks follow :func:`h3bench.quality.lossless_design.controls_before_pair`
with the candidates' pairs run round-robin, so every series' baseline blocks
count as they are run.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from h3bench.errors import UsageError
from h3bench.quality import lossless_design
from h3bench.runspec import RunSpec
from h3bench.runspec.schedule import (
    budget_of,
    control_blocks,
    in_order_of_cost,
    looks_of,
    lossless_level,
    run_order,
)
from h3bench.stats import intervals
from h3bench.stats.blockstat import LEAK_LEVEL, BlockBudget
from h3bench.stats.cache_audit import CACHE_RATIO
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from h3bench.stats.sequential import DEARER_LOOKS, FIRST_LOOKS, Boundaries, boundaries, judge_series, series_order

__all__ = [
    "NOT_RUN",
    "CampaignRun",
    "Design",
    "LatencyModel",
    "design_of",
    "draw_samples",
    "fixed_design",
    "sequential_design",
    "simulate_campaigns",
]

NOT_RUN = -1  # reason code of a duration a candidate did not reach


@dataclass(frozen=True)
class Design:
    """A campaign design; ``looks`` per duration in the order they run (cheapest first)."""

    name: str
    looks: tuple[tuple[int, ...], ...]
    budget: BlockBudget
    spending: str = "hsd"
    gamma: float = 0.0
    futility: bool = True
    in_order_of_cost: bool = True
    leak_level: float | None = LEAK_LEVEL
    cache_ratio: float | None = CACHE_RATIO
    lossless_levels: tuple[float, ...] | None = None  # per duration; None: 0.05 at each (today's)
    fixed_controls: int = 0  # the fixed design's lossless control blocks per duration, all first
    margin: float = 0.02

    @property
    def n_durations(self) -> int:
        return len(self.looks)

    @property
    def sequential(self) -> bool:
        return any(len(looks) > 1 for looks in self.looks) or self.futility

    def lossless_alpha(self, duration: int) -> float:
        """The relabelling test's level at the ``duration``-th duration (run order)."""
        if self.lossless_levels is None:
            return lossless_design.PER_CANDIDATE_ALPHA
        return self.lossless_levels[duration]

    def boundaries(self, duration: int, n_candidates: int, *, lossless: bool = False) -> Boundaries:
        """The boundaries of the ``duration``-th duration (run order) of a campaign of ``n_candidates``."""
        levels = intervals.error_levels(self.n_durations, n_candidates)
        pass_from = (lossless_design.pass_from_pairs(self.lossless_alpha(duration)) if lossless and self.sequential
                     else 0)
        return boundaries(self.looks[duration], levels, self.margin, spending=self.spending, gamma=self.gamma,
                          futility_ratio="margin" if self.futility else None, pass_from=pass_from)

    def describe(self) -> str:
        looks = "; ".join(f"duration {i + 1}: looks after {list(n)} pairs" for i, n in enumerate(self.looks))
        parts = [self.budget.describe(), looks]
        if self.sequential:
            parts.append(f"{self.spending}{'' if self.spending != 'hsd' else f' γ = {self.gamma:g}'} spending")
            parts.append("futility at 1 - margin" if self.futility else "no futility stop")
        parts.append("dearer durations only after a PASS at the cheaper" if self.in_order_of_cost
                     else "every duration runs")
        return f"{self.name}: " + ", ".join(parts)


def sequential_design(n_durations: int = 2, *, budget: BlockBudget | None = None, name: str = "sequential",
                      lossless_per_candidate: float | None = lossless_design.PER_CANDIDATE_ALPHA,
                      **options: object) -> Design:
    """The proposed design: ``FIRST_LOOKS`` at the cheapest duration, ``DEARER_LOOKS`` at the others.

    (:mod:`h3bench.stats.sequential` defines both.)

    ``lossless_per_candidate`` is split over the durations by
    :func:`h3bench.quality.lossless_design.lossless_levels`; None keeps today's 0.05
    per duration.
    """
    looks = (FIRST_LOOKS, *([DEARER_LOOKS] * (n_durations - 1)))
    levels = (None if lossless_per_candidate is None
              else lossless_design.lossless_levels(n_durations, lossless_per_candidate))
    return Design(name, looks, budget or BlockBudget(1, 2, True, True), lossless_levels=levels,
                  **options)  # type: ignore[arg-type]


def fixed_design(n_durations: int = 2, pairs: int = 4, *, controls: int = 0, name: str = "fixed") -> Design:
    """Today's design: ``pairs`` AB/BA pairs (ABBAABBA) at every duration, 1 warmup + 3 measured + 1 audit, one look."""
    return Design(name, ((pairs,),) * n_durations, BlockBudget(1, 3, True, False), futility=False,
                  in_order_of_cost=False, leak_level=None, cache_ratio=None, fixed_controls=controls)


@dataclass(frozen=True)
class LatencyModel:
    """How simulated latencies are drawn; log-scale effects, per block and request.

    ``leak`` slows the first measured request of every block of the arms in
    ``leak_arms`` by that fraction; ``outlier_rate`` slows each timed request
    independently by ``outlier_size`` with that probability, and
    ``outliers_per_duration`` slows exactly that many timed requests, drawn
    uniformly among the blocks of the series' first look (the ones that
    surely run); ``cache`` multiplies the candidate's measured requests (a
    cache of repeated seeds: 0.5 is "at most half the time of a fresh seed");
    ``audit_cost`` is what the audit seed costs by itself, in both arms.
    """

    request_cv: float = 0.02
    process_cv: float = 0.01
    leak: float = 0.0
    leak_arms: str = "A"
    outlier_rate: float = 0.0
    outlier_size: float = 0.5
    outliers_per_duration: int = 0
    cache: float | None = None
    audit_cost: float = 1.0
    scale_s: float = 100.0


def draw_samples(rng: np.random.Generator, n: int, order: str, budget: BlockBudget, ratio: float,
                 model: LatencyModel, first_look: int | None = None) -> np.ndarray:
    """``(n, blocks, measured [+ audit])`` seconds of one series at one duration; ``ratio`` is the candidate's truth."""
    blocks, cols = len(order), budget.columns
    is_b = np.array([c == "B" for c in order])
    log = (math.log(model.scale_s) + rng.normal(0.0, model.request_cv, (n, blocks, cols))
           + rng.normal(0.0, model.process_cv, (n, blocks, 1)) + (math.log(ratio) * is_b)[None, :, None])
    if budget.audit:
        log[..., budget.measured] += math.log(model.audit_cost)
    if model.leak:
        arms = np.array([c in model.leak_arms for c in order])
        log[:, arms, 0] += math.log1p(model.leak)
    if model.cache is not None:
        log[:, is_b, : budget.measured] += math.log(model.cache)
    slow = math.log1p(model.outlier_size)
    if model.outlier_rate:
        log += slow * (rng.random(log.shape) < model.outlier_rate)
    if model.outliers_per_duration:
        seen = 2 * (first_look or blocks // 2) * cols
        for _ in range(model.outliers_per_duration):
            where = rng.integers(0, seen, n)
            log[np.arange(n), where // cols, where % cols] += slow
    return np.exp(log)


@dataclass(frozen=True)
class CampaignRun:
    """Simulated campaigns: ``(n, candidates, durations)`` arrays, durations in run order."""

    design: Design
    ratios: np.ndarray  # (candidates, durations) true ratios
    code: np.ndarray  # speed outcome per duration; INCONCLUSIVE where not run
    reason: np.ndarray  # h3bench.stats.sequential reason codes; NOT_RUN where not reached
    pairs: np.ndarray  # AB/BA pairs run
    lossless_fail: np.ndarray  # the lossless test rejected (only where it ran)
    controls: np.ndarray = field(repr=False)  # (n, durations) lossless control blocks run
    first_requests_out: np.ndarray = field(repr=False)  # judged also without first requests (the rule flagged)
    lossless: bool = False

    @property
    def outcome(self) -> np.ndarray:
        """``(n, candidates)``: FAIL if any duration failed (speed or lossless), PASS if all passed, else INCONCLUSIVE."""
        failed = ((self.code == FAIL) | self.lossless_fail).any(-1)
        passed = ((self.code == PASS) & ~self.lossless_fail).all(-1)
        return np.where(failed, FAIL, np.where(passed, PASS, INCONCLUSIVE)).astype(np.int8)


@functools.lru_cache(maxsize=8)
def _lossless_rates(alpha: float, max_processes: int = 40) -> np.ndarray:
    rates = np.zeros((max_processes + 1, max_processes + 1))
    for b in range(2, max_processes + 1):
        for c in range(1, max_processes + 1 - b):
            rates[b, c] = lossless_design.false_reject_per_candidate([(b, c)], [alpha])
    return rates


def simulate_campaigns(design: Design, ratios: np.ndarray | list[list[float]], *, model: LatencyModel | None = None,
                       n: int = 20_000, seed: int = 0, lossless: bool = False) -> CampaignRun:
    """Simulate ``n`` campaigns; ``ratios[c][d]`` is candidate ``c``'s true ratio at the ``d``-th duration run."""
    truth = np.asarray(ratios, dtype=float)
    if truth.ndim != 2 or truth.shape[1] != design.n_durations:
        raise UsageError(f"ratios must be (candidates, {design.n_durations}), got {truth.shape}")
    model = model or LatencyModel()
    rng = np.random.default_rng(seed)
    n_cand, n_dur = truth.shape
    code = np.full((n, n_cand, n_dur), INCONCLUSIVE, np.int8)
    reason = np.full((n, n_cand, n_dur), NOT_RUN, np.int8)
    pairs = np.zeros((n, n_cand, n_dur), np.int16)
    lossless_fail = np.zeros((n, n_cand, n_dur), bool)
    controls = np.zeros((n, n_dur), np.int16)
    leaked = np.zeros((n, n_cand, n_dur), bool)
    reached = np.ones((n, n_cand), bool)
    for d in range(n_dur):
        alpha = design.lossless_alpha(d)
        b = design.boundaries(d, n_cand, lossless=lossless)
        order = series_order(b.max_pairs)
        for c in range(n_cand):
            x = draw_samples(rng, n, order, design.budget, float(truth[c, d]), model, b.looks[0])
            found = judge_series(x, order, design.budget, b, leak_level=design.leak_level,
                                 cache_ratio=design.cache_ratio)
            run = reached[:, c]
            code[:, c, d] = np.where(run, found.code, INCONCLUSIVE)
            reason[:, c, d] = np.where(run, found.reason, NOT_RUN)
            pairs[:, c, d] = np.where(run, found.pairs, 0)
            leaked[:, c, d] = run & found.leak
        if lossless:
            rates = _lossless_rates(alpha)
            controls[:, d], baseline = _controls(design, b, pairs[:, :, d], code[:, :, d] == PASS, alpha)
            tested = code[:, :, d] == PASS
            rate = rates[np.minimum(baseline, 40)[:, None], np.minimum(pairs[:, :, d], 40 - baseline[:, None])]
            lossless_fail[:, :, d] = tested & (rng.random((n, n_cand)) < rate)
        if design.in_order_of_cost:
            reached &= (code[:, :, d] == PASS) & ~lossless_fail[:, :, d]
    return CampaignRun(design, truth, code, reason, pairs, lossless_fail, controls, leaked, lossless)


def _controls(design: Design, b: Boundaries, pairs: np.ndarray, passed: np.ndarray, alpha: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """Control blocks at one duration and the baseline processes its lossless tests see, ``(n,)`` each."""
    n, n_cand = pairs.shape
    if not design.sequential:
        return (np.full(n, design.fixed_controls, np.int16),
                design.fixed_controls + pairs.sum(-1).astype(np.int16))
    pass_from = b.looks[next(j for j, p in enumerate(b.pass_levels) if p > 0)]
    needed = np.array([0] + [lossless_design.baseline_needed(k, alpha) if k >= pass_from else 0
                             for k in range(1, b.max_pairs + 1)])
    base = np.zeros(n, np.int64)
    ctl = np.zeros(n, np.int64)
    for k in range(1, b.max_pairs + 1):  # the candidates' pairs run round-robin
        for c in range(n_cand):
            runs = pairs[:, c] >= k
            before = (runs & (k >= pass_from) & (base + 1 < needed[k])).astype(np.int64)
            ctl += before
            base += before + runs.astype(np.int64)
            at_pass = runs & passed[:, c] & (pairs[:, c] == k)
            extra = np.where(at_pass, np.maximum(0, needed[k] - base), 0)
            ctl += extra
            base += extra
    return ctl.astype(np.int16), base.astype(np.int16)


def design_of(spec: RunSpec) -> Design:
    """The spec's design, as the campaign simulation takes it (durations in the order they run)."""
    p = spec.protocol
    order = run_order(spec)
    sequential = p.design == "sequential"
    return Design(p.design, tuple(looks_of(spec, d) for d in order), budget_of(spec), p.spending, p.spending_gamma,
                  futility=sequential and p.futility, in_order_of_cost=in_order_of_cost(spec),
                  leak_level=p.first_request_level, cache_ratio=p.audit_cache_ratio if p.audit else None,
                  lossless_levels=tuple(lossless_level(spec, d) for d in order) if sequential else None,
                  fixed_controls=0 if sequential else control_blocks(spec), margin=spec.gates.speed_margin)
