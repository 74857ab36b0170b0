"""The group-sequential AB/BA design: planned looks, their levels, and the decision at each look.

A candidate's series at one duration is a sequence of AB/BA pairs. After the
pairs of each planned look (``looks``, e.g. 2, 4, 6, 8 pairs) the paired log
ratios so far give a geometric-mean ratio and one-sided t bounds, exactly as
in the fixed design (:func:`h3bench.stats.intervals.t_bounds`), but at the look's
*nominal* levels. The series stops at the first look where

1. the anti-shortcut audit fails (FAIL, :mod:`h3bench.stats.cache_audit`);
   where it cannot rule out a cache, or suspects one with fewer than four
   blocks per arm, PASS waits for a later look;
2. the lower bound lies above ``1 + margin`` (FAIL, "slower");
3. the upper bound lies below ``1 - margin`` (PASS, "faster"), unless PASS is
   not yet allowed at that look (a lossless campaign whose lossless test
   cannot reach a verdict yet, :mod:`h3bench.quality.lossless_design`);
4. futility: the estimate is at or above ``futility_ratio`` (by default
   ``1 - margin``) and a later look remains: INCONCLUSIVE, "can no longer
   reach PASS";
5. it is the last look: INCONCLUSIVE.

Look levels: alpha spending, calibrated exactly on the t sequence
--------------------------------------------------------------------
The campaign's error levels per duration are those of the fixed design
(:func:`h3bench.stats.intervals.error_levels`): the upper bound at ``α/2 /
n_candidates`` (PASS needs every duration: an intersection-union test), the
lower bound at ``α/2 / (n_durations · n_candidates)`` (Bonferroni). Within a
duration, each of those levels is spent over the looks by a Lan–DeMets
spending function of the information fraction ``t = pairs / max pairs``:

- ``obf`` (O'Brien–Fleming type): ``α(t) = 2 - 2 Φ(z_{1-α/2} / √t)``;
- ``pocock`` (Pocock type): ``α(t) = α ln(1 + (e - 1) t)``;
- ``hsd`` (Hwang–Shih–DeCani, parameter γ): ``α(t) = α (1 - e^{-γ t}) /
  (1 - e^{-γ})``, and ``α t`` at γ = 0, the default.

The cheapest duration spends linearly (HSD γ = 0), chosen by simulating cost
and power (2 % request noise, 950PR timings, a look after every pair from 2
to 8): Pocock-type spending wastes level on looks with one or two degrees of
freedom; O'Brien–Fleming-type keeps almost none for early looks. A dearer
duration (:data:`DEARER_LOOKS`) ends at the fixed design's 4 pairs, so the
dearest campaign the design can run costs no more than the fixed design
(:func:`h3bench.course.devicetime.worst_seconds`); with one look before it,
linear spending would waste a quarter of the level at 2 degrees of freedom
and cost about 5 points of power, so it spends mostly at the last look
(:data:`DEARER_GAMMA`, HSD γ = -10: 8 % of the level by 3 pairs of 4), which
keeps the fixed design's power there and still stops a large effect (the
recipe's 0.52) after 3 pairs.

Drift inside a pair
-------------------
AB/BA alternation cancels a linear drift, not a step: a step of size ``s``
between the two blocks of one pair moves the mean log ratio of ``k`` pairs by
``log(1 + s) / k``. The sequential design's bounds are moved out by that
much for a step of :data:`STEP_ALLOWANCE` (1.75 %) at every look, which keeps
false "faster" at or below 2.5 % at the intersection-union worst case under
a -3 % step inside pair 1, or a host that cools by 5 % over its first block
(:mod:`h3bench.plan.guarantees`); a larger step can still bias a look.

The classic boundaries assume a normal statistic with known variance; here the
variance is estimated from as few as two pairs (1 degree of freedom), where
the usual conversion to t quantiles (Jennison & Turnbull 2000, §11.5) is far
off. Instead the critical values are calibrated *exactly* for the t statistic:
with normal log ratios and the true ratio on the margin, the sequence
``T_j = (mean_j - log(1 - margin)) / (s_j / √n_j)`` over the looks is a pivot,
its joint law free of the unknown spread. So a seeded Monte-Carlo sample of
that sequence (:data:`CALIBRATION_PATHS` paths) gives, look after look, the
critical value ``c_j`` for which the probability of a first crossing at look
``j`` is exactly the spending increment ``α(t_j) - α(t_{j-1})``. The first
look's critical value is the analytic t quantile. The nominal level of look
``j`` is ``P(t_{n_j - 1} < -c_j)``, and the bounds it gives are repeated
confidence bounds (Jennison & Turnbull 1989): valid simultaneously over the
looks.

Why the guarantees hold
-----------------------
False PASS is largest on the margin: raising the true ratio raises every
``T_j`` path by path, so a path that PASSes at a higher ratio PASSes (no
later) at a lower one; the first-request and audit rules read only
within-block contrasts, which a candidate's effect does not move. Futility, the FAIL bound and the audit only stop
series or hold PASS back, so they can only remove PASS claims: the PASS levels are calibrated
as if none of them existed (non-binding futility), and likewise the FAIL
levels. The sum over looks is the per-duration level, and the
intersection-union and Bonferroni arguments over durations and candidates
are unchanged, also when a dearer duration runs only for a candidate that
passed a cheaper one (its data are independent of the cheaper duration's).
tests_unit/stats/test_sequential.py measures all of it on simulated campaigns,
through the functions here.

Live and simulated use the same code: :func:`decide` (one series, the
blocks so far) pads its blocks to the design's maximum and calls
:func:`judge_series`, the vectorised form the simulations call.

References
----------
K. K. G. Lan and D. L. DeMets, "Discrete sequential boundaries for clinical
trials", Biometrika 70 (1983) 659-663. I. K. Hwang, W. J. Shih and J. S.
DeCani, "Group sequential designs using a family of type I error probability
spending functions", Stat. Med. 9 (1990) 1439-1445. C. Jennison and B. W.
Turnbull, "Interim analyses: the repeated confidence interval approach",
JRSS B 51 (1989) 305-361; Group Sequential Methods with Applications to
Clinical Trials, Chapman & Hall 2000. R. L. Berger, Technometrics 24 (1982)
295-300.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr, ndtri, stdtr, stdtrit

from h3bench.errors import UsageError
from h3bench.outcome import Outcome
from h3bench.stats import intervals
from h3bench.stats.blockstat import LEAK_LEVEL, BlockBudget, block_log_statistics, first_request_sides
from h3bench.stats.cache_audit import CACHE_RATIO, audit_looks
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS

__all__ = [
    "AUDIT",
    "CALIBRATION_PATHS",
    "CONTINUE",
    "DEARER_GAMMA",
    "DEARER_LOOKS",
    "FAILED",
    "FIRST_LOOKS",
    "FUTILITY",
    "LAST_LOOK",
    "ONLY_LOOKS",
    "PASSED",
    "REASONS",
    "SPENDING",
    "STEP_ALLOWANCE",
    "Boundaries",
    "LookDecision",
    "SeriesBlock",
    "SeriesOutcomes",
    "boundaries",
    "crossing_values",
    "decide",
    "judge_series",
    "look_bounds",
    "look_levels",
    "nominal_level",
    "sequential_outcomes",
    "series_order",
    "spent",
]

SPENDING = ("obf", "pocock", "hsd")
FIRST_LOOKS = (2, 3, 4, 5, 6, 7, 8)  # the cheapest of several durations: a look after every pair, up to 8
# Every dearer duration: a look at 3 pairs, then at the fixed design's 4 (never dearer than it); the only duration of a
# one-duration design: from 2 pairs. Their levels are spent mostly at the last look (HSD γ = -10: 8 % of it by 3 pairs
# of 4), so the last look keeps the fixed design's power and an early one stops only a large effect.
DEARER_LOOKS = (3, 4)
ONLY_LOOKS = (2, 3, 4)
DEARER_GAMMA = -10.0
STEP_ALLOWANCE = 0.0175  # the sequential design's bounds allow for a step of 1.75 % inside one AB/BA pair
CALIBRATION_PATHS = 1 << 20  # Monte-Carlo error of a calibrated level: about 0.6 % of it at 0.025
CALIBRATION_SEED = 2026_26
# Why a series stopped (or did not): codes of SeriesOutcomes.reason.
CONTINUE, PASSED, FAILED, FUTILITY, LAST_LOOK, AUDIT = 0, 1, 2, 3, 4, 5
REASONS = {CONTINUE: "continue", PASSED: "faster", FAILED: "slower", FUTILITY: "futility",
           LAST_LOOK: "last look", AUDIT: "audit"}


def spent(t: np.ndarray | float, alpha: float, spending: str = "hsd", gamma: float = 0.0) -> np.ndarray:
    """The cumulative one-sided level a Lan–DeMets spending function allows at information fraction ``t``."""
    x = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if spending == "obf":
        with np.errstate(divide="ignore"):
            return np.where(x > 0, 2 - 2 * ndtr(ndtri(1 - alpha / 2) / np.sqrt(x)), 0.0)
    if spending == "pocock":
        return alpha * np.log1p((math.e - 1) * x)
    if spending == "hsd":
        if gamma == 0:
            return alpha * x
        return alpha * (1 - np.exp(-gamma * x)) / (1 - math.exp(-gamma))
    raise UsageError(f"spending must be one of {', '.join(SPENDING)}, got {spending!r}")


def _check_looks(looks: tuple[int, ...]) -> None:
    if not looks or any(n < 2 for n in looks) or any(b <= a for a, b in itertools.pairwise(looks)):
        raise UsageError(f"looks must be increasing pair counts of at least 2, got {list(looks)}")


@functools.lru_cache(maxsize=128)
def _t_paths(n_max: int, looks: tuple[int, ...], n_paths: int, seed: int) -> np.ndarray:
    """``(n_paths, J)`` of ``-T_j``: the pivotal t sequence of standard normal pairs, read-only."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_paths, len(looks)))
    chunk = 1 << 17
    idx = np.asarray(looks) - 1
    for start in range(0, n_paths, chunk):
        z = rng.standard_normal((min(chunk, n_paths - start), n_max))
        n = np.arange(1, n_max + 1)
        total = np.cumsum(z, axis=1)
        squares = np.cumsum(z * z, axis=1)
        mean = total / n
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.maximum(squares - n * mean**2, 0.0) / (n - 1)
            t = mean / np.sqrt(var / n)
        out[start : start + len(z)] = -t[:, idx]
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=512)
def look_levels(
    looks: tuple[int, ...], level: float, spending: str = "hsd", gamma: float = 0.0, first_decision: int = 0, *,
    n_paths: int = CALIBRATION_PATHS, seed: int = CALIBRATION_SEED,
) -> tuple[float, ...]:
    """The nominal one-sided level of each look's bound, so that over the looks the total is ``level``.

    Parameters
    ----------
    looks
        Pairs at each look, increasing, each at least 2.
    level
        The duration's one-sided level (PASS: ``α/2 / n_candidates``).
    spending, gamma
        The spending function (:func:`spent`).
    first_decision
        Index of the first look at which this bound may decide (earlier
        looks get level 0); the spending counts from that look's fraction.

    Returns
    -------
    tuple of float
        ``p_j``: the bound at look ``j`` is the t bound at one-sided
        ``p_j`` with ``n_j - 1`` degrees of freedom. See the module
        docstring for the calibration.
    """
    _check_looks(looks)
    if not 0 < level < 0.5:
        raise UsageError(f"a one-sided level must lie in (0, 0.5), got {level}")
    n_max = looks[-1]
    cumulative = spent(np.array(looks) / n_max, level, spending, gamma)
    first = float(stdtrit(looks[first_decision] - 1, 1 - cumulative[first_decision]))  # the first deciding look: exact
    crits = crossing_values(_t_paths(n_max, looks, n_paths, seed), cumulative, first_decision, first)
    return tuple(0.0 if j < first_decision else nominal_level(n, c) for j, (n, c) in enumerate(zip(looks, crits,
                                                                                                  strict=True)))


