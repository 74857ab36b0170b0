"""The race: several candidates against one baseline in shared rounds, each judged after every look, the family's error held.

Schedule
--------
A round runs each candidate still in the race once, and baseline
**anchors** around them: one anchor, then every :data:`ANCHOR_EVERY`
candidates another (``A c c A c c A c c A`` for six: 10 blocks where six
AB/BA pairs run 12, four baseline blocks where they run six). Rounds
**share anchors** (:data:`SHARED_ANCHORS`): a round after the first opens
with the anchor that closed the one before, so ``r`` rounds of two
candidates run ``2r + 1`` baseline blocks, not ``2r`` (the dearer
duration's race of two candidates: 10 blocks in three rounds, not 12).
Contrasts of two rounds that share an anchor are correlated (a lone
candidate's by 1/6), which a spread estimated from each candidate's contrasts
does not see (with the first version's pooled spread, shared anchors raised
the intersection-union worst case of six candidates,
:mod:`h3bench.course.racesim`, from about 2.4 % to about 2.8 %); the
estimates weigh it (:func:`shared_precision`). Every candidate
block stands next to an anchor, and its **contrast** is its block statistic
minus the straight line through its two neighbouring anchors at its slot
(:func:`round_weights`): a drift that is linear over the round cancels
exactly for every candidate, wherever it stands. Odd rounds are the mirror
of the even round before them, and the candidates' order turns by one every
two rounds (:func:`race_round`), so no candidate always goes first or always
stands on the same side of an anchor. A contrast has variance 14/9 of a
block's (one of two candidates between anchors) or 3/2 (alone between
anchors) against 2 of an AB/BA pair's difference; contrasts of candidates
that share an anchor are correlated, which the estimates weigh (:func:`estimates`).

Decisions
---------
After the rounds of each look, every candidate still running is judged on
its effect estimated by generalised least squares over the contrasts so
far (:func:`estimates`): the contrasts are a known linear map of the
race's blocks, so their covariance is known up to the block noise whichever
candidates ran, across rounds that share an anchor too, and the spread pooled over all candidates' whitened
residuals (the blocks of one host share one noise: Dunnett's common
variance) gives far more degrees of freedom than one series' ``pairs - 1``,
and an exact t statistic for each candidate however the field changed. Its
bounds are the estimate plus or minus a **critical value for the largest of
m t statistics that share one spread** (Dunnett's many-to-one comparisons,
here group-sequential), simulated for independent contrasts with their
pooled spread (:func:`race_paths`; pivotal: free of the noise's scale; the
anchors' positive correlations only lower the chance that the largest
crosses), and spent over the looks exactly as one series' level is
(:func:`h3bench.stats.sequential.crossing_values`). Where candidates left
before a look, the spread has other degrees of freedom than calibrated, and
the value moves to the same one-sided t level at the degrees of freedom it
has. A mean contrast with a spread pooled over candidates whose contrasts
share anchors (the first version) measured 2.90 % family-wise false
"faster" at the intersection-union worst case of six candidates where
2.5 % is due (20 000 races, ``benchmarks/bench_race.py --n 20000 --seed 2``).

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
    "SHARED_ANCHORS",
    "Estimates",
    "LookState",
    "RaceBoundaries",
    "decide_look",
    "estimates",
    "pass_statistics",
    "pooled_se",
    "race_boundaries",
    "race_contrasts",
    "race_paths",
    "race_round",
    "round_precision",
    "round_weights",
    "shared_precision",
]

ANCHOR = -1  # a slot of a round that runs the baseline
ANCHOR_EVERY = 2  # candidates between two anchors: each candidate block stands next to one
SHARED_ANCHORS = True  # a round opens with the anchor that closed the one before (the estimates weigh the correlation)
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

    Independent standard normal contrasts with one spread pooled over the
    candidates, as a race where none leaves; read-only. The race's own
    estimates (:func:`estimates`) are exact t statistics sharing one spread
    whose numerators are positively correlated through the anchors, which
    only lowers the chance that the largest crosses (Slepian's inequality,
    given the spread), whatever the field's arrangement.
    """
    rng = np.random.default_rng(seed + m)
    n_max = looks[-1]
    out = np.empty((n_paths, len(looks)))
    chunk = 1 << 15
    for start in range(0, n_paths, chunk):
        size = min(chunk, n_paths - start)
        x = rng.standard_normal((size, m, n_max))
        for j, n in enumerate(looks):
            out[start:start + size, j] = pass_statistics(x[:, :, :n]).max(-1)
    out.setflags(write=False)
    return out


