"""Honest small-sample statistics for AB/BA block campaigns: one candidate at one duration.

The unit of replication
-----------------------
Per duration, blocks run in the RunSpec's order (``ABBAABBA`` by default):
``A`` is a baseline block, ``B`` a candidate block, and each block is a fresh
server process with its own warmup and k measured requests. Requests inside
one process share whatever that process drew (memory placement, compiled
graphs, device state), so they are not independent replicates of the arm
effect; the block is. Each block is therefore summarised by the median of its
measured E2E samples, and adjacent blocks (positions 1-2, 3-4, ...) form one
AB or BA pair with the paired ratio ``r_i = median(B_i) / median(A_i)``.

Pairing single requests across a pair instead (three "pairs" per block pair)
would count one process draw three times: with process-to-process variation
as large as request noise, such an interval claims "faster" in about 9 % of
A/A campaigns instead of 2.5 %. This module never does that.

Drift
-----
Alternating AB and BA cancels a drift that is linear in block position: in
ABBAABBA the four log ratios carry +γ, −γ, +γ, −γ, so their mean is unbiased
and the drift only widens the interval. It does not cancel a step or another
non-linear change. A step of size δ between the two blocks of one pair
shifts that pair's log ratio by ±δ, and the geometric mean by about δ/k: a
+8.7 % step at the start of block 2 biases an A/A campaign by +2.1 % (k = 4),
and the interval does not account for it (tests_unit/stats/test_error_rates.py).
A step between pairs cancels. The per-block medians and the warmup check in
the report are where such a step shows.

The effect and its bounds
-------------------------
Following Kalibera & Jones (2013), the effect is a ratio with bounds: the
geometric mean of the k paired ratios, ``exp(mean(log r_i))``, with t bounds
on the logs at the campaign's one-sided error levels
(:func:`h3bench.stats.intervals.error_levels`)::

    upper = exp( mean(log r) + t_{1-pass_level, k-1} · s / √k )
    lower = exp( mean(log r) − t_{1-fail_level, k-1} · s / √k ),   s = sd(log r)

With k = 1 there is no interval: "n too small to conclude". PASS ("faster")
when the upper bound lies below ``1 - margin``, FAIL ("slower") when the
lower bound lies above ``1 + margin``, INCONCLUSIVE between. Every verdict
gives the minimum detectable ratio (80 % power, margin included) at the
observed s, and a t-based PASS or FAIL whose level no sign-flip test of k
pairs could reach (``1/2^k`` above it: k < 6) says that it rests on the t
model.

Candidate-only runs
-------------------
Correcting a stored baseline by the day's shift measured on fresh anchors,
``d = mean log(anchors) − mean log(stored)``, gives ``log c − (log stored +
d) = log c − log anchors``: once corrected, the stored level cancels
exactly. So :func:`anchored_speed_report` compares the candidate with the
day's interleaved anchors only (paired ratios when the anchored order is
made of AB/BA pairs, a pooled two-sample t on block medians otherwise; the
default ``BABBAB`` has equal mean positions, so a linear drift cancels), and
the stored baseline gives the shift report. Without anchors, or when the
anchors show a shift larger than the estimated effect, the outcome is at most
INCONCLUSIVE. With the anchors the shift does not bias the verdict; the
second rule is a conservative guard. The stored baseline's block-to-block
variance is not pooled with today's: that would assume the day changed the
level but not the spread, which two anchors cannot check; a noisier day
would then push the false PASS above its level.

Percentiles
-----------
A percentile q is quoted only when ``n ≥ ceil(1 / (1 - q))``, so that at
least one sample lies above it (p90 needs 10 samples, p95 20, p99 100), and
then as a nearest-rank order statistic: an observed sample, never
interpolated and never derived from a mean and a standard deviation.
Otherwise the value is None and the note says why.

References
----------
T. Kalibera and R. Jones, "Rigorous Benchmarking in Reasonable Time",
ISMM 2013, doi:10.1145/2464757.2464763.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from h3bench.errors import UsageError
from h3bench.outcome import Outcome
from h3bench.stats import intervals
from h3bench.stats.intervals import Levels

__all__ = [
    "PERCENTILES",
    "ArmSummary",
    "BlockSamples",
    "PairedRatio",
    "Percentile",
    "RatioEstimate",
    "SpeedReport",
    "SpeedVerdict",
    "anchored_speed_report",
    "arm_summary",
    "paired_block_ratios",
    "percentile",
    "ratio_estimate",
    "speed_report",
    "speed_verdict",
]

PERCENTILES = (0.90, 0.95, 0.99)
_OUTCOME = {intervals.PASS: Outcome.PASS, intervals.FAIL: Outcome.FAIL, intervals.INCONCLUSIVE: Outcome.INCONCLUSIVE}


@dataclass(frozen=True)
class BlockSamples:
    """The measured E2E samples (seconds) of one block; ``role`` ``"A"`` is baseline, ``"B"`` candidate."""

    role: Literal["A", "B"]
    samples: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.role not in ("A", "B"):
            raise UsageError(f"block role must be 'A' (baseline) or 'B' (candidate), got {self.role!r}")
        object.__setattr__(self, "samples", tuple(float(value) for value in self.samples))
        if not self.samples:
            raise UsageError(f"a {self.role} block has no measured samples")
        bad = [value for value in self.samples if not (math.isfinite(value) and value > 0)]
        if bad:
            raise UsageError(f"a {self.role} block has latencies that are not positive and finite: {bad}")

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass(frozen=True)
class PairedRatio:
    """One adjacent AB or BA pair: ``ratio = candidate_median / baseline_median``."""

    index: int  # 0 for positions 1-2, 1 for positions 3-4, ...
    order: Literal["AB", "BA"]
    baseline_median: float
    candidate_median: float
    ratio: float


@dataclass(frozen=True)
class Percentile:
    """A nearest-rank percentile, or None with the reason when n is too small."""

    q: float
    value: float | None
    min_n: int
    note: str


@dataclass(frozen=True)
class ArmSummary:
    """One arm's measured samples at one duration, pooled over its blocks in order."""

    n: int
    minimum: float
    median: float
    maximum: float
    block_medians: tuple[float, ...]
    samples: tuple[float, ...]
    percentiles: tuple[Percentile, ...]


