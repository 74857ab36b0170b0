"""The campaign as research: effects side by side, the interaction check, held-out results, acceptance, profiles.

Every candidate and the final combination are measured directly against the
same control in their own AB/BA blocks; the summary shows their ratios side
by side, each with its interval. Percentages from separate cohorts are never
added or multiplied into a prediction: the product of the individual ratios
of the arms a combination combines appears only beside its measured ratio, as
a labelled **interaction check**, never as a result.

Acceptance (``final.json``'s ``accepted``): a candidate is accepted when its
formal verdict is PASS (every duration) and, when the spec has ``[heldout]``,
its held-out verdict is PASS at every duration. The campaign is accepted only
when the spec names a ``final`` combination, that arm is accepted, and its
direct comparison with the ``original_baseline`` passed at every duration.
A DIAGNOSTIC run accepts nothing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from h3bench.h3 import STAGE_PREFIX
from h3bench.outcome import Outcome, combine
from h3bench.plan.preflight import DIAGNOSTIC
from h3bench.run.profiling import PROFILE
from h3bench.runspec.schedule import series_of

if TYPE_CHECKING:
    from h3bench.session.results import Review
    from h3bench.verdict.verdicts import CandidateVerdict

__all__ = ["DIAGNOSTIC_VERDICT", "acceptance", "diagnostic_lines", "heldout_candidates", "research_lines"]

DIAGNOSTIC_VERDICT = f"{DIAGNOSTIC} (not a campaign result)"


def heldout_candidates(review: Review) -> list[str]:
    """The candidates the formal blocks did not reject (PASS, or INCONCLUSIVE): the ones the held-out phase checks.

    An INCONCLUSIVE speed estimate is checked as well, so that its held-out
    result is known; acceptance still needs the formal PASS.
    """
    verdicts = review.verdicts()
    return [c for c in review.spec.candidates if verdicts[c].outcome is not Outcome.FAIL]


def _direct_series(review: Review) -> str:
    spec = review.spec
    assert spec.final is not None
    return next(s.name for s in series_of(spec) if s.arm == spec.final and s.control == spec.final_control)


def acceptance(review: Review, heldout: dict[str, dict[str, dict[str, Any]]], *, diagnostic: bool) -> dict[str, Any]:
    """``{"final", "accepted", "reasons", "candidates": {arm: {"accepted", "reasons"}}}`` for final.json."""
    spec, verdicts = review.spec, review.verdicts()
    durations = [f"{d:g}s" for d in spec.workload.durations]
    candidates: dict[str, dict[str, Any]] = {}
    for name in spec.candidates:
        verdict, reasons = verdicts[name], []
        if diagnostic:
            reasons.append(f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing")
        if verdict.outcome is not Outcome.PASS:
            stop = f" ({verdict.stopped.reason})" if verdict.stopped else ""
            reasons.append(f"formal verdict {verdict.outcome}{stop}")
        elif spec.heldout is not None:
            found = heldout.get(name, {})
            for duration in durations:
                result = found.get(duration)
                if result is None:
                    reasons.append(f"held-out {duration}: not run")
                elif result["verdict"] != str(Outcome.PASS):
                    reasons.append(f"held-out {duration}: {result['verdict']}: {'; '.join(result['reasons'])}")
        accepted = not reasons
        if accepted:
            reasons.append("formal PASS at every duration" + (", held-out PASS at every duration"
                                                               if spec.heldout is not None else
                                                               "; no [heldout] table, so not checked beyond seed "
                                                               f"{spec.workload.seed}"))
        candidates[name] = {"accepted": accepted, "reasons": reasons}
    reasons = []
    if spec.final is None:
        reasons.append("the spec names no final combination (final = ...): no campaign acceptance")
    else:
        if not candidates[spec.final]["accepted"]:
            reasons.append(f"final {spec.final!r} is not accepted: {'; '.join(candidates[spec.final]['reasons'])}")
        direct = _direct_series(review)
        for key, d in verdicts[direct].durations.items():
            outcome = combine(d.outcomes)
            if outcome is not Outcome.PASS:
                reasons.append(f"direct comparison of {spec.final!r} with {spec.final_control!r} at {key}: "
                               f"{outcome} (speed {d.speed}: {d.speed_reasons[0]}; quality {d.quality})")
        stopped = verdicts[direct].stopped
        if stopped is not None:
            reasons.append(f"direct comparison stopped: {stopped.reason}")
    accepted = spec.final is not None and not reasons and not diagnostic
    if diagnostic and spec.final is not None:
        reasons.append(f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing")
    if accepted:
        reasons.append(f"{spec.final!r} passed against {spec.final_control!r} at every duration, formal and held-out")
    return {"final": spec.final, "accepted": accepted, "reasons": reasons, "candidates": candidates}


def _ratio(review: Review, duration: float, series: str) -> tuple[float, str] | None:
    speed = review.speed(duration, series)
    if speed is None:
        return None
    est = speed.estimate
    if est.geomean is None:
        return None
    interval = f"[{est.ci_low:.4f}, {est.ci_high:.4f}]" if est.ci_low is not None else "no interval"
    return est.geomean, f"{est.geomean:.4f} {interval}"


def _effect_lines(review: Review, verdicts: dict[str, CandidateVerdict], heldout: dict[str, Any]) -> list[str]:
    spec = review.spec
    lines = ["research: each effect measured directly in its own AB/BA blocks (ratio candidate/control with its "
             "bounds); effects from separate cohorts are never added or multiplied into a result"]
    for duration in spec.workload.durations:
        for series in series_of(spec):
            measured = _ratio(review, duration, series.name)
            role = " (final)" if series.arm == spec.final and series.control == spec.final_control else ""
            held = heldout.get(series.name, {}).get(f"{duration:g}s") if series.name == series.arm else None
            lines.append(f"  {duration:g}s {series.arm + role:<22} vs {series.control:<12} "
                         f"ratio {measured[1] if measured else 'not measured':<28} "
                         f"formal {combine(verdicts[series.name].durations[f'{duration:g}s'].outcomes)}"
                         + (f", held-out {held['verdict']}" if held else ""))
        for name, arm in spec.arms.items():
            parts = [_ratio(review, duration, part) for part in arm.combination_of]
            combined = _ratio(review, duration, name)
            if arm.combination_of and combined and all(parts):
                product = math.prod(p[0] for p in parts if p)
                lines.append(f"  {duration:g}s interaction check (NOT a result): product of the individual ratios "
                             f"of {' × '.join(arm.combination_of)} = {product:.4f}, beside {name}'s measured "
                             f"{combined[0]:.4f} ({combined[0] / product - 1:+.1%} interaction)")
    return lines


def _profile_lines(review: Review) -> list[str]:
    lines = []
    for record in review.bundle.samples(PROFILE):
        where = f"profile {record['duration']:g}s {record['arm']} ({record['block_id']}):"
        note = (record.get("profiler") or {}).get("note", "")
        if not record.get("ok"):
            lines.append(f"{where} not profiled: {record.get('error') or note}")
            continue
        stages = record.get("stage_durations") or {}
        shown = ", ".join(f"{key.removeprefix(STAGE_PREFIX)} {value:.3f}" for key, value in stages.items()) \
            or "no stages"
        traces = record.get("traces") or []
        size = sum(t.get("size", 0) for t in traces)
        lines.append(f"{where} E2E {record.get('e2e_s', 0.0):.3f} s; stages [s]: {shown}; "
                     f"{len(traces)} trace file(s), {size} bytes ({note})")
    return lines


def research_lines(review: Review, heldout: dict[str, Any] | None, accepted: dict[str, Any] | None) -> list[str]:
    """The research section of the summary: effects side by side, held-out, acceptance, profiles."""
    verdicts = review.verdicts()
    lines = _effect_lines(review, verdicts, heldout or {})
    for candidate, per_duration in (heldout or {}).items():
        for duration, result in per_duration.items():
            lines.append(f"held-out {candidate} {duration}: {result['verdict']}: "
                         f"{'; '.join(result['reasons'])}")
    if accepted is not None:
        for name, item in accepted["candidates"].items():
            lines.append(f"candidate {name}: {'accepted' if item['accepted'] else 'rejected'}: "
                         f"{'; '.join(item['reasons'])}")
        if accepted["final"] is not None:  # without a final combination there is no campaign to accept
            lines.append(f"campaign acceptance (final {accepted['final']}): "
                         f"{'ACCEPTED' if accepted['accepted'] else 'NOT accepted'}: {'; '.join(accepted['reasons'])}")
    lines += _profile_lines(review)
    return lines


def diagnostic_lines(lines: list[str]) -> list[str]:
    """Every line of a DIAGNOSTIC run's summary starts with the word."""
    return [line if line.startswith(DIAGNOSTIC) else f"{DIAGNOSTIC} {line}" for line in lines]