def nominal_level(pairs: int, crit: float) -> float:
    """The one-sided level of a t bound with ``pairs - 1`` degrees of freedom whose critical value is ``crit``."""
    return float(stdtr(pairs - 1, -crit)) if math.isfinite(crit) else (0.0 if crit > 0 else 1.0)


def crossing_values(paths: np.ndarray, cumulative: np.ndarray, first_decision: int = 0,
                    first: float | None = None) -> tuple[float, ...]:
    """Critical values ``c_j`` so that the share of ``paths`` first at or above ``c_j`` at look ``j`` is the
    increment of ``cumulative`` there (:func:`spent`); looks before ``first_decision`` never decide (∞).

    ``paths`` is ``(n_paths, J)`` of a statistic that decides when large
    (``-T_j`` of one series; the largest over a race's candidates,
    :mod:`h3bench.course.race`); ``first`` the first deciding look's value
    where it is known exactly, else it is calibrated like the rest.
    """
    n_paths = len(paths)
    alive = np.ones(n_paths, dtype=bool)
    crossed = 0
    crits: list[float] = []
    for j in range(paths.shape[1]):
        if j < first_decision:
            crits.append(math.inf)
            continue
        if j == first_decision and first is not None:
            crit = first
        else:
            want = round(cumulative[j] * n_paths) - crossed
            candidates = paths[alive, j]
            if want <= 0:
                crit = math.inf
            elif want >= len(candidates):
                crit = -math.inf
            else:
                crit = float(np.partition(candidates, len(candidates) - want)[len(candidates) - want])
        hit = alive & (paths[:, j] >= crit)
        crossed += int(hit.sum())
        alive &= ~hit
        crits.append(crit)
    return tuple(crits)


