"""Lossless mode: are the candidate's server processes distinguishable from baseline processes?

The absolute gates cannot show "no degradation": repetitions of the dense
baseline already differ in their decoded PCM. So the candidate is judged
against the baseline's own run-to-run variability, by a calibrated test.

The unit is a server process (one block): all requests of a process share its
nondeterminism (in the simulator its outputs are bit-identical), so only
processes are independent, and the verdict counts ``B`` baseline and ``C``
candidate server processes, not pairs of outputs. Each metric of a comparison
becomes a deviation, 0 for identical media: 1 − SSIM; 10^(−PSNR/10), the MSE
over 255²; LPIPS; 1 − audio cosine; |ln RMS ratio|.

The test
--------
The data is the full process × process deviation matrix of one candidate at
one duration, per metric: baseline–baseline, candidate–baseline (every pair,
not only AB/BA partners) and candidate–candidate pairs; request r of one
process against request r of another (same inputs and seed), a pair's value
the median over its request indices. Under H0 (the candidate's processes come
from the baseline's distribution) the ``B + C`` processes are exchangeable,
and so is the matrix under a simultaneous relabelling of rows and columns:
re-choosing which ``C`` processes are "candidates" gives an exact permutation
test for any statistic (Pitman 1937; Mantel 1967; ANOSIM, Clarke 1993;
PERMANOVA, Anderson 2001), with no assumption on the distribution of the
deviations or on the independence of pairs that share a process.

Per metric the pair values become mid-ranks (a label-free transform, so
exactness is kept and one heavy-tailed pair cannot dominate), and ``T = mean
rank(candidate–baseline) − mean rank(baseline–baseline)``: a candidate that
shifts its output and one that only adds nondeterminism both raise it
(ANOSIM's "between minus all within" misses the second). Over the metrics,
single-step max-T (Westfall & Young 1993): each T standardised by its own
permutation distribution, ``max z`` referred to the distribution of the max.
That controls the family-wise error over metrics exactly with the floor
``1 / C(B+C, C)``; Holm's floor is ``n_metrics`` times higher, and Holm was
less powerful in every design the prototype simulated. Per-metric adjusted
p-values name the metric that deviates.

Feasibility, and the default design
-----------------------------------
Before the test, :func:`lossless_feasibility` asks whether the design could
show a 3x degradation of every metric with 90 % power under a stress model
(:func:`reference_deviations`: chi-square(2) deviations, the hardest of the
distributions simulated). 4 + 4 processes (ABBAABBA) have the floor 1/70 but
only 3 labelings in the rejection region and 62–64 % power: INCONCLUSIVE,
naming the baseline blocks still needed. Two lossless control blocks per
duration (``protocol.lossless_baseline_blocks``) give 6 + 4 and 94 %. The
baseline blocks of every series at the duration are baseline processes too.

A truly lossless candidate ends FAIL in exactly ``floor(α L) / L`` of
campaigns for any distribution (``L = C(B+C, C)``; 4.76 % at 6 + 4 and α
0.05). α holds per candidate and duration, so over two durations a truly
lossless candidate's lossless verdict is FAIL in about 9 %
(tests_unit/stats/test_error_rates.py); holding 5 % over both would need α/2 per
duration and, for 90 % power at α/2, 7 + 4 processes (three control blocks). Ten processes do not resolve a 3x
change on one metric only, or 1.5x on all, reliably (docs/quality.md).

A candidate-only run takes its baseline processes from today's anchors only:
the stored bundle's processes are exchangeable with today's only when the
environment is really unchanged, and a day shift in the outputs made a
lossless candidate fail far above α with them as controls
(tests_unit/quality/test_lossless_anchored.py); the verdict says so.

Deterministic baseline, and words
---------------------------------
When every baseline–baseline deviation is exactly 0, the verdict says
"deterministic baseline" and lists the candidate's deviations: any deviation
is then a reproducible change made by the candidate. There is no resolution
floor: decoded media are integers, so no deviation lies "below the 8-bit
step", and identical media deviate by exactly 0; a floor would be a quality
tolerance, which belongs to the absolute gates. EXACT: every candidate output
decodes to the same frames and PCM as its matched baseline output. PASS is
printed only as "no deviation beyond the control variability detected
(processes, test, p)", never as "identical". FAIL names each deviating
metric. INCONCLUSIVE: an infeasible design, a metric not measured for every
pair, or no candidate output; the absolute thresholds alone are never called
lossless.

References
----------
E. J. G. Pitman, JRSS Suppl. 4 (1937) 119-130. N. Mantel, Cancer Res. 27
(1967) 209-220. K. R. Clarke, Aust. J. Ecol. 18 (1993) 117-143. M. J.
Anderson, Austral Ecol. 26 (2001) 32-46. P. H. Westfall and S. S. Young,
Resampling-Based Multiple Testing, Wiley 1993. B. Phipson and G. K. Smyth,
Stat. Appl. Genet. Mol. Biol. 9 (2010) 39.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h3bench.outcome import Outcome
from h3bench.quality.checks import QualityReport, json_safe
from h3bench.quality.relabelling import (
    candidate_labelings,
    matrix_to_pairs,
    mid_ranks,
    pair_indices,
    permutation_test,
)
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS

__all__ = [
    "ALPHA",
    "DEVIATIONS",
    "Feasibility",
    "LosslessVerdict",
    "candidate_labelings",
    "deviations",
    "judge",
    "lossless_feasibility",
    "lossless_power",
    "matrix_to_pairs",
    "mid_ranks",
    "pair_indices",
    "permutation_test",
    "reference_deviations",
    "relabelling_outcomes",
    "simulated_power",
]

ALPHA = 0.05  # per candidate and duration, family-wise over the metrics
REQUIRED_POWER = 0.90  # against a 3x degradation of every metric, under the stress model


def _similarity(v: float) -> float:
    return max(0.0, 1.0 - v)  # float32 rounding can put a similarity a hair above 1


DEVIATIONS: dict[str, Callable[[float], float]] = {
    "ssim": _similarity,
    "psnr_db": lambda v: 0.0 if math.isinf(v) else 10.0 ** (-v / 10.0),
    "lpips": lambda v: v,
    "audio_spectral_cosine": _similarity,
    "audio_rms_ratio": lambda v: abs(math.log(v)) if v > 0 else math.inf,
}


def deviations(report: QualityReport) -> dict[str, float | None]:
    """The deviation of each metric of one comparison; None where it was not measured."""
    out: dict[str, float | None] = {}
    for name, to_deviation in DEVIATIONS.items():
        value = getattr(report, name)
        out[name] = None if value is None else to_deviation(float(value))
    return out


# -- feasibility ------------------------------------------------------------------------------


def reference_deviations(
    rng: np.random.Generator, n_sims: int, n_baseline: int, n_candidate: int, n_metrics: int, effect: float
) -> np.ndarray:
    """The stress model behind :func:`lossless_feasibility`: ``(S, M, 1, P)`` pair deviations.

    Chi-square deviations with 2 degrees of freedom (an MSE of two squares,
    the most dispersed of the distributions simulated and the hardest), one
    compared request per pair, the metrics of one comparison correlated 0.5
    (a Gaussian copula), candidate–baseline pairs scaled by ``effect``. The
    chi-square(2)/2 quantile of a normal z is ``-ln(1 - Φ(z)) = -ln Φ(-z)``.
    """
    from scipy.special import log_ndtr

    rows, cols = pair_indices(n_baseline + n_candidate)
    shared = rng.standard_normal((n_sims, 1, 1, len(rows)))
    own = rng.standard_normal((n_sims, n_metrics, 1, len(rows)))
    d = -log_ndtr(-(math.sqrt(0.5) * shared + math.sqrt(0.5) * own))
    cross = (rows < n_baseline) ^ (cols < n_baseline)
    return np.where(cross, effect * d, d)


# The seeded powers of the reference design, computed ahead by ``python -m h3bench.quality.power_table``
# (tests_unit/quality/test_power_table.py recomputes them): every campaign's plan, schedule and verdict ask
# for the same few dozen, and each costs about a CPU-second to simulate.
POWER_TABLE = "lossless_power.json"
REFERENCE = (3.0, 2000, 20261)  # the effect, simulations and seed the table holds


def power_key(n_baseline: int, n_candidate: int, alpha: float, n_metrics: int) -> str:
    return f"{n_baseline},{n_candidate},{alpha:.12g},{n_metrics}"


@functools.lru_cache(maxsize=1)
def power_table() -> Mapping[str, float]:
    """The shipped powers of the reference design by :func:`power_key` (empty if the file is missing)."""
    import json
    from importlib.resources import files

    try:
        return json.loads((files("h3bench") / "data" / POWER_TABLE).read_text(encoding="utf-8"))["power"]
    except FileNotFoundError:
        return {}


@functools.lru_cache(maxsize=256)
def lossless_power(
    n_baseline: int, n_candidate: int, alpha: float = ALPHA, n_metrics: int = 5, effect: float = 3.0,
    n_sims: int = 2000, seed: int = 20261,
) -> float:
    """Power of the test against an ``effect``-x degradation of every metric under the stress model.

    Seeded, so deterministic; Monte-Carlo SE about 0.7 % near 90 %. The
    reference design's figures come from :func:`power_table` where it has
    them (the same numbers :func:`simulated_power` gives), else are simulated.
    """
    if n_baseline < 2 or n_candidate < 1 or alpha * math.comb(n_baseline + n_candidate, n_candidate) < 1:
        return 0.0  # the floor 1/L is above alpha
    if (effect, n_sims, seed) == REFERENCE:
        known = power_table().get(power_key(n_baseline, n_candidate, alpha, n_metrics))
        if known is not None:
            return known
    return simulated_power(n_baseline, n_candidate, alpha, n_metrics, effect, n_sims, seed)


def simulated_power(n_baseline: int, n_candidate: int, alpha: float, n_metrics: int, effect: float, n_sims: int,
                    seed: int) -> float:
    """:func:`lossless_power` by simulation: ``n_sims`` seeded draws of the stress model through the test."""
    labelings = candidate_labelings(n_baseline, n_candidate, max_exact=20_000, n_random=1_999, seed=seed)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_sims, 250):
        d = reference_deviations(rng, min(250, n_sims - start), n_baseline, n_candidate, n_metrics, effect)
        p, _ = permutation_test(d, n_baseline, n_candidate, labelings=labelings)
        hits += int((p <= alpha).sum())
    return hits / n_sims


@dataclass(frozen=True)
class Feasibility:
    """Whether a design can show a 3x degradation, decided before any output is compared."""

    feasible: bool
    min_p: float  # 1 / C(B+C, C)
    needed_baseline_blocks: int  # more baseline processes that would make it feasible; 0 when it is
    power: float  # under the stress model, at this design


def lossless_feasibility(
    n_baseline: int, n_candidate: int, alpha: float = ALPHA, n_metrics: int = 5, *,
    required_power: float = REQUIRED_POWER,
) -> Feasibility:
    """Feasible when the seeded power against 3x under :func:`reference_deviations` reaches ``required_power``.

    That also needs the floor ``1 / C(B+C, C)`` to be at most ``alpha``.
    Measured at α 0.05 with 5 metrics: with 4 candidate processes 6
    baseline processes are needed (4 + 4 gives 0.64, 5 + 4 0.87, 6 + 4 0.95).
    """
    if n_candidate < 1:
        raise ValueError("need at least one candidate process")
    min_p = 1.0 / math.comb(n_baseline + n_candidate, n_candidate) if n_baseline >= 2 else 1.0
    power = lossless_power(n_baseline, n_candidate, alpha, n_metrics)
    extra = 0
    while lossless_power(n_baseline + extra, n_candidate, alpha, n_metrics) < required_power:
        extra += 1
        if n_baseline + extra > 40:
            raise ValueError("no number of baseline blocks up to 40 makes this design feasible")
    return Feasibility(extra == 0, min_p, extra, power)


def relabelling_outcomes(
    pair_deviations: np.ndarray, n_baseline: int, n_candidate: int, *, alpha: float = ALPHA,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Feasibility]:
    """The decision of :func:`judge` over leading batch axes: INCONCLUSIVE, FAIL or PASS codes.

    INCONCLUSIVE (0) when the design is infeasible; otherwise FAIL (-1)
    when the test's p is at most ``alpha``, else PASS (1). Returns the codes,
    the global and per-metric p-values (NaN when infeasible) and the
    feasibility; ``pair_deviations`` as in :func:`permutation_test`.
    """
    x = np.asarray(pair_deviations, dtype=float)
    feasibility = lossless_feasibility(n_baseline, n_candidate, alpha, x.shape[-3])
    if not feasibility.feasible:
        return (np.full(x.shape[:-3], INCONCLUSIVE, np.int8), np.full(x.shape[:-3], np.nan),
                np.full(x.shape[:-2], np.nan), feasibility)
    p_global, p_metric = permutation_test(x, n_baseline, n_candidate)
    return np.where(p_global <= alpha, FAIL, PASS).astype(np.int8), p_global, p_metric, feasibility


# -- the verdict -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LosslessVerdict:
    """The lossless judgement of one candidate at one duration, with every reason."""

    outcome: Outcome
    reasons: tuple[str, ...]
    baseline_processes: int
    candidate_processes: int
    alpha: float
    labelings: int = 0
    p_value: float | None = None
    p_by_metric: dict[str, float] = field(default_factory=dict)
    deterministic_baseline: bool = False
    feasibility: Feasibility | None = None
    exact: bool = False  # every candidate output decodes bitwise equal to its matched baseline: the strongest PASS

    @property
    def label(self) -> str:
        """``EXACT`` for bitwise-equal outputs, else the outcome."""
        return "EXACT" if self.exact else str(self.outcome)

    def to_dict(self) -> dict[str, Any]:
        return dict(json_safe(self))


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def judge(
    matrices: Mapping[str, np.ndarray],
    n_baseline: int,
    *,
    exact: bool,
    metrics: Sequence[str],
    alpha: float = ALPHA,
    caveats: Sequence[str] = (),
) -> LosslessVerdict:
    """Judge one candidate at one duration from its process × process deviation matrices.

    Parameters
    ----------
    matrices
        Per metric, ``(R, N, N)`` symmetric deviations between processes
        (the ``n_baseline`` baseline processes first), NaN where not
        measured; the diagonal is ignored.
    n_baseline
        ``B``; the other ``N - B`` processes are the candidate's.
    exact
        Every candidate output decodes bitwise equal to its matched
        baseline output: EXACT.
    metrics
        The metrics that must be measured for every pair.
    alpha
        Family-wise level over the metrics.
    caveats
        Further reasons that go with any PASS or FAIL (a candidate-only
        run's cross-day assumption).
    """
    n = next(iter(matrices.values())).shape[-1] if matrices else n_baseline
    n_candidate = n - n_baseline
    counted = (f"{n_baseline} baseline + {n_candidate} candidate server processes "
               f"(the independent units; their {math.comb(n, 2)} pairs are not independent)")

    def verdict(outcome: Outcome, *reasons: str, **found: Any) -> LosslessVerdict:
        return LosslessVerdict(outcome, reasons, n_baseline, n_candidate, alpha, **found)

    if n_candidate < 1:
        return verdict(Outcome.INCONCLUSIVE, "no candidate output was compared")
    if exact:
        return verdict(Outcome.PASS, f"every output of the {n_candidate} candidate processes decodes bitwise equal to "
                                "its matched baseline output", exact=True)
    unmeasured = [m for m in metrics if m not in matrices or np.isnan(matrix_to_pairs(matrices[m])).any()]
    if unmeasured:
        return verdict(Outcome.INCONCLUSIVE, f"not measured for every process pair: {', '.join(unmeasured)}; "
                                       "absolute thresholds alone are never called lossless")
    pairs = np.stack([matrix_to_pairs(np.asarray(matrices[m], dtype=float)) for m in metrics])  # (M, R, P)
    rows, cols = pair_indices(n)
    within = (rows < n_baseline) & (cols < n_baseline)
    cross = (rows < n_baseline) ^ (cols < n_baseline)
    values = np.median(pairs, axis=1)
    control_max = {m: float(values[i, within].max()) if within.any() else math.nan for i, m in enumerate(metrics)}
    cross_median = {m: float(np.median(values[i, cross])) for i, m in enumerate(metrics)}
    cross_max = {m: float(values[i, cross].max()) for i, m in enumerate(metrics)}
    deterministic = bool(within.any()) and all(v == 0.0 for v in control_max.values())
    determinism = [] if not deterministic else [
        f"deterministic baseline: all {int(within.sum())} pairs of the {n_baseline} baseline processes have deviation "
        "exactly 0 on every metric, so any deviation is a reproducible change made by the candidate; candidate "
        "deviations (median, max over candidate-baseline pairs): "
        + ", ".join(f"{m} {_fmt(cross_median[m])}, {_fmt(cross_max[m])}" for m in metrics)]
    code, p_global, p_metric, feasibility = relabelling_outcomes(pairs, n_baseline, n_candidate, alpha=alpha)
    if code == INCONCLUSIVE:
        return verdict(
            Outcome.INCONCLUSIVE,
            f"{counted}: a process-relabelling test has {math.comb(n, n_candidate)} labelings, smallest p "
            f"{_fmt(feasibility.min_p)}, and {feasibility.power:.0%} power against a 3x deviation at level {alpha:g}; "
            f"it cannot reach {REQUIRED_POWER:.0%}: {feasibility.needed_baseline_blocks} more baseline block(s) per "
            "duration would be needed",
            *determinism, *caveats, deterministic_baseline=deterministic, feasibility=feasibility)
    labelings = candidate_labelings(n_baseline, n_candidate)
    p = float(p_global)
    by_metric = {m: float(v) for m, v in zip(metrics, p_metric, strict=True)}
    kind = "exact" if labelings.shape[0] == math.comb(n, n_candidate) else "Monte-Carlo"
    test = (f"{kind} process-relabelling rank test, max-T over {len(metrics)} metrics, {labelings.shape[0]} "
            f"labelings, p = {p:.3g}")
    found = {"labelings": labelings.shape[0], "p_value": p, "p_by_metric": by_metric,
             "deterministic_baseline": deterministic, "feasibility": feasibility}
    if code == FAIL:
        lines = [f"deviation beyond the control variability ({counted}, {test} <= {alpha:g})"]
        lines += [f"{m}: candidate-baseline median {_fmt(cross_median[m])} (max {_fmt(cross_max[m])}) against "
                  f"baseline-baseline max {_fmt(control_max[m])}, adjusted p = {by_metric[m]:.3g}"
                  for m in metrics if by_metric[m] <= alpha]
        return verdict(Outcome.FAIL, *determinism, *lines, *caveats, **found)
    return verdict(Outcome.PASS, f"no deviation beyond the control variability detected ({counted}, {test} > {alpha:g})",
                   "this is not a proof of identical output", *determinism, *caveats, **found)