def pooled_se(contrasts: np.ndarray) -> np.ndarray:
    """``(..., candidates)`` standard errors of each candidate's mean contrast from the spread pooled over all.

    ``contrasts`` are ``(..., candidates, rounds)``, NaN where a candidate
    did not run, with ``sum(rounds - 1)`` degrees of freedom: for
    independent contrasts (the calibration's, :func:`race_paths`) what
    :func:`estimates` gives for the race's own.
    """
    x = np.asarray(contrasts, dtype=float)
    ran = np.isfinite(x).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        squares = np.nansum((x - np.nanmean(x, -1, keepdims=True)) ** 2, -1)
        var = squares.sum(-1) / np.maximum(ran - 1, 0).sum(-1)
        return np.sqrt(var[..., None] / ran)


@functools.lru_cache(maxsize=4096)
def round_precision(key: int, round_index: int, n_candidates: int) -> np.ndarray:
    """``(n_candidates, n_candidates)``: the inverse of the contrasts' covariance (in block variances) in round
    ``round_index`` of the candidates in the bit set ``key``; zero for the others."""
    active = [c for c in range(n_candidates) if key >> c & 1]
    who, w = round_weights(race_round(active, round_index))
    out = np.zeros((n_candidates, n_candidates))
    out[np.ix_(who, who)] = np.linalg.inv(w @ w.T)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=4096)
