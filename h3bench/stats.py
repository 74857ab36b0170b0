"""Honest small-sample statistics for AB/BA block campaigns (REFERENCE §8 and §9).

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
Alternating AB and BA cancels a linear drift in the mean of the ratios.

Pairing single requests across a pair instead (three "pairs" per block pair)
would count one process draw three times: with process-to-process variation
as large as request noise, such an interval claims "faster" in about 9 % of
A/A campaigns instead of 2.5 %. This module never does that.

The effect and its interval
---------------------------
Following Kalibera & Jones (2013), the effect is a ratio with a confidence
interval: the geometric mean of the k paired ratios,
``exp(mean(log r_i))``, with the t interval on the logs::

    exp( mean(log r) ± t_{1-α/2, k-1} · s / √k ),   s = sd(log r), ddof = 1

With k = 1 there is no interval (no variance estimate): the outcome is
"n too small to conclude". With k pairs, the smallest two-sided
sign/permutation p-value is ``2 / 2**k`` (0.5 for k = 2, 0.125 for k = 4), a
hard floor on what any rank test can show (REFERENCE §9); it is reported with
every estimate.

Minimum detectable effect
-------------------------
At the observed variance the interval's half-width on the log scale is
``h = t_{1-α/2, k-1} · s / √k``. The minimum detectable effect is reported as
the ratio ``exp(-h)``: a candidate whose geometric-mean ratio lies below it
has an interval that excludes 1. This is detection with about 50 % power; 80 %
power would need ``(t_{1-α/2} + t_{0.80}) · s / √k``. A "faster" PASS with a
margin m additionally needs the estimate below ``(1 - m) · exp(-h)``.

Percentiles
-----------
A percentile q is quoted only when ``n ≥ ceil(1 / (1 - q))``, so that at
least one sample lies above it (p90 needs 10 samples, p95 20, p99 100), and
then as a nearest-rank order statistic: an observed sample, never
interpolated and never derived from a mean and a standard deviation.
Otherwise the value is None and the note says why.

The verdict "candidate faster"
------------------------------
PASS when the whole interval lies below ``1 - margin``; FAIL when it lies
entirely above 1 (slower); INCONCLUSIVE otherwise, including k < 2.

References
----------
T. Kalibera and R. Jones, "Rigorous Benchmarking in Reasonable Time",
ISMM 2013, doi:10.1145/2464757.2464763.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import stdtrit  # the Student t quantile behind scipy.stats.t.ppf, without its import cost

from h3bench.errors import UsageError
from h3bench.outcome import Outcome

__all__ = [
    "PERCENTILES",
    "ArmSummary",
    "BlockSamples",
    "PairedRatio",
    "Percentile",
    "RatioEstimate",
    "SpeedReport",
    "SpeedVerdict",
    "arm_summary",
    "paired_block_ratios",
    "percentile",
    "ratio_estimate",
    "speed_report",
    "speed_verdict",
    "unpaired_ratio_estimate",
    "unpaired_speed_report",
]

PERCENTILES = (0.90, 0.95, 0.99)


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
    """Geometric mean of the paired ratios with its t interval; None where k does not support a value."""

    k: int
    ratios: tuple[float, ...]
    geomean: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    df: int
    log_sd: float | None
    mde_ratio: float | None  # exp(-h): the interval excludes 1 for estimates below it
    min_permutation_p: float | None  # 2 / 2**k
    notes: tuple[str, ...]
    design: str = "AB/BA pairs"  # what k counts


@dataclass(frozen=True)
class SpeedVerdict:
    """PASS, FAIL or INCONCLUSIVE for "the candidate is faster", with the reasons."""

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


def ratio_estimate(ratios: Sequence[float], confidence: float = 0.95) -> RatioEstimate:
    """Geometric mean of paired ratios with a t interval on their logs; see the module docstring."""
    if not 0 < confidence < 1:
        raise UsageError(f"confidence must be in (0, 1), got {confidence}")
    ratios = tuple(float(value) for value in ratios)
    if any(not (math.isfinite(value) and value > 0) for value in ratios):
        raise UsageError(f"paired ratios must be positive and finite, got {list(ratios)}")
    k = len(ratios)
    if k == 0:
        return RatioEstimate(0, (), None, None, None, confidence, 0, None, None, None, ("no complete AB/BA pair",))
    logs = np.log(ratios)
    center = float(logs.mean())
    notes = [f"with k = {k} pair(s), the smallest two-sided sign/permutation p is 2/2^{k} = {2 / 2**k:.3g}"]
    if k == 1:
        notes.insert(0, "n too small to conclude: one paired ratio gives no interval (a t interval needs k ≥ 2)")
        return RatioEstimate(1, ratios, math.exp(center), None, None, confidence, 0, None, None, 1.0, tuple(notes))
    log_sd = float(logs.std(ddof=1))
    half_width = float(stdtrit(k - 1, 1 - (1 - confidence) / 2)) * log_sd / math.sqrt(k)
    if log_sd == 0:
        notes.append("all paired ratios are equal: a zero-width interval shows no observed variability, not certainty")
    return RatioEstimate(
        k=k,
        ratios=ratios,
        geomean=math.exp(center),
        ci_low=math.exp(center - half_width),
        ci_high=math.exp(center + half_width),
        confidence=confidence,
        df=k - 1,
        log_sd=log_sd,
        mde_ratio=math.exp(-half_width),
        min_permutation_p=2 / 2**k,
        notes=tuple(notes),
    )


def speed_verdict(estimate: RatioEstimate, margin: float) -> SpeedVerdict:
    """PASS if the interval lies below ``1 - margin``, FAIL if above 1, INCONCLUSIVE otherwise."""
    if not 0 <= margin < 1:
        raise UsageError(f"speed margin must be in [0, 1), got {margin}")
    bound = 1 - margin
    if estimate.ci_low is None or estimate.ci_high is None:
        return SpeedVerdict(Outcome.INCONCLUSIVE, margin, estimate, estimate.notes)
    interval = (
        f"geometric mean ratio {estimate.geomean:.4f}, {estimate.confidence:.0%} CI "
        f"[{estimate.ci_low:.4f}, {estimate.ci_high:.4f}] over k = {estimate.k} {estimate.design}"
    )
    if estimate.ci_high < bound:
        outcome, reason = Outcome.PASS, f"candidate faster: {interval} lies below 1 - margin = {bound:.4f}"
    elif estimate.ci_low > 1:
        outcome, reason = Outcome.FAIL, f"candidate slower: {interval} lies above 1"
    else:
        assert estimate.mde_ratio is not None  # an interval gives one
        outcome = Outcome.INCONCLUSIVE
        reason = (
            f"{interval} is neither below 1 - margin = {bound:.4f} nor above 1; at this variance only an "
            f"estimate below {bound * estimate.mde_ratio:.4f} would be called faster "
            f"(minimum detectable ratio {estimate.mde_ratio:.4f})"
        )
    return SpeedVerdict(outcome, margin, estimate, (reason, *estimate.notes))


def speed_report(blocks: Sequence[BlockSamples], *, margin: float, confidence: float = 0.95) -> SpeedReport:
    """Summaries, paired ratios, the estimate and the verdict for one candidate's blocks in schedule order."""
    pairs = paired_block_ratios(blocks)
    by_role = {role: [block for block in blocks if block.role == role] for role in ("A", "B")}
    missing = [name for role, name in (("A", "baseline"), ("B", "candidate")) if not by_role[role]]
    if missing:
        raise UsageError(f"no {' or '.join(missing)} block to compare")
    estimate = ratio_estimate([pair.ratio for pair in pairs], confidence)
    return SpeedReport(
        baseline=arm_summary(by_role["A"]),
        candidate=arm_summary(by_role["B"]),
        pairs=pairs,
        estimate=estimate,
        verdict=speed_verdict(estimate, margin),
    )


