"""The speed comparison's arithmetic, vectorised over leading axes: bounds, outcomes, error levels, MDE.

:mod:`h3bench.stats.speed` applies these functions to one campaign; the
simulation tests (tests_unit/stats/test_error_rates.py) apply the same functions
to arrays of thousands of simulated campaigns, so every error rate that a
verdict implies is measured on the code that decides it.

Outcomes (codes ``PASS = 1``, ``FAIL = -1``, ``INCONCLUSIVE = 0``)
------------------------------------------------------------------
Per duration: PASS ("faster") when the upper bound lies below
``1 - margin``; FAIL ("slower") when the lower bound lies above
``1 + margin``; INCONCLUSIVE between the margins. A candidate's speed PASS
needs PASS at every duration; one FAIL makes it FAIL (:func:`combine_codes`).

Error levels (:func:`error_levels`)
-----------------------------------
PASS at every duration is an intersection-union test (Berger 1982): it needs
no correction across durations, only across candidates, so the upper bound
is one-sided at ``α/2 / n_candidates``. FAIL needs only one duration (a
union), so the lower bound is one-sided at ``α/2 / (n_durations ·
n_candidates)``. Campaign-wide, false "faster" claims are at most α/2 = 2.5 %
and so are false "slower" claims. Plain Bonferroni on both bounds would cost
about a third of the power at a 10 % speedup (simulated: about 54 % instead
of 80 % with 2 % process noise, tests_unit/stats/test_error_rates.py).

Minimum detectable effect (:func:`mde_ratio`)
---------------------------------------------
The true ratio that is called PASS with 80 % power, margin included:
``(1 - margin) · exp(-δ · se)``, where δ solves ``P(t'_df(δ) > t_{1-level,
df}) = 0.80`` for the noncentral t. That is exact for normal log ratios
with standard error ``se``; the usual ``t_{1-level} + t_{0.80}`` shortcut
ignores that the interval uses the random s, and gives about 78 % power at
k = 4 (tests_unit/stats/test_error_rates.py).

Permutation floor (:func:`permutation_floor_note`)
--------------------------------------------------
With k paired ratios the smallest one-sided sign-flip p is ``1/2^k``; when
it exceeds the level used, no distribution-free test of these pairs could
reach it, and a t-based verdict rests on the t model (normal log ratios).
That is k < 6 at 2.5 %, k < 7 at 1.25 %.

References
----------
R. L. Berger, "Multiparameter hypothesis testing and acceptance sampling",
Technometrics 24 (1982) 295-300. T. Kalibera and R. Jones, "Rigorous
Benchmarking in Reasonable Time", ISMM 2013.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.special import nctdtr, stdtrit  # without scipy.stats' import cost

__all__ = [
    "ALPHA",
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "AnchoredBounds",
    "Levels",
    "anchored_bounds",
    "combine_codes",
    "error_levels",
    "geometric_mean",
    "geometric_mean_of_logs",
    "is_paired_order",
    "mde_ratio",
    "noncentrality",
    "outcome_codes",
    "paired_log_ratios",
    "permutation_floor_note",
    "t_bounds",
    "two_sample_bounds",
]

PASS, FAIL, INCONCLUSIVE = 1, -1, 0
ALPHA = 0.05  # campaign-wide: at most α/2 false "faster" and α/2 false "slower" claims
POWER = 0.80
ANCHORED_OK, NO_ANCHORS, TOO_FEW_BLOCKS, SHIFT_EXCEEDS_EFFECT = 0, 1, 2, 3  # reasons of anchored_bounds


@dataclass(frozen=True)
class Levels:
    """One-sided error levels of each duration's bounds in a campaign of ``n_durations × n_candidates``."""

    pass_level: float  # of the upper bound, which decides "faster"
    fail_level: float  # of the lower bound, which decides "slower"
    n_durations: int
    n_candidates: int
    alpha: float = ALPHA

    def describe(self) -> str:
        return (f"upper bound one-sided {self.pass_level:.3g} (α/2 over {self.n_candidates} candidate(s); PASS needs "
                f"every duration), lower bound one-sided {self.fail_level:.3g} (α/2 over {self.n_durations} "
                f"duration(s) × {self.n_candidates} candidate(s)): campaign-wide, false \"faster\" and false "
                f"\"slower\" claims are each at most {self.alpha / 2:.3g}")


def error_levels(n_durations: int, n_candidates: int, alpha: float = ALPHA) -> Levels:
    """Intersection-union over durations for PASS, Bonferroni for the rest; see the module docstring."""
    if n_durations < 1 or n_candidates < 1:
        raise ValueError("a campaign has at least one duration and one candidate")
    return Levels(alpha / 2 / n_candidates, alpha / 2 / (n_durations * n_candidates), n_durations, n_candidates,
                  alpha)


