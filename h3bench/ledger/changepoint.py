"""Step changes in a series of campaign medians: proposed by a penalized fit, flagged only by an interval.

The method
----------
It follows the model of asv's step detection (asv's ``step_detect.py``): the
series is piecewise constant plus noise of constant amplitude, and the steps
are the breakpoints of the best piecewise-constant fit, with the number of
pieces chosen by a Schwarz (Bayesian) information criterion, after
Friedrich et al. (2008) and Yao (1988). Written for this project, it differs
in three ways:

1. **Scale.** Latency steps are relative, so the fit is made to the logs of
   the per-campaign medians ``y_i = log(median_i)``; a step of +8 % is
   ``log 1.08`` wherever the level is.
2. **Exact fit.** A series of campaigns is short (tens to hundreds), so the
   best fit with ``p`` pieces, each of at least ``min_size`` campaigns, is
   found exactly by dynamic programming (O(p·n²)), for every ``p`` up to
   ``n // min_size``, minimizing the L1 cost ``S_p = Σ_r Σ_i |y_i − median_r|``
   (Laplace noise, robust to a single odd campaign). The number of pieces
   minimizes ``n · ln(σ₀ + S_p / n) + β · p · ln n``, with the floor
   ``σ₀`` = :data:`SIGMA_FLOOR` (0.01 %) for series that fit exactly. Like
   asv, which fudges the Schwarz factor, ``β`` (:data:`BETA` = 3) is set
   by what works: with ``β`` = 1 a third of stationary series of 12 to 20
   campaigns got a flagged step, because the interval below is computed on
   pieces that the fit chose; with 3, about 1 % do, and an 8 % step in
   noise of 2 % per campaign is still found in about 95 % of series of 12.
3. **The flag is an interval, not the fit.** A proposed step is flagged
   only when the Welch (unequal variances) t interval for the difference of
   the mean log median after it and before it (the fitted pieces on either
   side; one value per campaign) excludes zero, i.e. the ratio interval
   excludes 1. The campaign is the unit of replication, as the block is in
   :mod:`h3bench.stats.speed`: requests of one campaign share its servers, host
   and day, so pooling them would claim a precision the history does not
   have. A step therefore needs ``min_size`` = 2 campaigns on each side,
   and a step in the last campaign is shown but cannot be flagged yet.

The false-flag rate on pure noise (series of stationary campaigns) is
measured by simulation in ``tests_unit/ledger/test_changepoint.py`` through
:func:`detect_steps`, and bounded there.

A regression is a flagged step up (slower). It **persists** from its first
campaign until a flagged step down, or to the end of the series (ongoing).

References
----------
F. Friedrich et al., "Complexity Penalized M-Estimation: Fast Computation",
J. Comput. Graph. Stat. 17(1), 201-224 (2008), doi:10.1198/106186008X285591.
Y.-C. Yao, "Estimating the number of change-points via Schwarz' criterion",
Stat. Probab. Lett. 6, 181-189 (1988), doi:10.1016/0167-7152(88)90118-6.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

from h3bench.errors import UsageError
from h3bench.stats.intervals import geometric_mean

__all__ = ["BETA", "SIGMA_FLOOR", "Step", "StepReport", "detect_steps", "segment", "welch_log_ratio"]

BETA = 3.0  # see the module docstring: chosen by the simulation in tests_unit/ledger/test_changepoint.py
SIGMA_FLOOR = 1e-4
MIN_SIZE = 2


@dataclass(frozen=True)
class Step:
    """A proposed step between the campaigns ``index - 1`` and ``index`` (0-based), with its interval."""

    index: int  # the first campaign after the step
    before: float  # geometric mean of the piece before, in the series' units
    after: float
    ratio: float  # after / before
    ci_low: float | None
    ci_high: float | None
    confidence: float
    flagged: bool  # the interval excludes 1
    persisted: int  # flagged regressions: campaigns from index until a flagged step down, or the end
    ongoing: bool  # flagged regressions that last to the end of the series
    why: str

    @property
    def regression(self) -> bool:
        return self.flagged and self.ratio > 1


@dataclass(frozen=True)
class StepReport:
    """The fitted pieces (``[start, end)``) of a series and the step between each two."""

    n: int
    pieces: tuple[tuple[int, int], ...]
    steps: tuple[Step, ...]

    @property
    def flagged(self) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if step.flagged)


def _l1_costs(y: np.ndarray) -> np.ndarray:
    """cost[i, j]: Σ |y_k − median(y_i..y_{j-1})| for every piece [i, j)."""
    n = len(y)
    cost = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        for j in range(i + 1, n + 1):
            piece = y[i:j]
            cost[i, j] = float(np.abs(piece - np.median(piece)).sum())
    return cost


def segment(values: Sequence[float], *, min_size: int = MIN_SIZE, beta: float = BETA) -> tuple[tuple[int, int], ...]:
    """The best piecewise-constant fit of ``log(values)``: its pieces ``[start, end)``; see the module docstring."""
    y = np.log(np.asarray(values, dtype=float))
    n = len(y)
    if n == 0:
        return ()
    cost = _l1_costs(y)
    best_pieces: tuple[tuple[int, int], ...] = ((0, n),)
    best_score = math.inf
    # total[j]: cheapest cost of y[:j] in p pieces; start[p][j]: where its last piece starts.
    total = np.where(np.arange(n + 1) >= min_size, cost[0], np.inf)
    start: list[np.ndarray] = [np.zeros(n + 1, dtype=int)]
    for p in range(1, max(1, n // min_size) + 1):
        if p > 1:
            new_total, new_start = np.full(n + 1, np.inf), np.zeros(n + 1, dtype=int)
            for j in range(p * min_size, n + 1):
                candidates = total[: j - min_size + 1] + cost[: j - min_size + 1, j]
                new_start[j] = int(np.argmin(candidates))
                new_total[j] = candidates[new_start[j]]
            total = new_total
            start.append(new_start)
        if not math.isfinite(total[n]):
            break
        score = n * math.log(SIGMA_FLOOR + total[n] / n) + beta * p * math.log(n)
        if score < best_score:
            best_score, best_pieces = score, _backtrack(start, p, n)
    return best_pieces


def _backtrack(start: list[np.ndarray], p: int, n: int) -> tuple[tuple[int, int], ...]:
    pieces, end = [], n
    for level in range(p - 1, -1, -1):
        begin = int(start[level][end]) if level else 0
        pieces.append((begin, end))
        end = begin
    return tuple(reversed(pieces))


def welch_log_ratio(before: Sequence[float], after: Sequence[float],
                    confidence: float = 0.95) -> tuple[float, float | None, float | None]:
    """Ratio of geometric means ``after / before`` with the Welch t interval on the logs (None with n < 2 a side)."""
    a, b = np.log(np.asarray(before, dtype=float)), np.log(np.asarray(after, dtype=float))
    diff = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return math.exp(diff), None, None
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stdtrit(df, 1 - (1 - confidence) / 2)) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def detect_steps(values: Sequence[float], *, confidence: float = 0.95, min_size: int = MIN_SIZE) -> StepReport:
    """Propose steps by :func:`segment`, flag those whose Welch interval excludes no change, and say how long each lasted."""
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise UsageError(f"a history needs positive, finite medians, got {list(values)}")
    pieces = segment(values, min_size=min_size)
    raw = []
    for (a0, a1), (b0, b1) in itertools.pairwise(pieces):
        ratio, low, high = welch_log_ratio(values[a0:a1], values[b0:b1], confidence)
        flagged = low is not None and high is not None and (low > 1 or high < 1)
        raw.append((b0, geometric_mean(values[a0:a1]), geometric_mean(values[b0:b1]), ratio, low, high, flagged))
    steps = []
    for number, (index, before, after, ratio, low, high, flagged) in enumerate(raw):
        recovery = next((r[0] for r in raw[number + 1:] if r[6] and r[3] < 1), None) if flagged and ratio > 1 else None
        persisted = ((recovery if recovery is not None else len(values)) - index) if flagged and ratio > 1 else 0
        interval = "no interval" if low is None else f"{confidence:.0%} Welch CI [{low:.4f}, {high:.4f}]"
        why = (f"ratio {ratio:.4f}, {interval}: " + ("excludes 1" if flagged else "includes 1 (not flagged)"))
        steps.append(Step(index, before, after, ratio, low, high, confidence, flagged, persisted,
                          flagged and ratio > 1 and recovery is None, why))
    return StepReport(len(values), pieces, tuple(steps))