def shared_precision(keys: tuple[int, ...], n_candidates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds that share anchors (each after the first opens with the anchor that closed the one before), run by the
    candidates in the bit sets ``keys``: each contrast's candidate and round, and the inverse of their covariance in
    block variances (contrasts of two rounds that share an anchor correlate)."""
    who: list[int] = []
    when: list[int] = []
    parts: list[tuple[int, np.ndarray]] = []
    start = 0
    for r, key in enumerate(keys):
        slots = race_round([c for c in range(n_candidates) if key >> c & 1], r)
        found, w = round_weights(slots)
        who += found
        when += [r] * len(found)
        parts.append((start, w))
        start += len(slots) - 1
    weights = np.zeros((len(who), start + 1))
    row = 0
    for first, w in parts:
        weights[row:row + len(w), first:first + w.shape[1]] = w
        row += len(w)
    out = np.linalg.inv(weights @ weights.T)
    out.setflags(write=False)
    return np.array(who), np.array(when), out


@dataclass(frozen=True)
class Estimates:
    """Each candidate's effect (log ratio), its standard error, and the degrees of freedom of their common spread."""

    effect: np.ndarray  # (..., candidates); NaN for a candidate that never ran
    se: np.ndarray  # (..., candidates)
    df: np.ndarray  # (...,)


def estimates(contrasts: np.ndarray, shared: bool = False) -> Estimates:
    """Generalised least squares on the contrasts so far, ``(..., candidates, rounds)`` with NaN where one did not run.

    Each round's contrasts are a known linear map of its blocks
    (:func:`round_weights`), so their covariance is known up to the block
    noise (:func:`round_precision`) whichever candidates ran: the estimates
    weigh the rounds by it, the spread comes from the whitened residuals
    with ``contrasts run - candidates`` degrees of freedom, and each
    candidate's t statistic is exact (normal blocks), however the field
    changed. With one candidate per round, or none sharing an anchor, this
    is each candidate's mean contrast and a pooled spread. ``shared``: the
    rounds share their anchors, and the covariance spans the whole race
    (:func:`shared_precision`).
    """
    x = np.asarray(contrasts, dtype=float)
    lead, (k, n) = x.shape[:-2], x.shape[-2:]
    x = x.reshape(-1, k, n)
    ran = np.isfinite(x)
    values = np.where(ran, x, 0.0)
    info = np.zeros((len(x), k, k))
    score = np.zeros((len(x), k))
    squares = np.zeros(len(x))
    keys = (ran * (1 << np.arange(k))[None, :, None]).sum(1)
    for history in np.unique(keys, axis=0) if shared else ():
        rows = (keys == history).all(-1)
        who, when, precision = shared_precision(tuple(int(h) for h in history if h), k)
        c = values[rows][:, who, when]
        onto = np.zeros((len(who), k))
        onto[np.arange(len(who)), who] = 1.0
        info[rows] += onto.T @ precision @ onto
        score[rows] += c @ precision @ onto
        squares[rows] += np.einsum("ij,jk,ik->i", c, precision, c)
    for r in range(n if not shared else 0):
        for key in np.unique(keys[:, r]):
            if key == 0:
                continue
            rows = keys[:, r] == key
            precision = round_precision(int(key), r, k)
            c = values[rows, :, r]
            info[rows] += precision
            score[rows] += c @ precision
            squares[rows] += np.einsum("ij,jk,ik->i", c, precision, c)
    never = ~ran.any(-1)
    inverse = np.linalg.inv(info + never[:, :, None] * np.eye(k))
    effect = np.einsum("nij,nj->ni", inverse, score)
    df = ran.sum((-1, -2)) - (~never).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.sqrt(np.maximum(squares - np.einsum("ni,ni->n", score, effect), 0.0) / df)
        se = spread[:, None] * np.sqrt(np.diagonal(inverse, axis1=-2, axis2=-1))
    effect = np.where(never, np.nan, effect)
    return Estimates(effect.reshape(*lead, k), se.reshape(*lead, k), df.reshape(lead))


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
    bound's for the whole field. A bound is the estimate plus (minus) the
    critical value times its standard error (:func:`estimates`).
    """

    looks: tuple[int, ...]
    pass_crits: tuple[tuple[float, ...], ...]
    fail_crits: tuple[float, ...]
    margin: float
    futility_ratio: float | None
    pass_level: float
    fail_level: float
    allowance: float = 0.0  # a step this large inside one round: each bound moved out by log(1 + it) / rounds
    shared: bool = False  # rounds share their anchors (estimates over the whole race's covariance)

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
                    spending: str = "hsd", gamma: float = 0.0, futility: bool = True, allowance: float = 0.0,
                    shared: bool = False, n_paths: int = RACE_PATHS) -> RaceBoundaries:
    """The race's boundaries at one duration for a field of ``n_candidates`` (the levels: family-wise, per duration).

    ``allowance``: a step of that size inside one round moves a contrast by
    at most 2/3 of its log (a candidate beside the anchor before the step,
    :func:`round_weights`), an estimate over ``n`` rounds by about that over
    ``n``; each bound is moved out by ``log(1 + allowance) / n``, as the
    sequential design's are for a step inside one pair
    (:data:`h3bench.stats.sequential.STEP_ALLOWANCE`).
    """
    found = tuple(int(n) for n in looks)
    passes = tuple(_levels(m, found, levels.pass_level, spending, gamma, n_paths) for m in range(1, n_candidates + 1))
    fails = _levels(n_candidates, found, levels.fail_level, spending, gamma, n_paths)
    return RaceBoundaries(found, passes, fails, margin, 1 - margin if futility else None, levels.pass_level,
                          levels.fail_level, allowance, shared)


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
    found = estimates(x, b.shared)
    mean, se, df = found.effect, found.se, found.df[..., None]
    ratio = np.exp(mean)
    widen = math.log1p(b.allowance) / n
    passed = np.zeros(running.shape, bool)
    upper = np.full(running.shape, np.inf)
    for _ in range(b.n_candidates):
        m = (field & ~passed).sum(-1, keepdims=True)
        crit = _at_df(np.array([math.inf, *(c[j] for c in b.pass_crits)])[np.minimum(m, b.n_candidates)],
                      np.maximum(m, 1) * (n - 1), df)
        with np.errstate(invalid="ignore", over="ignore"):
            upper = np.where(passed, upper, np.exp(mean + crit * se + widen))
        new = running & ~passed & (upper < 1 - b.margin)
        if not new.any():
            break
        passed |= new
    with np.errstate(invalid="ignore", over="ignore"):
        lower = np.exp(mean - _at_df(b.fail_crits[j], b.n_candidates * (n - 1), df) * se - widen)
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