def geometric_mean_of_logs(logs: Iterable[float] | np.ndarray) -> float:
    """``exp(mean(logs))``: the geometric mean of the values whose logs these are; NaN for none.

    The one geometric mean of the project (:func:`geometric_mean` too): a ratio
    of paired runs, a host's ratio, a history's level all read it from here.
    """
    x = np.asarray(logs if isinstance(logs, np.ndarray) else list(logs), dtype=float)
    return math.exp(float(x.mean())) if x.size else math.nan


def geometric_mean(values: Iterable[float] | np.ndarray) -> float:
    """``exp(mean(log values))`` of positive values; NaN for none."""
    return geometric_mean_of_logs(np.log(np.asarray(values if isinstance(values, np.ndarray) else list(values),
                                                    dtype=float)))


def is_paired_order(order: str) -> bool:
    """Whether an order is made of adjacent AB/BA pairs."""
    return len(order) % 2 == 0 and all(order[i : i + 2] in ("AB", "BA") for i in range(0, len(order), 2))


def paired_log_ratios(log_medians: np.ndarray, order: str) -> np.ndarray:
    """``log median(B) - log median(A)`` of each adjacent pair: ``(..., n_blocks) -> (..., n_pairs)``."""
    if not is_paired_order(order):
        raise ValueError(f"order {order!r} is not made of adjacent AB/BA pairs")
    x = np.asarray(log_medians, dtype=float)
    a = np.array([i + (order[i] == "B") for i in range(0, len(order), 2)])
    b = np.array([i + (order[i] == "A") for i in range(0, len(order), 2)])
    return x[..., b] - x[..., a]