@dataclass(frozen=True)
class RatioEstimate:
    """The geometric-mean ratio with its one-sided bounds; None where the data do not support a value."""

    k: int  # what the t model counts: AB/BA pairs, or blocks in a two-sample comparison
    ratios: tuple[float, ...]
    geomean: float | None
    ci_low: float | None  # the lower bound, at levels.fail_level
    ci_high: float | None  # the upper bound, at levels.pass_level
    levels: Levels
    df: int
    log_se: float | None
    mde_ratio: float | None  # the true ratio called PASS with 80 % power, margin included
    min_permutation_p: float | None  # one-sided
    notes: tuple[str, ...]
    margin: float
    design: str = "AB/BA pairs"
    shift: float | None = None  # a candidate-only run: today's anchors over the stored baseline
    floor_basis: str = ""  # what min_permutation_p is the floor of

    def headline(self) -> str:
        """``ratio 0.9000, bounds [0.8900, 0.9100] (one-sided 1.25 % / 2.5 %)``: each bound with its own level."""
        if self.geomean is None:
            return "no ratio"
        if self.ci_low is None or self.ci_high is None:
            return f"ratio {self.geomean:.4f}, no interval"
        return (f"ratio {self.geomean:.4f}, bounds [{self.ci_low:.4f}, {self.ci_high:.4f}] (one-sided "
                f"{self.levels.fail_level * 100:.3g} % / {self.levels.pass_level * 100:.3g} %)")

    def bounds_text(self) -> str:
        return (f"geometric mean ratio {self.geomean:.4f}, bounds [{self.ci_low:.4f}, {self.ci_high:.4f}] "
                f"over k = {self.k} {self.design}")


@dataclass(frozen=True)
class SpeedVerdict:
    """PASS, FAIL or INCONCLUSIVE for "the candidate is faster", with every reason."""

    outcome: Outcome
    margin: float
    estimate: RatioEstimate
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class SpeedReport:
    """Everything the statistics say about one candidate at one duration."""

    baseline: ArmSummary
    candidate: ArmSummary
    pairs: tuple[PairedRatio, ...]
    estimate: RatioEstimate
    verdict: SpeedVerdict