@dataclass(frozen=True)
class Boundaries:
    """A series' looks at one duration and the nominal levels of each look's bounds."""

    looks: tuple[int, ...]  # AB/BA pairs at each look
    pass_levels: tuple[float, ...]  # one-sided, of the upper bound (0: PASS is not allowed at that look)
    fail_levels: tuple[float, ...]  # one-sided, of the lower bound
    margin: float
    futility_ratio: float | None  # stop when the estimate is at or above it before the last look; None: never
    pass_level: float  # the duration's total, spent over the looks
    fail_level: float
    spending: str = "hsd"
    gamma: float = 0.0
    allowance: float = 0.0  # a step this large inside one pair moves the log ratio by log(1 + it) / pairs at most

    @property
    def max_pairs(self) -> int:
        return self.looks[-1]

    def describe(self) -> str:
        steps = ", ".join(f"{n} pairs: upper {p:.3g}, lower {q:.3g}" for n, p, q in
                          zip(self.looks, self.pass_levels, self.fail_levels, strict=True))
        fut = ("never" if self.futility_ratio is None else
               f"when the estimate is at or above {self.futility_ratio:.4f} before the last look")
        step = (f"; each bound widened by log(1 + {self.allowance:g}) / pairs (a step of {self.allowance:.2%} inside "
                "one pair)" if self.allowance else "")
        return (f"group-sequential AB/BA, {self.spending} alpha spending of one-sided {self.pass_level:.3g} (upper "
                f"bound) and {self.fail_level:.3g} (lower bound) over looks after {list(self.looks)} pairs, "
                f"calibrated on the t sequence; nominal levels per look: {steps}; futility {fut}{step}")


