"""Whole campaigns simulated through the verdict code and the course: which blocks run, which verdicts come out.

A :class:`~h3bench.course.design.Design` is what a spec's protocol declares
(:meth:`~h3bench.course.design.Design.of`): the fixed design (every
duration's ABBAABBA, one look at the end) or the sequential one
(:mod:`h3bench.stats.sequential`). :func:`simulate_campaigns` draws latencies
from a :class:`LatencyModel` (lognormal request noise, a lognormal offset per
server process, and where asked a warmup leak, slow outliers, a step inside
the first pair, a host that cools, a cache, an audit seed that costs more),
judges every series through :func:`h3bench.stats.sequential.judge_series`, the
function a live campaign calls (through :func:`h3bench.stats.sequential.decide`),
and walks the campaigns' course (:meth:`h3bench.course.course.Course.walk`,
the rule the live run and the pool's rounds ask): which series reach each
duration, how many pairs they run, on one host or over N, and which control
blocks the lossless test needs. Its :class:`CampaignRun` says, per simulated
campaign, candidate and duration, the outcome, why, and how many pairs and
control blocks ran; :mod:`h3bench.course.devicetime` prices them.

Lossless campaigns: the relabelling test's outcome for a truly lossless
candidate is drawn at its exact level ``floor(α L) / L`` for the processes
it has at the campaign's end (every series' baseline blocks and the controls
against its own candidate blocks), whenever it ran the duration.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from h3bench.course.course import Course
from h3bench.course.design import Design
from h3bench.errors import UsageError
from h3bench.quality import lossless_design
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from h3bench.stats.sequential import judge_series, series_order

__all__ = [
    "NOT_RUN",
    "SIMULATED_REQUESTS",
    "CampaignRun",
    "Draw",
    "LatencyModel",
    "draw_samples",
    "simulate_campaigns",
]

NOT_RUN = -1  # reason code of a duration a candidate did not reach


# The campaign simulation draws every request of every block (warmup rule, audits, outliers); beyond this many
# measured requests per block it would need more memory than any plan is worth, and the plan says so instead.
SIMULATED_REQUESTS = 1000

#: Where a simulation's latencies come from: ``(candidate, duration, order, first look) -> (n, blocks, columns)``.
Draw = Callable[[int, int, str, int], np.ndarray]


@dataclass(frozen=True)
class LatencyModel:
    """How simulated latencies are drawn; log-scale effects, per block and request.

    ``leak`` slows the first measured request of every block of the arms in
    ``leak_arms`` by that fraction; ``outlier_rate`` slows each timed request
    independently by ``outlier_size`` with that probability, and
    ``outliers_per_duration`` slows exactly that many timed requests, drawn
    uniformly among the blocks of the series' first look (the ones that
    surely run), in the column ``outliers_in`` names (``timed``: any timed
    request, ``audit``, ``measured``); ``cache`` multiplies the candidate's
    measured requests (a cache of repeated seeds: 0.5 is "at most half the
    time of a fresh seed"); ``audit_cost`` is what the audit seed costs by
    itself, in both arms. Drift inside a pair: ``step`` moves every block of
    a series after its first by that fraction (a step inside pair 1), and
    ``cooling`` makes the host that much faster over its first block, along
    the block's requests, and stays there (it saturates over one block).
    """

    request_cv: float = 0.02
    process_cv: float = 0.01
    leak: float = 0.0
    leak_arms: str = "A"
    outlier_rate: float = 0.0
    outlier_size: float = 0.5
    outliers_per_duration: int = 0
    outliers_in: str = "timed"
    cache: float | None = None
    audit_cost: float = 1.0
    step: float = 0.0
    cooling: float = 0.0
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
        columns = {"timed": np.arange(cols), "audit": np.array([budget.measured]),
                   "measured": np.arange(budget.measured)}[model.outliers_in]
        seen = 2 * (first_look or blocks // 2) * len(columns)
        for _ in range(model.outliers_per_duration):
            where = rng.integers(0, seen, n)
            log[np.arange(n), where // len(columns), columns[where % len(columns)]] += slow
    if model.step:
        log[:, 1:, :] += math.log1p(model.step)
    if model.cooling:  # request i of block j at (j + (warmups + i + 1/2) / requests) blocks from the start
        t = np.arange(blocks)[:, None] + (budget.warmups + np.arange(cols) + 0.5)[None, :] / budget.requests
        log += np.log1p(-model.cooling * np.minimum(t, 1.0))[None]
    return np.exp(log)


@dataclass(frozen=True)
class CampaignRun:
    """Simulated campaigns: ``(n, candidates, durations)`` arrays, durations in run order."""

    design: Design
    ratios: np.ndarray  # (candidates, durations) true ratios
    code: np.ndarray  # speed outcome per duration; INCONCLUSIVE where not run
    reason: np.ndarray  # h3bench.stats.sequential reason codes; NOT_RUN where not reached
    pairs: np.ndarray  # AB/BA pairs run
    lossless_code: np.ndarray  # the lossless test's PASS, FAIL or INCONCLUSIVE (INCONCLUSIVE where it did not run)
    controls: np.ndarray = field(repr=False)  # (n, durations) lossless control blocks run
    first_requests_out: np.ndarray = field(repr=False)  # judged also without first requests (the rule flagged)
    lossless: bool = False
    # (n, candidates, durations) control processes of each lossless test (h3bench.course.course.Course.baseline_processes)
    baseline: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)), repr=False)

    @property
    def lossless_fail(self) -> np.ndarray:
        """The lossless test rejected the candidate (only where it ran)."""
        return self.lossless_code == FAIL

    @property
    def outcome(self) -> np.ndarray:
        """``(n, candidates)``: FAIL if any duration failed (speed or lossless), PASS if all passed, else INCONCLUSIVE.

        In a lossless campaign PASS needs the lossless test's PASS at every
        duration too: an infeasible test is INCONCLUSIVE, as live.
        """
        failed = ((self.code == FAIL) | self.lossless_fail).any(-1)
        passed = (self.code == PASS) & ((self.lossless_code == PASS) if self.lossless else True)
        return np.where(failed, FAIL, np.where(passed.all(-1), PASS, INCONCLUSIVE)).astype(np.int8)


@functools.lru_cache(maxsize=8)
def _lossless_tables(alpha: float, max_processes: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """The exact false-reject rate of a lossless candidate by (baseline, candidate) processes, and feasibility.

    Feasible: the baseline processes :func:`h3bench.quality.lossless_design.baseline_needed`
    asks for, and at least :data:`~h3bench.quality.lossless_design.SMALLEST_CANDIDATE`
    candidate processes; an infeasible test is INCONCLUSIVE, never FAIL.
    """
    rates = np.zeros((max_processes + 1, max_processes + 1))
    feasible = np.zeros((max_processes + 1, max_processes + 1), bool)
    for c in range(lossless_design.SMALLEST_CANDIDATE, max_processes):
        needed = lossless_design.baseline_needed(c, alpha)
        for b in range(needed, max_processes + 1 - c):
            rates[b, c] = lossless_design.false_reject_per_candidate([(b, c)], [alpha])
            feasible[b, c] = True
    return rates, feasible


def simulate_campaigns(design: Design, ratios: np.ndarray | list[list[float]], *, model: LatencyModel | None = None,
                       n: int = 20_000, seed: int = 0, lossless: bool = False, shards: int | None = None,
                       draw: Draw | None = None, control_arms: Sequence[str] = ()) -> CampaignRun:
    """Simulate ``n`` campaigns; ``ratios[c][d]`` is candidate ``c``'s true ratio at the ``d``-th duration run.

    ``shards``: over that many hosts, judged at the ends of the pool's rounds
    (None: one host). ``draw`` gives the latencies instead of the model (a
    live run's, replayed: blocks that did not run may be NaN, and are never
    read by a course that agrees with the run's). ``control_arms``: each
    candidate's control arm (a spec's :attr:`Course.control_arms`; default:
    the baseline for every one), which the lossless test's control processes
    run (:meth:`h3bench.course.course.Course.baseline_processes`).
    """
    truth = np.asarray(ratios, dtype=float)
    if truth.ndim != 2 or truth.shape[1] != design.n_durations:
        raise UsageError(f"ratios must be (candidates, {design.n_durations}), got {truth.shape}")
    model = model or LatencyModel()
    rng = np.random.default_rng(seed)
    n_cand, n_dur = truth.shape
    course = Course(design, n_cand, lossless, shards, control_arms=tuple(control_arms))
    shape = (n, n_cand, n_dur)
    stop, code, reason = np.zeros(shape, np.int16), np.zeros(shape, np.int8), np.zeros(shape, np.int8)
    leaked = np.zeros(shape, bool)
    for d in range(n_dur):
        b = course.boundaries(d)
        order = series_order(b.max_pairs)
        for c in range(n_cand):
            x = (draw(c, d, order, b.looks[0]) if draw is not None
                 else draw_samples(rng, n, order, design.budget, float(truth[c, d]), model, b.looks[0]))
            found = judge_series(x, order, design.budget, b, leak_level=design.leak_level,
                                 cache_ratio=design.cache_ratio)
            stop[:, c, d], code[:, c, d], reason[:, c, d], leaked[:, c, d] = (found.pairs, found.code, found.reason,
                                                                              found.leak)
    walk = course.walk(stop, code)
    code = np.where(walk.reached, code, INCONCLUSIVE).astype(np.int8)
    reason = np.where(walk.reached, reason, NOT_RUN).astype(np.int8)
    lossless_code = np.full(shape, INCONCLUSIVE, np.int8)
    if lossless:
        for d in range(n_dur):
            rates, feasible = _lossless_tables(design.lossless_alpha(d))
            top = rates.shape[0] - 1
            base = np.minimum(walk.baseline[..., d], top)
            own = np.minimum(walk.pairs[:, :, d], top - base)
            rejected = rng.random((n, n_cand)) < rates[base, own]
            lossless_code[:, :, d] = np.where(walk.reached[:, :, d] & feasible[base, own],
                                              np.where(rejected, FAIL, PASS), INCONCLUSIVE)
    return CampaignRun(design, truth, code, reason, walk.pairs.astype(np.int16), lossless_code,
                       walk.controls.astype(np.int16), walk.reached & leaked, lossless, walk.baseline)
