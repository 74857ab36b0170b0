"""Lossless mode: the candidate's deviations against the baseline's own variability.

The campaign's lossless follow-up (REFERENCE §7, seeds/campaign-issue-293.txt)
says the absolute gates cannot show "no degradation": dense-baseline
repetitions already differ in their decoded PCM. So every deviation metric
gets a **control envelope** from control pairs (baseline outputs of the same
inputs from different server processes), and the candidate is judged
against it.

Deviations
----------
Each metric becomes a deviation that is 0 for identical media and grows as
outputs drift apart:

======================  ==============================================
ssim                    1 − SSIM
psnr_db                 10^(−PSNR/10), the MSE over 255² (0 when PSNR = inf)
lpips                   LPIPS
audio_spectral_cosine   1 − cosine
audio_rms_ratio         |ln(ratio)|
======================  ==============================================

Envelope
--------
For each metric, the envelope is the worst (largest) control deviation times
``1 + tolerance`` (the RunSpec's ``gates.control_envelope_tolerance``,
default 1.0, i.e. twice the worst control). A candidate deviation inside
every envelope is within what the baseline does to itself; one outside any
envelope is clearly outside it, and a FAIL.

Why a factor and not the worst control alone: controls come from only a few
independent pairs of server processes (k pairs of baseline processes; all
requests of one process share its nondeterminism). A new deviation drawn from
the same distribution exceeds the largest of k with probability 1/(k + 1),
so a truly lossless candidate with several compared outputs would often
"fail" a bare maximum. Deviations such as |ln RMS ratio| are not
concentrated (they are differences of random powers), which is why the slack
is a factor rather than a few percent. A real numerical change (quantization,
sparse attention) deviates by orders of magnitude more than this.

Outcomes
--------
- EXACT: every candidate output decodes to the same frames and PCM (SHA-256
  of the decoded streams) as its matched baseline output — the strongest PASS.
- PASS: every candidate deviation lies inside its envelope.
- FAIL: some deviation lies outside its envelope.
- INCONCLUSIVE: fewer independent control pairs (pairs of distinct baseline
  server processes) than the spec requires, or a required metric not
  measured. Passing the absolute perceptual thresholds alone is never called
  lossless.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from h3bench.quality.checks import QualityReport

__all__ = ["DEVIATIONS", "Envelope", "LosslessVerdict", "deviations", "envelope", "judge"]

def _one_minus(v: float) -> float:
    return max(0.0, 1.0 - v)  # float32 rounding can put a similarity a hair above 1


def _psnr(v: float) -> float:
    return 0.0 if math.isinf(v) else 10.0 ** (-v / 10.0)


def _lpips(v: float) -> float:
    return v


def _rms(v: float) -> float:
    return abs(math.log(v)) if v > 0 else math.inf


DEVIATIONS = {
    "ssim": _one_minus,
    "psnr_db": _psnr,
    "lpips": _lpips,
    "audio_spectral_cosine": _one_minus,
    "audio_rms_ratio": _rms,
}


def deviations(report: QualityReport) -> dict[str, float | None]:
    """The deviation of each metric of one comparison; None where it was not measured."""
    out: dict[str, float | None] = {}
    for name, to_deviation in DEVIATIONS.items():
        value = getattr(report, name)
        out[name] = None if value is None else to_deviation(float(value))
    return out


@dataclass(frozen=True)
class Envelope:
    metric: str
    worst_control: float
    limit: float  # worst_control × (1 + tolerance)
    controls: int


def envelope(controls: Sequence[QualityReport], tolerance: float, metrics: Iterable[str]) -> dict[str, Envelope]:
    """Per metric, the worst control deviation widened by ``tolerance``; metrics without controls are left out."""
    result = {}
    for metric in metrics:
        values = [v for d in map(deviations, controls) if (v := d[metric]) is not None]
        if values:
            worst = max(values)
            result[metric] = Envelope(metric, worst, worst * (1.0 + tolerance), len(values))
    return result


@dataclass(frozen=True)
class LosslessVerdict:
    outcome: str  # EXACT, PASS, FAIL or INCONCLUSIVE
    reasons: tuple[str, ...]
    envelopes: dict[str, Envelope]
    control_pairs: int
    exact_pairs: int
    candidate_pairs: int

    def to_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome,
            "reasons": list(self.reasons),
            "envelopes": {k: vars(v) for k, v in self.envelopes.items()},
            "control_pairs": self.control_pairs,
            "exact_pairs": self.exact_pairs,
            "candidate_pairs": self.candidate_pairs,
        }


def judge(
    candidates: Sequence[tuple[QualityReport, bool]],
    controls: Sequence[QualityReport],
    *,
    tolerance: float,
    min_controls: int,
    independent_controls: int,
    metrics: Iterable[str] = tuple(DEVIATIONS),
) -> LosslessVerdict:
    """Judge candidate comparisons ``(report, decoded media bitwise equal)`` against the control envelope.

    ``independent_controls`` is the number of distinct pairs of baseline
    server processes behind ``controls``; it, not the number of compared
    outputs, must reach ``min_controls``.
    """
    metrics = tuple(metrics)
    exact = sum(1 for _, equal in candidates if equal)
    envelopes = envelope(controls, tolerance, metrics)

    def verdict(outcome: str, *reasons: str) -> LosslessVerdict:
        return LosslessVerdict(outcome, reasons, envelopes, len(controls), exact, len(candidates))

    if not candidates:
        return verdict("INCONCLUSIVE", "no candidate output was compared")
    if exact == len(candidates):
        return verdict("EXACT", f"all {exact} candidate outputs decode bitwise equal to their baseline outputs")
    if independent_controls < min_controls:
        return verdict(
            "INCONCLUSIVE",
            f"{independent_controls} pair(s) of distinct baseline server processes; the envelope needs {min_controls}",
        )
    missing = [m for m in metrics if m not in envelopes]
    unmeasured = sorted({m for report, _ in candidates for m, d in deviations(report).items() if m in metrics and d is None})
    if missing or unmeasured:
        return verdict(
            "INCONCLUSIVE",
            f"not measured: {', '.join(sorted(set(missing) | set(unmeasured)))}; "
            "absolute thresholds alone are never called lossless",
        )
    outside = []
    for report, _ in candidates:
        for metric, value in deviations(report).items():
            if metric in envelopes and value is not None and value > envelopes[metric].limit:
                env = envelopes[metric]
                outside.append(
                    f"{report.candidate}: {metric} deviation {value:.3g} outside the control envelope "
                    f"{env.limit:.3g} (worst of {env.controls} controls {env.worst_control:.3g})"
                )
    if outside:
        return verdict("FAIL", *dict.fromkeys(outside))  # repeated outputs of one process give one line
    return verdict(
        "PASS",
        f"every deviation of {len(candidates)} candidate outputs lies inside the envelope of "
        f"{len(controls)} control pairs ({exact} bitwise equal)",
    )