def boundaries(
    looks: Sequence[int], levels: intervals.Levels, margin: float, *, spending: str = "hsd", gamma: float = 0.0,
    futility_ratio: float | str | None = "margin", pass_from: int = 0, allowance: float = 0.0,
) -> Boundaries:
    """The boundaries of one duration of a campaign with ``levels`` (:func:`h3bench.stats.intervals.error_levels`).

    ``futility_ratio`` ``"margin"`` means ``1 - margin``; ``pass_from`` is
    the fewest pairs at which PASS may be declared (a lossless campaign's
    first feasible look, :func:`h3bench.quality.lossless_design.pass_from_pairs`);
    ``allowance`` widens both bounds for a step of that size inside one
    pair (:data:`STEP_ALLOWANCE`).
    """
    found = tuple(int(n) for n in looks)
    _check_looks(found)
    if not 0 <= margin < 1:
        raise UsageError(f"speed margin must be in [0, 1), got {margin}")
    first_pass = next((j for j, n in enumerate(found) if n >= pass_from), None)
    if first_pass is None:
        raise UsageError(f"PASS needs {pass_from} pairs, more than the last look's {found[-1]}")
    futility = 1 - margin if futility_ratio == "margin" else futility_ratio
    if isinstance(futility, str):
        raise UsageError(f"futility_ratio must be a number, None or 'margin', got {futility!r}")
    if not 0 <= allowance < 1:
        raise UsageError(f"a step allowance must be in [0, 1), got {allowance}")
    return Boundaries(found, look_levels(found, levels.pass_level, spending, gamma, first_pass),
                      look_levels(found, levels.fail_level, spending, gamma), margin, futility,
                      levels.pass_level, levels.fail_level, spending, gamma, allowance)