def _bounds(center: np.ndarray, se: np.ndarray, df: int, pass_level: float, fail_level: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    upper = np.exp(center + float(stdtrit(df, 1 - pass_level)) * se)
    lower = np.exp(center - float(stdtrit(df, 1 - fail_level)) * se)
    return np.exp(center), lower, upper


def t_bounds(log_ratios: np.ndarray, pass_level: float, fail_level: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Geometric-mean ratio, lower and upper bound, and the standard error, from ``(..., k)`` paired log ratios.

    ``upper = exp(mean + t_{1-pass_level,k-1} s/√k)``, ``lower = exp(mean -
    t_{1-fail_level,k-1} s/√k)``; with equal levels the usual two-sided
    interval at ``1 - 2 level``. Needs k ≥ 2.
    """
    x = np.asarray(log_ratios, dtype=float)
    k = x.shape[-1]
    if k < 2:
        raise ValueError("a t interval needs at least two paired ratios")
    se = x.std(axis=-1, ddof=1) / math.sqrt(k)
    ratio, lower, upper = _bounds(x.mean(axis=-1), se, k - 1, pass_level, fail_level)
    return ratio, lower, upper, se


def two_sample_bounds(log_anchors: np.ndarray, log_candidates: np.ndarray, pass_level: float, fail_level: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Like :func:`t_bounds` for ``exp(mean log candidates - mean log anchors)``, pooled-variance t.

    Both arms ran interleaved on one host, so a common variance is the A/A
    truth; a Welch interval with two anchors would have about one degree of
    freedom. Needs ``n_anchors + n_candidates ≥ 3``.
    """
    a, c = np.asarray(log_anchors, dtype=float), np.asarray(log_candidates, dtype=float)
    na, nc = a.shape[-1], c.shape[-1]
    df = na + nc - 2
    if na < 1 or nc < 1 or df < 1:
        raise ValueError("a two-sample interval needs one block per arm and three in all")
    ss = ((a - a.mean(-1, keepdims=True)) ** 2).sum(-1) + ((c - c.mean(-1, keepdims=True)) ** 2).sum(-1)
    se = np.sqrt(ss / df * (1 / na + 1 / nc))
    ratio, lower, upper = _bounds(c.mean(-1) - a.mean(-1), se, df, pass_level, fail_level)
    return ratio, lower, upper, se


def outcome_codes(lower: np.ndarray | float, upper: np.ndarray | float, margin: float) -> np.ndarray:
    """PASS if ``upper < 1 - margin``, FAIL if ``lower > 1 + margin``, else INCONCLUSIVE."""
    low, high = np.asarray(lower), np.asarray(upper)
    return np.where(high < 1 - margin, PASS, np.where(low > 1 + margin, FAIL, INCONCLUSIVE)).astype(np.int8)


def combine_codes(codes: np.ndarray) -> np.ndarray:
    """Over the last axis (durations): PASS iff all PASS, FAIL iff any FAIL (as :func:`h3bench.outcome.combine`)."""
    codes = np.asarray(codes)
    return np.where((codes == FAIL).any(-1), FAIL, np.where((codes == PASS).all(-1), PASS, INCONCLUSIVE)).astype(
        np.int8)


@functools.lru_cache(maxsize=256)
def noncentrality(df: int, level: float, power: float = POWER) -> float:
    """δ with ``P(t'_df(δ) > t_{1-level, df}) = power`` (bisection on the noncentral t CDF)."""
    t_crit = float(stdtrit(df, 1 - level))
    low, high = 0.0, 100.0
    for _ in range(80):
        mid = (low + high) / 2
        if 1 - float(nctdtr(df, mid, t_crit)) < power:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def mde_ratio(se: float | np.ndarray, df: int, margin: float, level: float, power: float = POWER
              ) -> float | np.ndarray:
    """The true ratio called PASS with probability ``power``, margin included: ``(1 - margin) exp(-δ se)``."""
    return (1 - margin) * np.exp(-noncentrality(df, level, power) * np.asarray(se))


def permutation_floor_note(floor: float, level: float, what: str, df: int) -> str | None:
    """Text for a t-based verdict whose level no distribution-free test of the same data could reach.

    ``floor`` is the smallest one-sided permutation p (``1/2^k`` for k sign
    flips, ``1/C(n, n_anchors)`` for relabelled blocks), ``what`` says where
    it comes from; None when ``floor <= level``.
    """
    if floor <= level:
        return None
    return (f"{what}: the smallest permutation p is {floor:.3g} one-sided, above the level used ({level:.3g}): no "
            f"distribution-free test of these blocks could reach it, so this verdict rests on the t model (normal "
            f"log ratios, {df} degrees of freedom)")


@dataclass(frozen=True)
class AnchoredBounds:
    """A candidate-only run's comparison with today's anchors, over leading axes; see :func:`anchored_bounds`."""

    ratio: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    se: np.ndarray
    df: int
    floor: float  # the smallest one-sided permutation p of the design
    paired: bool
    shift: np.ndarray  # today's anchors over the stored baseline (geometric means); NaN without one
    outcome: np.ndarray
    reason: np.ndarray  # ANCHORED_OK, NO_ANCHORS, TOO_FEW_BLOCKS or SHIFT_EXCEEDS_EFFECT


def anchored_bounds(order: str, log_medians: np.ndarray, log_stored: np.ndarray | None, margin: float,
                    pass_level: float, fail_level: float) -> AnchoredBounds:
    """The candidate (``B``) against today's anchors (``A``) in ``order``; the stored baseline gives the shift.

    Parameters
    ----------
    order
        Today's blocks, such as ``BABBAB``.
    log_medians
        ``(..., len(order))`` log block medians in that order.
    log_stored
        ``(..., n_stored)`` log block medians of the stored bundle's
        baseline, or None.

    Notes
    -----
    Paired AB/BA ratios when ``order`` is made of AB/BA pairs, otherwise
    :func:`two_sample_bounds`. The outcome is at most INCONCLUSIVE without
    anchors, and when ``|log shift| > |log ratio|``: the anchors show the
    baseline moved by more than the estimated effect.
    """
    x = np.asarray(log_medians, dtype=float)
    roles = np.array([letter == "B" for letter in order])
    batch = x.shape[:-1]
    nan = np.full(batch, np.nan)
    paired = is_paired_order(order)
    n_anchors = int((~roles).sum())
    df = len(order) // 2 - 1 if paired else len(order) - 2
    floor = 1 / 2 ** (len(order) // 2) if paired else 1 / math.comb(len(order), n_anchors)
    if n_anchors == 0 or df < 1:
        why = NO_ANCHORS if n_anchors == 0 else TOO_FEW_BLOCKS
        return AnchoredBounds(nan, nan, nan, nan, max(df, 0), floor, paired, nan,
                              np.full(batch, INCONCLUSIVE, np.int8), np.full(batch, why, np.int8))
    if paired:
        ratio, lower, upper, se = t_bounds(paired_log_ratios(x, order), pass_level, fail_level)
    else:
        ratio, lower, upper, se = two_sample_bounds(x[..., ~roles], x[..., roles], pass_level, fail_level)
    outcome: np.ndarray = outcome_codes(lower, upper, margin)
    reason: np.ndarray = np.full(batch, ANCHORED_OK, np.int8)
    shift = nan
    if log_stored is not None and np.shape(log_stored)[-1]:
        log_shift = x[..., ~roles].mean(-1) - np.asarray(log_stored, dtype=float).mean(-1)
        shift = np.exp(log_shift)
        too_big = (np.abs(log_shift) > np.abs(np.log(ratio))) & (outcome != INCONCLUSIVE)
        reason = np.where(too_big, SHIFT_EXCEEDS_EFFECT, reason).astype(np.int8)
        outcome = np.where(too_big, INCONCLUSIVE, outcome).astype(np.int8)
    return AnchoredBounds(ratio, lower, upper, se, df, floor, paired, shift, outcome, reason)