def paired_block_ratios(blocks: Sequence[BlockSamples]) -> tuple[PairedRatio, ...]:
    """Pair blocks at positions (1, 2), (3, 4), ... and give ``median(B) / median(A)`` for each.

    ``blocks`` are in schedule order. A trailing unpaired block (a candidate
    stopped halfway) is not paired; a pair with two blocks of the same role is
    not an AB/BA pair and is refused.
    """
    pairs = []
    for index in range(len(blocks) // 2):
        first, second = blocks[2 * index], blocks[2 * index + 1]
        if first.role == second.role:
            raise UsageError(f"blocks {2 * index + 1} and {2 * index + 2} are {first.role * 2}, not an AB or BA pair")
        order: Literal["AB", "BA"] = "AB" if first.role == "A" else "BA"
        baseline, candidate = (first, second) if order == "AB" else (second, first)
        pairs.append(
            PairedRatio(index, order, baseline.median, candidate.median, candidate.median / baseline.median)
        )
    return tuple(pairs)


def percentile(samples: Sequence[float], q: float) -> Percentile:
    """The nearest-rank q-percentile when ``n ≥ ceil(1 / (1 - q))``, else None with a statement."""
    if not 0 < q < 1:
        raise UsageError(f"percentile q must be in (0, 1), got {q}")
    n = len(samples)
    # round() first: 1 / (1 - 0.9) is 10.000000000000002 in floating point.
    min_n = math.ceil(round(1 / (1 - q), 9))
    label = f"p{q * 100:g}"
    if n < min_n:
        return Percentile(q, None, min_n, f"{label} needs n ≥ {min_n} so that a sample lies above it; n = {n}")
    rank = math.ceil(round(q * n, 9))
    return Percentile(q, sorted(samples)[rank - 1], min_n, f"{label}: sample {rank} of {n} in ascending order")


def arm_summary(blocks: Sequence[BlockSamples]) -> ArmSummary:
    """n, min, median, max, per-block medians and supported percentiles of one arm's blocks."""
    if not blocks:
        raise UsageError("an arm summary needs at least one block")
    samples = tuple(value for block in blocks for value in block.samples)
    return ArmSummary(
        n=len(samples),
        minimum=min(samples),
        median=statistics.median(samples),
        maximum=max(samples),
        block_medians=tuple(block.median for block in blocks),
        samples=samples,
        percentiles=tuple(percentile(samples, q) for q in PERCENTILES),
    )


def _check_margin(margin: float) -> None:
    if not 0 <= margin < 1:
        raise UsageError(f"speed margin must be in [0, 1), got {margin}")


def _estimate(bounds: tuple[np.ndarray, ...], *, k: int, df: int, ratios: tuple[float, ...], levels: Levels,
              margin: float, floor: float, floor_what: str, design: str, notes: Sequence[str] = ()) -> RatioEstimate:
    ratio, lower, upper, se = (float(v) for v in bounds)
    found = [f"minimum detectable ratio (80 % power, margin included) at the observed spread: "
             f"{float(intervals.mde_ratio(se, df, margin, levels.pass_level)):.4f}", levels.describe(), *notes]
    if se == 0:
        found.append("all ratios are equal: a zero-width interval shows no observed variability, not certainty")
    return RatioEstimate(k, ratios, ratio, lower, upper, levels, df, se,
                         float(intervals.mde_ratio(se, df, margin, levels.pass_level)), floor, tuple(found), margin,
                         design, floor_basis=floor_what)


def ratio_estimate(ratios: Sequence[float], levels: Levels, margin: float) -> RatioEstimate:
    """Geometric mean of paired ratios with t bounds on their logs; see the module docstring."""
    _check_margin(margin)
    ratios = tuple(float(value) for value in ratios)
    if any(not (math.isfinite(value) and value > 0) for value in ratios):
        raise UsageError(f"paired ratios must be positive and finite, got {list(ratios)}")
    k = len(ratios)
    if k < 2:
        reason = ("no complete AB/BA pair" if k == 0 else
                  "n too small to conclude: one paired ratio gives no interval (a t interval needs k ≥ 2)")
        return RatioEstimate(k, ratios, ratios[0] if ratios else None, None, None, levels, 0, None, None,
                             1 / 2**k if k else None, (reason,), margin)
    bounds = intervals.t_bounds(np.log(ratios), levels.pass_level, levels.fail_level)
    what = f"with k = {k} pairs (sign flips; 2/2^{k} = {2 / 2**k:.3g} two-sided)"
    return _estimate(bounds, k=k, df=k - 1, ratios=ratios, levels=levels, margin=margin, floor=1 / 2**k,
                     floor_what=what, design="AB/BA pairs")


def speed_verdict(estimate: RatioEstimate) -> SpeedVerdict:
    """PASS if the upper bound lies below ``1 - margin``, FAIL if the lower one lies above ``1 + margin``."""
    margin = estimate.margin
    if estimate.ci_low is None or estimate.ci_high is None:
        return SpeedVerdict(Outcome.INCONCLUSIVE, margin, estimate, estimate.notes)
    outcome = _OUTCOME[int(intervals.outcome_codes(estimate.ci_low, estimate.ci_high, margin))]
    interval = estimate.bounds_text()
    floor_note = None
    if outcome is Outcome.PASS:
        reason = f"candidate faster: {interval}; the upper bound lies below 1 - margin = {1 - margin:.4f}"
    elif outcome is Outcome.FAIL:
        reason = f"candidate slower: {interval}; the lower bound lies above 1 + margin = {1 + margin:.4f}"
    else:
        reason = (f"{interval}: neither the upper bound below 1 - margin = {1 - margin:.4f} nor the lower bound above "
                  f"1 + margin = {1 + margin:.4f}")
    if outcome is not Outcome.INCONCLUSIVE and estimate.min_permutation_p is not None:
        level = estimate.levels.pass_level if outcome is Outcome.PASS else estimate.levels.fail_level
        floor_note = intervals.permutation_floor_note(estimate.min_permutation_p, level, estimate.floor_basis,
                                                      estimate.df)
    return SpeedVerdict(outcome, margin, estimate, (reason, *estimate.notes, *([floor_note] if floor_note else [])))


def _arms(blocks: Sequence[BlockSamples]) -> tuple[list[BlockSamples], list[BlockSamples]]:
    by_role = {role: [block for block in blocks if block.role == role] for role in ("A", "B")}
    missing = [name for role, name in (("A", "baseline"), ("B", "candidate")) if not by_role[role]]
    if missing:
        raise UsageError(f"no {' or '.join(missing)} block to compare")
    return by_role["A"], by_role["B"]


def speed_report(blocks: Sequence[BlockSamples], *, margin: float, levels: Levels) -> SpeedReport:
    """Summaries, paired ratios, the estimate and the verdict for one candidate's blocks in schedule order."""
    baseline, candidate = _arms(blocks)
    pairs = paired_block_ratios(blocks)
    estimate = ratio_estimate([pair.ratio for pair in pairs], levels, margin)
    return SpeedReport(arm_summary(baseline), arm_summary(candidate), pairs, estimate, speed_verdict(estimate))


def anchored_speed_report(
    blocks: Sequence[BlockSamples], stored_medians: Sequence[float], *, margin: float, levels: Levels, stored: str
) -> SpeedReport:
    """A candidate-only run: the candidate against today's anchors (``A``), the stored baseline for the shift.

    ``blocks`` are today's blocks in the anchored order; ``stored_medians``
    the block medians of the stored bundle's baseline for this candidate and
    duration (empty: no shift is reported); ``stored`` names the bundle.
    The numbers come from :func:`h3bench.stats.intervals.anchored_bounds`.
    """
    _check_margin(margin)
    anchors, candidate = [b for b in blocks if b.role == "A"], [b for b in blocks if b.role == "B"]
    if not candidate:
        raise UsageError("no candidate block to compare")
    order = "".join(block.role for block in blocks)
    found = intervals.anchored_bounds(order, np.log([b.median for b in blocks]),
                                      np.log(stored_medians) if stored_medians else None, margin,
                                      levels.pass_level, levels.fail_level)
    source = f"candidate-only run: quality references and the shift report from the stored baseline {stored}"
    if found.paired:
        design = "AB/BA pairs of candidate and today's anchor blocks"
        what = f"with k = {len(order) // 2} pairs (sign flips)"
    else:
        design = f"blocks, {len(candidate)} candidate against {len(anchors)} of today's anchors (two-sample t)"
        what = f"with {len(anchors)} anchor and {len(candidate)} candidate blocks (relabellings, 1/C({len(order)}, " \
               f"{len(anchors)}))"
    reason = int(found.reason)
    if reason in (intervals.NO_ANCHORS, intervals.TOO_FEW_BLOCKS):
        text = ("no fresh baseline anchors: a day-to-day shift cannot be separated from the effect, so the stored "
                "baseline alone cannot decide speed" if reason == intervals.NO_ANCHORS else
                "n too small to conclude: a two-sample interval needs three blocks")
        estimate = RatioEstimate(len(order), (), None, None, None, levels, 0, None, None, None, (text, source),
                                 margin, design)
        return SpeedReport(arm_summary(anchors or candidate), arm_summary(candidate), (), estimate,
                           SpeedVerdict(Outcome.INCONCLUSIVE, margin, estimate, estimate.notes))
    shift = float(found.shift)
    moved = (f"today's anchors are {shift - 1:+.2%} against the stored baseline's {len(stored_medians)} blocks"
             if stored_medians else "the stored bundle has no baseline block here: no shift is reported")
    estimate = dataclasses.replace(
        _estimate((found.ratio, found.lower, found.upper, found.se), k=len(order) // 2 if found.paired else len(order),
                  df=found.df, ratios=(), levels=levels, margin=margin, floor=found.floor, floor_what=what,
                  design=design, notes=(moved, source)),
        shift=shift if stored_medians else None)
    verdict = speed_verdict(estimate)
    if reason == intervals.SHIFT_EXCEEDS_EFFECT and estimate.geomean is not None:
        verdict = SpeedVerdict(Outcome.INCONCLUSIVE, margin, estimate, (
            f"the anchors show the baseline moved by {shift - 1:+.2%} since the stored bundle, more than the effect "
            f"{estimate.geomean - 1:+.2%}: at most INCONCLUSIVE (today's anchors alone would say "
            f"{verdict.outcome})", *verdict.reasons))
    return SpeedReport(arm_summary(anchors), arm_summary(candidate), (), estimate, verdict)