def unpaired_ratio_estimate(
    baseline_medians: Sequence[float], candidate_medians: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """Ratio of the geometric means of block medians, with a Welch t interval on their logs.

    For a candidate-only run against a stored baseline: the blocks were not
    interleaved, so drift between the two runs (thermal state, other load, a
    changed host) is not controlled and is silently part of the estimate.
    The Welch degrees of freedom are rounded down, which widens the interval.
    """
    base = np.log(np.asarray(baseline_medians, dtype=float))
    cand = np.log(np.asarray(candidate_medians, dtype=float))
    design = "candidate blocks against stored baseline blocks, NOT AB/BA-interleaved"
    notes = ["latency comparison is NOT AB/BA-interleaved: the baseline samples come from another run"]
    geomean = math.exp(float(cand.mean() - base.mean()))
    if len(base) < 2 or len(cand) < 2:
        notes.insert(0, "n too small to conclude: an unpaired interval needs at least two blocks per arm")
        return RatioEstimate(len(cand), (), geomean, None, None, confidence, 0, None, None, None, tuple(notes), design)
    var_b, var_c = base.var(ddof=1) / len(base), cand.var(ddof=1) / len(cand)
    se = math.sqrt(var_b + var_c)
    if se == 0:
        df = len(base) + len(cand) - 2
    else:
        df = max(1, math.floor((var_b + var_c) ** 2 / (var_b**2 / (len(base) - 1) + var_c**2 / (len(cand) - 1))))
    half_width = float(stdtrit(df, 1 - (1 - confidence) / 2)) * se
    return RatioEstimate(
        k=len(cand),
        ratios=(),
        geomean=geomean,
        ci_low=geomean * math.exp(-half_width),
        ci_high=geomean * math.exp(half_width),
        confidence=confidence,
        df=df,
        log_sd=se,
        mde_ratio=math.exp(-half_width),
        min_permutation_p=None,
        notes=tuple(notes),
        design=design,
    )


def unpaired_speed_report(blocks: Sequence[BlockSamples], *, margin: float, baseline_source: str) -> SpeedReport:
    """Like :func:`speed_report`, for candidate blocks against stored baseline blocks (not interleaved)."""
    by_role = {role: [block for block in blocks if block.role == role] for role in ("A", "B")}
    estimate = unpaired_ratio_estimate([b.median for b in by_role["A"]], [b.median for b in by_role["B"]])
    verdict = speed_verdict(estimate, margin)
    note = f"baseline samples from {baseline_source}; the comparison is NOT AB/BA-interleaved"
    return SpeedReport(
        baseline=arm_summary(by_role["A"]),
        candidate=arm_summary(by_role["B"]),
        pairs=(),
        estimate=estimate,
        verdict=SpeedVerdict(verdict.outcome, margin, estimate, (*verdict.reasons, note)),
    )
