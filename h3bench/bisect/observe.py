"""What one campaign of a bisection showed, read back from its sealed bundle.

:func:`observe` reads a campaign's results, whether this process ran it or
another host did (``--take``), so a resume and a fan-in reach what the run
reached: whether the commit was measured, skipped (its server failed to
start or serve), broken (its output failed a gate) or invalid (the good
engine's blocks failed, or the host's); the paired log ratios; the gates'
count; the campaign's own speed decision; its device time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from h3bench.bisect.probe import Step
from h3bench.bisect.specs import duration_of
from h3bench.course.design import budget_of
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import require_verified
from h3bench.evidence.verify import final_sha256
from h3bench.outcome import Outcome
from h3bench.run.records import FailureKind, series_blocks
from h3bench.runspec import BASELINE, RunSpec
from h3bench.session.results import Results
from h3bench.session.revalidation import load_quality
from h3bench.session.settings import Settings
from h3bench.stats import intervals, sequential
from h3bench.stats.blockstat import block_log_statistics
from h3bench.verdict.assemble import candidate_verdicts
from h3bench.verdict.device import device_time
from h3bench.verdict.verdicts import duration_key

__all__ = ["SERVING_FAILURES", "Observation", "observe", "observe_bundle", "pair_log_ratios", "verify_fields"]

# A commit's block that ends so is the commit's own failure to start or serve: the commit is skipped. Any
# other (resource interference: the host's) makes the probe invalid, as a failed block of the good engine does.
SERVING_FAILURES = {FailureKind.START, FailureKind.REQUEST, FailureKind.ATTENTION, FailureKind.CLEANUP,
                    FailureKind.SHUTDOWN, FailureKind.AUDIT, FailureKind.ERROR}


@dataclass(frozen=True)
class Observation:
    """What one campaign's sealed bundle shows for the bisection."""

    bundle: Path
    final_sha256: str
    spec_id: str
    status: str  # "measured", "skipped" (the commit's server), "broken" (its output), "invalid" (the good engine's)
    reason: str
    log_ratios: tuple[float, ...]
    failing: int  # matched pairs that failed a gate, of ``matched``
    matched: int
    speed: str  # the campaign's speed decision ("slower", "faster", "last look", ...; "" for a probe)
    speed_outcome: Outcome
    quality: Outcome | None
    interval: tuple[float, float, float] | None  # ratio, lower, upper of the campaign's own look
    device_s: float
    reasons: tuple[str, ...] = ()


def pair_log_ratios(results: Results, spec: RunSpec, candidate: str) -> tuple[float, ...]:
    """The paired log ratios (candidate over control) of the series' complete pairs, as a campaign pairs them."""
    budget = budget_of(spec)
    blocks = series_blocks(results.series(duration_of(spec), candidate), budget)
    pairs = len(blocks) // 2
    if pairs == 0:
        return ()
    used = blocks[: 2 * pairs]
    samples = np.array([[*b.measured, *([b.audit] if budget.audit else [])] for b in used], dtype=float)
    order = "".join(b.role for b in used)
    return tuple(float(v) for v in intervals.paired_log_ratios(block_log_statistics(samples[None], budget), order)[0])


def observe(results: Results, spec: RunSpec) -> Observation:
    """What a campaign of the bisection showed, from its results (a live run's, or a sealed bundle's)."""
    candidate = next(name for name in spec.arms if name != BASELINE)
    duration = duration_of(spec)
    ran = results.series(duration, candidate)
    status, reason = "measured", ""
    for result in ran:
        failure = result.failure
        if failure is None:
            continue
        if failure.kind is FailureKind.INTERRUPTED:
            raise UsageError(f"{results.bundle_path}: interrupted at {result.block.id}; resume it first")
        if result.block.letter == "A" or failure.kind not in SERVING_FAILURES:  # the good engine's, or the host's
            status, reason = "invalid", f"{result.block.id}: {failure.headline}"
        else:
            status, reason = "skipped", f"{result.block.id}: {failure.headline}"
        break
    pairs = results.judge.pairs_of(candidate, duration)
    failing = sum(1 for p in pairs if p.outcome is Outcome.FAIL)
    quality = results.judge.quality_outcome(pairs) if pairs else None
    if status == "measured" and failing:
        worst = next(p for p in pairs if p.outcome is Outcome.FAIL)
        status, reason = "broken", f"{worst.id}: {', '.join(worst.failing)}"
    decision = results.decision(duration, candidate)
    speed_outcome, speed = Outcome.INCONCLUSIVE, ""
    interval = None
    if decision is not None and None not in (decision.ratio, decision.lower, decision.upper):
        speed = sequential.REASONS[decision.reason_code] if decision.stop else "continue"
        speed_outcome = decision.outcome
        interval = (float(decision.ratio or 0.0), float(decision.lower or 0.0), float(decision.upper or 0.0))
    verdict = candidate_verdicts(results).get(candidate)
    reasons: tuple[str, ...] = ()
    if verdict is not None and duration_key(duration) in verdict.durations:
        reasons = tuple(verdict.durations[duration_key(duration)].speed_reasons)
    device = sum(d.device_s for d in device_time(spec, results.schedule.blocks, results.ran).values())
    path = results.bundle.path
    seal = final_sha256(path)
    if seal is None:
        raise EvidenceError(f"{path}: the bundle is not sealed; only a sealed campaign enters the bisection",
                            path=str(path))
    return Observation(path, seal, spec.spec_id, status, reason, pair_log_ratios(results, spec, candidate),
                       failing, len(pairs), speed, speed_outcome, quality, interval, device, reasons)


def observe_bundle(path: Path, lpips_dir: Path | None = None) -> tuple[RunSpec, Observation]:
    """A sealed campaign bundle, verified, and what it showed."""
    require_verified(path, "it is not taken into the bisection")
    settings = Settings.for_bundle(path, lossless=False, lpips_dir=str(lpips_dir) if lpips_dir else None,
                                   lpips_device="cpu")
    results = Results.from_bundle(path, settings, verified=True)
    load_quality(results)
    return results.spec, observe(results, results.spec)


def verify_fields(seen: Observation, quality: bool, futile: str = "") -> dict[str, Any]:
    """What a verify showed: whether it reproduced the regression and why not, and the step its pairs measure
    (a speed bisection). ``futile``: why its futility stop ended it, unless it said "slower" first."""
    if quality:
        reproduced = seen.quality is Outcome.FAIL
        why = (f"{seen.failing} of {seen.matched} matched pairs fail a gate" if reproduced else
               f"the bad engine's outputs pass every gate ({seen.matched} matched pairs)")
    else:
        reproduced = seen.speed == sequential.REASONS[sequential.FAILED] and seen.status == "measured"
        if seen.status != "measured":
            why = f"the bad engine could not be measured: {seen.status}: {seen.reason}"
        elif reproduced:
            why = "the bad engine is slower than the good one at the campaign's own levels"
        else:
            why = futile or f"the step does not reproduce at the campaign's own levels ({seen.speed or 'no decision'})"
    step = None
    if not quality and len(seen.log_ratios) >= 2:
        try:
            found = Step.from_log_ratios(list(seen.log_ratios))
            low, high = found.interval()
            step = {"ratio": found.ratio, "low": low, "high": high, "spread": found.spread, "pairs": found.pairs}
        except UsageError:
            step = None
    return {"reproduced": reproduced, "why": why, "futile": bool(futile) and not reproduced, "step": step,
            "interval": seen.interval, "speed": seen.speed, "speed_reasons": list(seen.reasons), "log_lr": 0.0}