@dataclass(frozen=True)
class SeriesOutcomes:
    """Arrays over the leading axes of a :func:`sequential_outcomes` call."""

    code: np.ndarray  # PASS, FAIL or INCONCLUSIVE (INCONCLUSIVE also while the series continues)
    reason: np.ndarray  # CONTINUE, PASSED, FAILED, FUTILITY, LAST_LOOK or AUDIT
    look: np.ndarray  # index of the deciding (or latest) look; -1 before the first look
    pairs: np.ndarray  # pairs the series ran to reach it (pairs seen when it continues)
    ratio: np.ndarray  # estimate and bounds at that look (NaN before the first)
    lower: np.ndarray
    upper: np.ndarray
    leak: np.ndarray  # judged also without first requests (the first-request rule flagged; False for ratios)
    held: np.ndarray | None = None  # PASS waited at the latest look taken: the audit could not rule out a cache yet


def _bounds(x: np.ndarray, pass_level: float, fail_level: float, allowance: float = 0.0
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`h3bench.stats.intervals.t_bounds` at a look's levels; a level of 0 gives no bound (0 or ∞).

    ``allowance``: a step of that size inside one of the ``k`` pairs moves
    their mean log ratio by at most ``log(1 + allowance) / k``, so each bound
    is moved out by that much.
    """
    ratio, lower, upper, _ = intervals.t_bounds(x, pass_level or 0.25, fail_level or 0.25)
    widen = math.exp(math.log1p(allowance) / x.shape[-1])
    return (ratio, lower / widen if fail_level > 0 else np.zeros_like(lower),
            upper * widen if pass_level > 0 else np.full_like(upper, np.inf))


def look_bounds(log_ratios: np.ndarray, b: Boundaries) -> tuple[np.ndarray, np.ndarray]:
    """``(..., J)`` each: every look's lower and upper bound on the ratio from ``(..., n)`` paired log ratios, at
    the look's nominal levels and step allowance, as :func:`sequential_outcomes` reads them for FAIL and PASS
    (0 or infinite where a level is 0; NaN at a look beyond the ``n`` pairs given)."""
    x = np.asarray(log_ratios, dtype=float)
    lower, upper = (np.full((*x.shape[:-1], len(b.looks)), np.nan) for _ in range(2))
    for j, n in enumerate(b.looks):
        if n <= x.shape[-1]:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                _, lower[..., j], upper[..., j] = _bounds(x[..., :n], b.pass_levels[j], b.fail_levels[j], b.allowance)
    return lower, upper


def sequential_outcomes(
    log_ratios: np.ndarray, b: Boundaries, *, available: np.ndarray | int | None = None,
    audit_fail: np.ndarray | None = None, also: np.ndarray | None = None, also_at: np.ndarray | None = None,
    also_upper_at: np.ndarray | None = None, also_lower_at: np.ndarray | None = None, pass_held: np.ndarray | None = None,
) -> SeriesOutcomes:
    """The decision at every look, vectorised over leading axes.

    Parameters
    ----------
    log_ratios
        ``(..., n)`` paired log ratios in pair order, ``n >= b.max_pairs``
        (unless ``available`` says fewer were observed).
    available
        Pairs observed so far, ``(...)``; looks beyond it are not taken and
        the series continues (reason CONTINUE). Default: all of them.
    audit_fail
        ``(..., J)``: the audit rule's verdict at each look.
    also, also_at
        A second set of log ratios ``(..., n)`` and ``(..., J)`` the looks
        where it must agree: there PASS and FAIL need both sets' bounds to
        clear the margin (the interval is the hull of both), and the
        estimate is the second set's. :func:`judge_series` passes the
        ratios without first requests when the first-request rule flags.
    also_upper_at, also_lower_at
        ``(..., J)``: likewise for one bound only (PASS needs both upper
        bounds below the margin, or FAIL both lower bounds above it), the
        estimate being the second set's: where a first request faster than
        the rest can only bias one way (:func:`h3bench.stats.blockstat.first_request_sides`).
    pass_held
        ``(..., J)``: PASS may not be declared at that look (the audit has
        not ruled out a cache, :func:`h3bench.stats.cache_audit.cache_held`);
        the series continues, or ends INCONCLUSIVE at the last look.
    """
    x = np.asarray(log_ratios, dtype=float)
    n_looks = len(b.looks)
    shape = x.shape[:-1]
    if available is None and x.shape[-1] < b.max_pairs:
        raise UsageError(f"{x.shape[-1]} pairs given, the design's last look needs {b.max_pairs}")
    avail = np.broadcast_to(np.asarray(x.shape[-1] if available is None else available), shape)
    audit = np.zeros((*shape, n_looks), bool) if audit_fail is None else np.broadcast_to(audit_fail, (*shape, n_looks))
    hold = np.zeros((*shape, n_looks), bool) if pass_held is None else np.broadcast_to(pass_held, (*shape, n_looks))
    second = None if also is None else np.broadcast_to(np.asarray(also, dtype=float), x.shape)
    def looks_of(at: np.ndarray | None) -> np.ndarray:
        return (np.zeros((*shape, n_looks), bool) if at is None or second is None
                else np.broadcast_to(at, (*shape, n_looks)))

    upper_at, lower_at = looks_of(also_at) | looks_of(also_upper_at), looks_of(also_at) | looks_of(also_lower_at)
    code = np.full(shape, INCONCLUSIVE, np.int8)
    reason = np.full(shape, CONTINUE, np.int8)
    look = np.full(shape, -1, np.int16)
    pairs = np.minimum(avail, b.max_pairs).astype(np.int16)
    ratio, lower, upper = (np.full(shape, np.nan) for _ in range(3))
    left = np.zeros(shape, bool)
    waited = np.zeros(shape, bool)
    still = np.ones(shape, bool)
    for j, n in enumerate(b.looks):
        take = still & (avail >= n)
        if not take.any():
            break
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            r, lo, hi = _bounds(x[..., :n], b.pass_levels[j], b.fail_levels[j], b.allowance)
            up, low = upper_at[..., j], lower_at[..., j]
            if second is not None and (up | low).any():
                r2, lo2, hi2 = _bounds(second[..., :n], b.pass_levels[j], b.fail_levels[j], b.allowance)
                r, lo, hi = np.where(up | low, r2, r), np.where(low, np.minimum(lo, lo2), lo), np.where(
                    up, np.maximum(hi, hi2), hi)
        ratio, lower, upper = (np.where(take, new, old) for new, old in ((r, ratio), (lo, lower), (hi, upper)))
        left = np.where(take, up | low, left)
        look = np.where(take, j, look).astype(np.int16)
        pairs = np.where(take, n, pairs).astype(np.int16)
        verdict = intervals.outcome_codes(lo, hi, b.margin)
        waited = np.where(take, hold[..., j] & (verdict == PASS), waited)
        verdict = np.where(hold[..., j] & (verdict == PASS), INCONCLUSIVE, verdict)
        futile = r >= b.futility_ratio if b.futility_ratio is not None else np.zeros(shape, bool)
        stop = np.select([audit[..., j], verdict == FAIL, verdict == PASS, np.full(shape, j == n_looks - 1), futile],
                         [AUDIT, FAILED, PASSED, LAST_LOOK, FUTILITY], CONTINUE)
        reason = np.where(take, stop, reason).astype(np.int8)
        code = np.where(take, np.select([stop == PASSED, (stop == FAILED) | (stop == AUDIT)], [PASS, FAIL],
                                        INCONCLUSIVE), code).astype(np.int8)
        still &= ~(take & (stop != CONTINUE))
    return SeriesOutcomes(code, reason, look, pairs, ratio, lower, upper, left, waited)


def series_order(pairs: int) -> str:
    """The AB/BA order of a series of ``pairs`` pairs: ABBA repeated (AB, BA, AB, ...)."""
    return ("ABBA" * (pairs // 2 + 1))[: 2 * pairs]


def judge_series(
    samples: np.ndarray, order: str, budget: BlockBudget, b: Boundaries, *, available: np.ndarray | int | None = None,
    leak_level: float | None = LEAK_LEVEL, cache_ratio: float | None = CACHE_RATIO,
) -> SeriesOutcomes:
    """The series' decisions from its blocks' latencies, vectorised over leading axes.

    Parameters
    ----------
    samples
        ``(..., blocks, measured [+ audit])`` seconds, blocks in ``order``
        (at least ``2 · b.max_pairs`` of them; blocks not run yet may be NaN
        when ``available`` says so).
    order
        The blocks' arms, adjacent AB/BA pairs.
    budget
        What each block measured (:class:`h3bench.stats.blockstat.BlockBudget`).
    available
        Complete pairs so far (``(...)`` or an int); default all.
    leak_level
        Level of the first-request rule (:func:`h3bench.stats.blockstat.first_request_sides`);
        None turns the rule off. Where it flags a slow first request, PASS
        and FAIL must hold with and without each block's first measured
        request (the hull of both intervals; the estimate is the one
        without); a faster one, the bound it can bias (the candidate's: PASS,
        the baseline's: FAIL). Once it flags at a look, every later look does
        the same.
    cache_ratio
        Threshold of the audit rule (:func:`h3bench.stats.cache_audit.cache_flags`);
        None turns it off (so does a budget without audit). Where the audit
        cannot rule out a cache yet, or suspects one with too few blocks to
        FAIL (:func:`h3bench.stats.cache_audit.audit_looks`), PASS waits for a
        later look.

    At each look only the blocks of its pairs are read: the rules at look
    ``j`` see what the runner had seen then.
    """
    x = np.asarray(samples, dtype=float)
    n_blocks = 2 * b.max_pairs
    if len(order) < n_blocks or x.shape[-2] < n_blocks:
        raise UsageError(f"the design's last look needs {n_blocks} blocks; order {order!r}, {x.shape[-2]} blocks")
    x, order = x[..., :n_blocks, :], order[:n_blocks]
    shape = x.shape[:-2]
    n_looks = len(b.looks)
    pass_side = np.zeros((*shape, n_looks), bool)
    fail_side = np.zeros((*shape, n_looks), bool)
    audit = np.zeros((*shape, n_looks), bool)
    held = np.zeros((*shape, n_looks), bool)
    with np.errstate(invalid="ignore"):  # blocks not run yet are NaN; their looks are not taken
        for j, n in enumerate(b.looks):
            seen, part = x[..., : 2 * n, :], order[: 2 * n]
            if leak_level is not None:
                pass_side[..., j], fail_side[..., j] = first_request_sides(seen, part, budget, leak_level)
            if cache_ratio is not None and budget.audit:
                audit[..., j], held[..., j] = audit_looks(seen, part, budget, cache_ratio)
        pass_side, fail_side = (np.logical_or.accumulate(f, axis=-1) for f in (pass_side, fail_side))
        full = intervals.paired_log_ratios(block_log_statistics(x, budget), order)
        rest = (intervals.paired_log_ratios(block_log_statistics(x, budget, True), order)
                if (pass_side | fail_side).any() else None)
    return sequential_outcomes(full, b, available=available, audit_fail=audit, also=rest, also_upper_at=pass_side,
                               also_lower_at=fail_side, pass_held=held)


@dataclass(frozen=True)
class SeriesBlock:
    """One block of a series as the runner has it: its arm, measured seconds in order, audit seconds."""

    role: str  # "A" the series' control, "B" the candidate
    measured: tuple[float, ...]
    audit: float | None = None


@dataclass(frozen=True)
class LookDecision:
    """What to do after the pairs so far: continue, or stop with an outcome, and why."""

    stop: bool
    outcome: Outcome  # INCONCLUSIVE while the series continues
    reason_code: int  # CONTINUE, PASSED, FAILED, FUTILITY, LAST_LOOK or AUDIT
    reason: str
    look: int | None  # 1-based look the decision was taken at (the latest look taken); None before the first
    looks: tuple[int, ...]
    pairs: int  # complete pairs seen
    next_look: int | None  # pairs of the next look when the series continues
    ratio: float | None
    lower: float | None
    upper: float | None
    pass_level: float | None  # nominal one-sided levels of the bounds at that look
    fail_level: float | None
    first_requests_left_out: bool = False  # the first-request rule flagged: hull of with and without them
    notes: tuple[str, ...] = field(default=())

    @property
    def action(self) -> str:
        return "stop" if self.stop else "continue"


def _decision(found: SeriesOutcomes, b: Boundaries, pairs: int, notes: tuple[str, ...]) -> LookDecision:
    reason = int(found.reason.reshape(-1)[0])
    j = int(found.look.reshape(-1)[0])
    r, lo, hi = (float(v.reshape(-1)[0]) for v in (found.ratio, found.lower, found.upper))
    left = bool(found.leak.reshape(-1)[0])
    n_looks = len(b.looks)
    stop = reason != CONTINUE
    next_look = None if stop else next((n for n in b.looks if n > pairs), None)
    m = b.margin
    if j < 0:
        text = f"before the first look: {pairs} complete pair(s), the first look is after {b.looks[0]}"
        return LookDecision(False, Outcome.INCONCLUSIVE, CONTINUE, text, None, b.looks, pairs, b.looks[0], None,
                            None, None, None, None, False, notes)
    at = f"look {j + 1} of {n_looks} ({b.looks[j]} pairs)"
    interval = (f"geometric mean ratio {r:.4f}, repeated bounds [{lo:.4f}, {hi:.4f}] (one-sided nominal "
                f"{b.fail_levels[j]:.3g} and {b.pass_levels[j]:.3g})")
    skipped = f"; the planned blocks after {b.looks[j]} pairs ({2 * (b.max_pairs - b.looks[j])}) are not run"
    if reason == PASSED:
        text = f"candidate faster at {at}: {interval}; the upper bound lies below 1 - margin = {1 - m:.4f}{skipped}"
    elif reason == FAILED:
        text = f"candidate slower at {at}: {interval}; the lower bound lies above 1 + margin = {1 + m:.4f}{skipped}"
    elif reason == AUDIT:
        text = f"anti-shortcut audit failed at {at} (a cache of repeated requests is suspected): {interval}{skipped}"
    elif reason == FUTILITY:
        text = (f"futility at {at}: the estimate {r:.4f} is at or above {b.futility_ratio:.4f}, so PASS is out of "
                f"reach; {interval}{skipped}")
    elif reason == LAST_LOOK:
        text = (f"{at}, the last: {interval}; neither the upper bound below 1 - margin = {1 - m:.4f} nor the lower "
                f"bound above 1 + margin = {1 + m:.4f}")
    else:
        pass_note = "" if b.pass_levels[j] > 0 else " (PASS is not allowed at this look)"
        text = f"{at}: {interval}{pass_note}; continue to {next_look} pairs"
    if found.held is not None and bool(found.held.reshape(-1)[0]):
        text += ("; PASS waits: the audit cannot rule out a cache yet (with few blocks per arm a slow request can "
                 "hide one, two can imitate one)")
    if left:
        text += ("; the first-request rule flagged first measured requests slower (a warmup leak) or faster (a cold "
                 "card) than the block's others, so each bound they can bias is the outer of those with and without "
                 "each block's first measured request, and the estimate is without them")
    outcome = {PASS: Outcome.PASS, FAIL: Outcome.FAIL}.get(int(found.code.reshape(-1)[0]), Outcome.INCONCLUSIVE)
    return LookDecision(stop, outcome, reason, text, j + 1, b.looks, pairs, next_look, r, lo, hi,
                        b.pass_levels[j], b.fail_levels[j], left, notes)


def decide(blocks: Sequence[SeriesBlock], b: Boundaries, budget: BlockBudget, *,
           leak_level: float | None = LEAK_LEVEL, cache_ratio: float | None = CACHE_RATIO) -> LookDecision:
    """The live decision for one series at one duration, from its blocks so far in schedule order.

    The same computation as :func:`judge_series` (which it calls on one
    row): only complete AB/BA pairs count, a trailing half pair waits.
    """
    pairs = min(len(blocks) // 2, b.max_pairs)
    used = list(blocks[: 2 * pairs])
    order = "".join(block.role for block in used)
    if not intervals.is_paired_order(order):
        raise UsageError(f"blocks {order!r} are not adjacent AB/BA pairs")
    for block in used:
        if len(block.measured) != budget.measured or (budget.audit and block.audit is None):
            raise UsageError(f"a {block.role} block has {len(block.measured)} measured request(s)"
                             f"{'' if block.audit is not None else ' and no audit'}; the budget is {budget.describe()}")
    full_order = order + series_order(b.max_pairs)[2 * pairs :]
    samples = np.full((1, 2 * b.max_pairs, budget.columns), np.nan)
    for i, block in enumerate(used):
        samples[0, i] = [*block.measured, *([block.audit] if budget.audit else [])]
    found = judge_series(samples, full_order, budget, b, available=np.array([pairs]), leak_level=leak_level,
                         cache_ratio=cache_ratio)
    notes: list[str] = []
    if pairs and budget.audit and cache_ratio is not None:
        from h3bench.stats.cache_audit import cache_audit

        notes.append(cache_audit([(blk.role, blk.measured, float(blk.audit or 0)) for blk in used], budget,
                                 cache_ratio).describe())
    return _decision(found, b, pairs, tuple(notes))
