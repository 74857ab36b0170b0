"""One probe: a commit against the good endpoint in AB/BA pairs, and the sequential test between "no change" and the step.

A probe of commit ``j`` runs AB/BA pairs of the good endpoint (``A``) and
``j`` (``B``), fresh servers, the same seeds; each pair gives one log ratio
exactly as a campaign pairs its blocks
(:func:`h3bench.stats.intervals.paired_log_ratios` of
:func:`h3bench.stats.blockstat.block_log_statistics`).

The likelihood ratio
--------------------
The probe asks one question: is the culprit at ``j`` or before ("changed":
its pairs sit at the step) or after it ("no change": they sit at 0)? Its
likelihood ratio is what its own pairs say between the two, with the step
and the pair's spread integrated out over what every other pair says: the
posterior odds of "changed" with its pairs over those without them
(:mod:`h3bench.bisect.posterior`, whose model also gives the posterior over
the culprit). The verify campaign's pairs are the first evidence (the probe
of the bad endpoint), so the step the probes look for is the one it measured
(:class:`Step`), refined by every later pair.

The sequential test
-------------------
Wald's SPRT on that ratio: after at least ``min_pairs`` pairs the probe
stops as soon as ``|log LR| ≥ a`` ("changed" above, "unchanged" below), and
at ``max_pairs`` in any case (undecided; its pairs still count). Wald's
thresholds ``a = log((1 - α)/α)`` at the probe level ``α``; the error a
search makes end to end is not taken from them but measured by simulation
through this code (``tests_unit/bisect/test_error_rates.py``).

A probe whose interval (two-sided 95 % t) excludes both ``0`` and the step
is flagged as **between**: the commit sits at a level neither "no change"
nor the step, which is what a range with two regressions (or one half
undone) shows.

Quality bisection (``--on quality``) uses the matched pairs' gate outcomes
instead: each failing pair has probability ``q₁`` under "changed" (the
verify's failing fraction, shrunk) and ``q₀`` under "no change"
(:data:`FALSE_GATE_RATE`); the ratio is the binomial one
(:func:`quality_log_lr`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

from h3bench.bisect.posterior import Evidence, side_log_odds
from h3bench.errors import UsageError

__all__ = [
    "CHANGED",
    "FALSE_GATE_RATE",
    "UNCHANGED",
    "UNDECIDED",
    "ProbeRun",
    "ProbeTest",
    "Step",
    "between_flags",
    "quality_log_lr",
    "step_statistics",
]

CHANGED, UNCHANGED, UNDECIDED = 1, -1, 0
DECISIONS = {CHANGED: "changed", UNCHANGED: "unchanged", UNDECIDED: "undecided"}
# A healthy engine's matched pair fails a gate this rarely (an assumption: the gates are thresholds that the good
# endpoint passes; a quality bisection states it beside its ratios).
FALSE_GATE_RATE = 0.01
BETWEEN_LEVEL = 0.05  # two-sided level of the interval that flags a probe between "no change" and the step


def step_statistics(log_ratios: np.ndarray, pairs: np.ndarray | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, sum of squared deviations and degrees of freedom of the first ``pairs`` of ``(..., n)`` log ratios."""
    x = np.asarray(log_ratios, dtype=float)
    k = np.broadcast_to(np.asarray(pairs), x.shape[:-1])
    used = np.arange(x.shape[-1]) < k[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(used, x, 0.0).sum(-1) / k
        squares = np.where(used, (x - mean[..., None]) ** 2, 0.0).sum(-1)
    return mean, squares, k - 1


@dataclass(frozen=True)
class Step:
    """What the probes look for: the verified step (log ratio ``d``) and the spread of a pair, ``ν₀ s₀²`` on ``ν₀`` df."""

    log_ratio: float
    squares: float
    df: int
    pairs: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.log_ratio) and self.log_ratio != 0):
            raise UsageError(f"a step to look for must be a finite non-zero log ratio, got {self.log_ratio}")
        if self.df < 1 or not self.squares > 0:
            raise UsageError(f"the step's spread needs two pairs or more and some scatter, got {self.df + 1} pair(s), "
                             f"sum of squares {self.squares}")

    @classmethod
    def from_log_ratios(cls, log_ratios: np.ndarray | list[float]) -> Step:
        """The step the verify campaign's paired log ratios measured."""
        x = np.asarray(log_ratios, dtype=float)
        mean, squares, df = step_statistics(x[None], len(x))
        return cls(float(mean[0]), float(squares[0]), int(df[0]), len(x))

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def spread(self) -> float:
        """``s₀``: the standard deviation of one pair's log ratio."""
        return math.sqrt(self.squares / self.df)

    def interval(self, level: float = 0.05) -> tuple[float, float]:
        """The two-sided ``1 - level`` t interval of the step's ratio."""
        half = float(stdtrit(self.df, 1 - level / 2)) * self.spread / math.sqrt(self.pairs)
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def describe(self) -> str:
        low, high = self.interval()
        return (f"ratio {self.ratio:.4f} [{low:.4f}, {high:.4f}] (95 %, {self.pairs} pairs), a pair's log-ratio spread "
                f"{self.spread:.4f}")


@dataclass(frozen=True)
class ProbeRun:
    """A probe's course over its pairs: ``(...)`` arrays of the decision, the pairs it ran and its log LR then."""

    decision: np.ndarray  # CHANGED, UNCHANGED or UNDECIDED (also while it runs)
    pairs: np.ndarray
    log_lr: np.ndarray
    stopped: np.ndarray  # the test stopped (a decision, or max_pairs)


