"""The race: several candidates against one baseline in shared rounds, each judged after every look, the family's error held.

Schedule
--------
A round runs each candidate still in the race once, and baseline
**anchors** around them: one anchor, then every :data:`ANCHOR_EVERY`
candidates another (``A c c A c c A c c A`` for six: 10 blocks where six
AB/BA pairs run 12, four baseline blocks where they run six). Rounds do not
share an anchor: contrasts of one candidate in two rounds that shared one
would be correlated (a lone candidate's by 1/6), which a spread estimated
from its contrasts does not see, and a race whose field shrinks would get
ever more of it: at the intersection-union worst case of six candidates
(:mod:`h3bench.course.racesim`) shared anchors gave 2.84 % false "faster"
against 2.40 % without (20 000 races, seed 11, 1 % process noise). Every candidate
block stands next to an anchor, and its **contrast** is its block statistic
minus the straight line through its two neighbouring anchors at its slot
(:func:`round_weights`): a drift that is linear over the round cancels
exactly for every candidate, wherever it stands. Odd rounds are the mirror
of the even round before them, and the candidates' order turns by one every
two rounds (:func:`race_round`), so no candidate always goes first or always
stands on the same side of an anchor. A contrast has variance 14/9 of a
block's (one of two candidates between anchors) or 3/2 (alone between
anchors) against 2 of an AB/BA pair's difference; contrasts of candidates
that share an anchor are correlated, which the critical values know.

Decisions
---------
After the rounds of each look, every candidate still running is judged on
its mean contrast so far, with a standard error from the spread pooled over
every candidate's contrasts (:func:`pooled_se`: the blocks of one host
share one noise, Dunnett's common variance, so a race judges on many more
degrees of freedom than one series' ``pairs - 1``). Its bounds are the mean
plus or minus a **critical value for the correlated contrasts** (Dunnett's
many-to-one comparisons, here group-sequential): the largest of ``m``
candidates' t statistics under the margin is simulated through this
module's own schedule and contrasts (:func:`race_paths`; the statistic is
pivotal: its law is free of the noise's scale), and the level is spent over
the looks exactly as one series' is
(:func:`h3bench.stats.sequential.crossing_values`). Where candidates left
before a look, the pooled spread has fewer degrees of freedom than
calibrated, and the value moves to the same one-sided t level at the
degrees of freedom it has.

PASS steps down (Holm): a candidate that PASSes leaves the family, and the
rest are judged at the critical values of one fewer candidate, at the same
look and later (a closed test whose intersections are these max-t tests).
Futility (the estimate at or above ``1 - margin`` before the last look) and
FAIL only take candidates out of the race and never lower the others'
critical values: the PASS values are calibrated as if those candidates could
still cross (non-binding). FAIL uses the critical values of the whole field
at the lower-bound level.

The plan's simulation (:mod:`h3bench.course.racesim`) walks whole races
through :func:`race_round`, :func:`race_contrasts` and :func:`decide_look`;
the live run does not run a race yet.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr, stdtrit

from h3bench.stats import intervals
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from h3bench.stats.sequential import (
    CALIBRATION_SEED,
    CONTINUE,
    FAILED,
    FUTILITY,
    LAST_LOOK,
    PASSED,
    crossing_values,
    spent,
)

__all__ = [
    "ANCHOR",
    "ANCHOR_EVERY",
    "RACE_PATHS",
    "LookState",
    "RaceBoundaries",
    "decide_look",
    "pass_statistics",
    "pooled_se",
    "race_boundaries",
    "race_contrasts",
    "race_paths",
    "race_round",
    "round_weights",
]

ANCHOR = -1  # a slot of a round that runs the baseline
ANCHOR_EVERY = 2  # candidates between two anchors: each candidate block stands next to one
RACE_PATHS = 1 << 18  # calibration paths per field size: Monte-Carlo error about 1.2 % of a level of 0.025


def race_round(active: Sequence[int], round_index: int) -> tuple[int, ...]:
    """The slots of round ``round_index`` (0-based) among the candidates ``active``: :data:`ANCHOR` or a candidate.

    The candidates turn by one every two rounds, and odd rounds mirror the
    even one before them.
    """
    field = list(active)
    turn = (round_index // 2) % len(field) if field else 0
    field = field[turn:] + field[:turn]
    slots = [ANCHOR]
    for start in range(0, len(field), ANCHOR_EVERY):
        slots += [*field[start:start + ANCHOR_EVERY], ANCHOR]
    return tuple(reversed(slots)) if round_index % 2 else tuple(slots)


@functools.lru_cache(maxsize=1024)
def round_weights(slots: tuple[int, ...]) -> tuple[tuple[int, ...], np.ndarray]:
    """The candidates of a round (slot order) and ``(candidates, slots)`` weights of their contrasts.

    A candidate's weights are 1 at its slot and minus the straight line
    through its neighbouring anchors (``(R - p) / (R - L)`` at ``L``, ``(p - L) /
    (R - L)`` at ``R``): a statistic linear in the slot gives 0.
    """
    anchors = [i for i, s in enumerate(slots) if s == ANCHOR]
    if not anchors or anchors[0] != 0 or anchors[-1] != len(slots) - 1:
        raise ValueError(f"a round begins and ends with an anchor, got {slots}")
    where = [i for i, s in enumerate(slots) if s != ANCHOR]
    w = np.zeros((len(where), len(slots)))
    for row, p in enumerate(where):
        left = max(a for a in anchors if a < p)
        right = min(a for a in anchors if a > p)
        w[row, p] = 1.0
        w[row, left] = -(right - p) / (right - left)
        w[row, right] = -(p - left) / (right - left)
    w.setflags(write=False)
    return tuple(slots[p] for p in where), w


def race_contrasts(log_stats: np.ndarray, slots: tuple[int, ...], n_candidates: int) -> np.ndarray:
    """``(..., n_candidates)`` contrasts of one round from its ``(..., slots)`` block log statistics; NaN for a
    candidate not in the round."""
    who, w = round_weights(slots)
    x = np.asarray(log_stats, dtype=float)
    out = np.full((*x.shape[:-1], n_candidates), np.nan)
    out[..., list(who)] = x @ w.T
    return out


@functools.lru_cache(maxsize=64)
def race_paths(m: int, looks: tuple[int, ...], n_paths: int = RACE_PATHS, seed: int = CALIBRATION_SEED
               ) -> np.ndarray:
    """``(n_paths, J)``: the largest over ``m`` candidates of ``-T_j`` (the PASS side's t statistic) at each look.

    Standard normal block statistics run through :func:`race_round` and
    :func:`race_contrasts` with all ``m`` candidates in every round, as a
    race where none leaves; read-only.
    """
    rng = np.random.default_rng(seed + m)
    n_max = looks[-1]
    out = np.empty((n_paths, len(looks)))
    chunk = 1 << 15
    field = tuple(range(m))
    for start in range(0, n_paths, chunk):
        size = min(chunk, n_paths - start)
        x = np.empty((size, m, n_max))
        for r in range(n_max):
            slots = race_round(field, r)
            x[:, :, r] = race_contrasts(rng.standard_normal((size, len(slots))), slots, m)
        for j, n in enumerate(looks):
            out[start:start + size, j] = pass_statistics(x[:, :, :n]).max(-1)
    out.setflags(write=False)
    return out


def pooled_se(contrasts: np.ndarray) -> np.ndarray:
    """``(..., candidates)`` standard errors of each candidate's mean contrast from the pooled spread.

    ``contrasts`` are ``(..., candidates, rounds)``, NaN where a candidate
    did not run; the spread is pooled over every candidate's rounds (the
    blocks of one host share one noise: Dunnett's common variance), with
    ``sum(rounds - 1)`` degrees of freedom, so a race judges on far more
    than one series' ``pairs - 1``.
    """
    x = np.asarray(contrasts, dtype=float)
    ran = np.isfinite(x).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        squares = np.nansum((x - np.nanmean(x, -1, keepdims=True)) ** 2, -1)
        var = squares.sum(-1) / np.maximum(ran - 1, 0).sum(-1)
        return np.sqrt(var[..., None] / ran)


def pass_statistics(contrasts: np.ndarray, margin_log: float = 0.0) -> np.ndarray:
    """``(..., candidates)`` ``-T``: how far below ``margin_log`` each mean contrast lies, in pooled standard errors."""
    x = np.asarray(contrasts, dtype=float)
    with np.errstate(invalid="ignore"):
        return -(np.nanmean(x, -1) - margin_log) / pooled_se(x)


@dataclass(frozen=True)
class RaceBoundaries:
    """One duration's looks (rounds) and the critical value of each bound at each look.

    ``pass_crits[m - 1][j]`` is the upper bound's at look ``j`` while ``m``
    candidates have not PASSed (the step-down); ``fail_crits[j]`` the lower
    bound's for the whole field. A bound is the mean contrast plus (minus)
    the critical value times the pooled standard error (:func:`pooled_se`).
    """

    looks: tuple[int, ...]
    pass_crits: tuple[tuple[float, ...], ...]
    fail_crits: tuple[float, ...]
    margin: float
    futility_ratio: float | None
    pass_level: float
    fail_level: float

    @property
    def max_rounds(self) -> int:
        return self.looks[-1]

    @property
    def n_candidates(self) -> int:
        return len(self.pass_crits)


@functools.lru_cache(maxsize=64)
def _levels(m: int, looks: tuple[int, ...], level: float, spending: str, gamma: float, n_paths: int
            ) -> tuple[float, ...]:
    cumulative = spent(np.array(looks) / looks[-1], level, spending, gamma)
    return crossing_values(race_paths(m, looks, n_paths), cumulative)


def race_boundaries(looks: Sequence[int], n_candidates: int, levels: intervals.Levels, margin: float, *,
                    spending: str = "hsd", gamma: float = 0.0, futility: bool = True, n_paths: int = RACE_PATHS
                    ) -> RaceBoundaries:
    """The race's boundaries at one duration for a field of ``n_candidates`` (the levels: family-wise, per duration)."""
    found = tuple(int(n) for n in looks)
    passes = tuple(_levels(m, found, levels.pass_level, spending, gamma, n_paths) for m in range(1, n_candidates + 1))
    fails = _levels(n_candidates, found, levels.fail_level, spending, gamma, n_paths)
    return RaceBoundaries(found, passes, fails, margin, 1 - margin if futility else None, levels.pass_level,
                          levels.fail_level)


@dataclass(frozen=True)
class LookState:
    """Every candidate of ``(...)`` races, ``(..., candidates)``: its speed code, why, and the look that decided it."""

    code: np.ndarray  # PASS, FAIL or INCONCLUSIVE
    reason: np.ndarray  # CONTINUE while it runs, else PASSED, FAILED, FUTILITY or LAST_LOOK
    look: np.ndarray  # 0-based look that stopped it; -1 while it runs

    @classmethod
    def start(cls, shape: tuple[int, ...], entered: np.ndarray | None = None) -> LookState:
        """Before the first look; candidates not ``entered`` are out (reason LAST_LOOK, never judged)."""
        reason = np.full(shape, CONTINUE, np.int8)
        if entered is not None:
            reason = np.where(entered, CONTINUE, LAST_LOOK).astype(np.int8)
        return cls(np.full(shape, INCONCLUSIVE, np.int8), reason, np.full(shape, -1, np.int16))

    @property
    def running(self) -> np.ndarray:
        return self.reason == CONTINUE


def _at_df(crit: np.ndarray | float, calibrated: np.ndarray | int, df: np.ndarray) -> np.ndarray:
    """The critical value with the same one-sided t level at ``df`` degrees of freedom as ``crit`` at ``calibrated``.

    The values are calibrated with every candidate running every round; a
    candidate that left before a look gives the pooled spread fewer
    degrees of freedom, and heavier tails need a larger value.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return -stdtrit(np.maximum(df, 1), stdtr(calibrated, -np.asarray(crit, dtype=float)))


def decide_look(contrasts: np.ndarray, j: int, state: LookState, b: RaceBoundaries) -> LookState:
    """The decisions at look ``j`` from ``(..., candidates, rounds)`` contrasts (at least ``b.looks[j]`` rounds).

    Only running candidates are judged. PASS steps down: the field of the
    critical values is every candidate not PASSed so far, looked at again
    while a PASS lowers it; then FAIL (lower bound above ``1 + margin``),
    the last look, and futility take the rest out.
    """
    n = b.looks[j]
    x = np.asarray(contrasts, dtype=float)[..., :n]
    running = state.running
    field = (running | (state.look >= 0)) & (state.code != PASS)  # entered, not PASSed
    with np.errstate(invalid="ignore", divide="ignore"):
        mean, se = np.nanmean(x, -1), pooled_se(x)
    df = np.maximum(np.isfinite(x).sum(-1) - 1, 0).sum(-1, keepdims=True)  # of the pooled spread, as it ran
    ratio = np.exp(mean)
    passed = np.zeros(running.shape, bool)
    upper = np.full(running.shape, np.inf)
    for _ in range(b.n_candidates):
        m = (field & ~passed).sum(-1, keepdims=True)
        crit = _at_df(np.array([math.inf, *(c[j] for c in b.pass_crits)])[np.minimum(m, b.n_candidates)],
                      np.maximum(m, 1) * (n - 1), df)
        with np.errstate(invalid="ignore", over="ignore"):
            upper = np.where(passed, upper, np.exp(mean + crit * se))
        new = running & ~passed & (upper < 1 - b.margin)
        if not new.any():
            break
        passed |= new
    with np.errstate(invalid="ignore", over="ignore"):
        lower = np.exp(mean - _at_df(b.fail_crits[j], b.n_candidates * (n - 1), df) * se)
    failed = running & ~passed & (lower > 1 + b.margin)
    last = j == len(b.looks) - 1
    futile = (ratio >= b.futility_ratio) if b.futility_ratio is not None else np.zeros(running.shape, bool)
    stop = np.select([passed, failed, np.full(running.shape, last), futile], [PASSED, FAILED, LAST_LOOK, FUTILITY],
                     CONTINUE)
    code = np.where(stop == PASSED, PASS, np.where(stop == FAILED, FAIL, INCONCLUSIVE))
    decided = running & (stop != CONTINUE)
    return LookState(np.where(decided, code, state.code).astype(np.int8),
                     np.where(running, stop, state.reason).astype(np.int8),
                     np.where(decided, j, state.look).astype(np.int16))