@dataclass(frozen=True)
class ProbeTest:
    """Wald's SPRT on a probe's likelihood ratio, between ``min_pairs`` and ``max_pairs`` pairs."""

    level: float = 0.05
    min_pairs: int = 1
    max_pairs: int = 8

    def __post_init__(self) -> None:
        if not 0 < self.level < 0.5:
            raise UsageError(f"the probe level must lie in (0, 0.5), got {self.level}")
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise UsageError(f"need 1 ≤ min_pairs ≤ max_pairs, got {self.min_pairs} and {self.max_pairs}")

    @property
    def threshold(self) -> float:
        """Wald's ``a = log((1 - α)/α)``: the probe stops once ``|log LR|`` reaches it."""
        return math.log((1 - self.level) / self.level)

    def log_lr_paths(self, evidence: Evidence, prior: np.ndarray, commit: np.ndarray | int,
                     log_ratios: np.ndarray) -> np.ndarray:
        """``(..., n)``: the probe's log likelihood ratio after each prefix of its ``(..., n)`` pair log ratios."""
        x = np.nan_to_num(np.asarray(log_ratios, dtype=float))
        j = np.asarray(commit)
        before = side_log_odds(evidence.log_posterior(prior), j)
        n = np.arange(1, x.shape[-1] + 1)
        at = (np.arange(evidence.n) == j[..., None])[..., None, :]  # (..., 1, N)
        grown = Evidence(evidence.count[..., None, :] + at * n[:, None],
                         evidence.total[..., None, :] + at * np.cumsum(x, -1)[..., None],
                         evidence.squares[..., None, :] + at * np.cumsum(x * x, -1)[..., None],
                         np.asarray(evidence.free_base)[..., None])
        p = np.asarray(prior, dtype=float)
        after = side_log_odds(grown.log_posterior(p[..., None, :] if p.ndim > 1 else p), j[..., None])
        with np.errstate(invalid="ignore"):  # a commit outside the searched segment: no odds either way, no ratio
            return np.nan_to_num(after - before[..., None], nan=0.0)

    def run(self, evidence: Evidence, prior: np.ndarray, commit: np.ndarray | int, log_ratios: np.ndarray,
            available: np.ndarray | int | None = None) -> ProbeRun:
        """The test over the pairs so far (``available``, default all): where it stopped, or where it stands.

        The live probe and the simulated searches both call this; a live probe
        continues while ``stopped`` is False.
        """
        x = np.asarray(log_ratios, dtype=float)
        shape = x.shape[:-1]
        n = min(x.shape[-1], self.max_pairs)
        avail = np.minimum(np.broadcast_to(np.asarray(n if available is None else available), shape), n)
        llr = self.log_lr_paths(evidence, prior, commit, x[..., :n])
        count = np.arange(1, n + 1)
        seen = count <= avail[..., None]
        crossed = seen & (count >= self.min_pairs) & (np.abs(llr) >= self.threshold)
        first = np.where(crossed.any(-1), crossed.argmax(-1), np.maximum(avail - 1, 0))
        pairs = np.where(avail > 0, first + 1, 0)
        at = np.take_along_axis(llr, first[..., None], -1)[..., 0]
        at = np.where(avail > 0, at, 0.0)
        decided = crossed.any(-1)
        decision = np.where(decided, np.where(at > 0, CHANGED, UNCHANGED), UNDECIDED).astype(np.int8)
        stopped = decided | (avail >= self.max_pairs)
        return ProbeRun(decision, pairs.astype(np.int16), at, stopped)

    def describe(self) -> str:
        return (f"SPRT between no change and the step: stop at |log LR| ≥ {self.threshold:.2f} (Wald, level "
                f"{self.level:g}) after {self.min_pairs} to {self.max_pairs} AB/BA pairs")


def between_flags(log_ratios: np.ndarray, pairs: np.ndarray | int, step: np.ndarray | float,
                  decision: np.ndarray | int = UNDECIDED, level: float = BETWEEN_LEVEL) -> np.ndarray:
    """``(...)``: the probe's two-sided t interval excludes both no change and the step (a level in between).

    Needs two pairs; fewer never flag. A probe whose test ``decision`` was "unchanged" never flags: a hint
    never points at a commit the search measured as unchanged.
    """
    mean, squares, df = step_statistics(log_ratios, pairs)
    d = np.asarray(step, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stdtrit(np.maximum(df, 1), 1 - level / 2) * np.sqrt(squares / np.maximum(df, 1)) / np.sqrt(df + 1)
        low, high = mean - half, mean + half
        inside = np.where(d > 0, (low > 0) & (high < d), (high < 0) & (low > d))
    return np.asarray(inside & (df >= 1) & (np.asarray(decision) != UNCHANGED))


def quality_log_lr(failing: int, pairs: int, verify_failing: int, verify_pairs: int,
                   false_rate: float = FALSE_GATE_RATE) -> float:
    """The log likelihood ratio of ``failing`` of ``pairs`` matched pairs failing a gate: "changed" against "no change".

    Under "changed" a pair fails with the verify's fraction, shrunk by half a
    pair each way (``(f + ½)/(n + 1)``); under "no change" with ``false_rate``.
    """
    if not (0 <= failing <= pairs and 0 <= verify_failing <= verify_pairs and verify_pairs > 0):
        raise UsageError(f"failing pairs must lie within the pairs: {failing}/{pairs}, verify "
                         f"{verify_failing}/{verify_pairs}")
    q1 = max((verify_failing + 0.5) / (verify_pairs + 1), false_rate)
    q0 = false_rate
    return failing * math.log(q1 / q0) + (pairs - failing) * math.log((1 - q1) / (1 - q0))
