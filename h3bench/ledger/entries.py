"""One ledger entry per candidate and duration of a sealed bundle: what was tried, why, and how it ended.

An entry holds the spec id and the SHA-256 of the bundle's ``final.json``
(which lists the hash of every other file, so it pins the whole bundle),
the hardware kind, the candidate with its hypothesis and source attribution,
the effect with its interval (the paired AB/BA ratio of :mod:`h3bench.stats.speed`,
recomputed from the bundle's samples), the quality, lossless and held-out
outcomes, and the verdict:

- **rejected** when any part failed (speed slower, a quality gate, the
  lossless test, held-out), or when ``final.json`` says the candidate was
  not accepted although every part here passed (its reasons are kept);
- **inconclusive** when no part failed but one could not be decided;
- **accepted** when every part passed.

Engine claims (the source commit, the image) and harness claims (the
h3bench version, the validator versions that judged the run) are kept in
separate sections, so a change of validator is never read as a change of
the engine. A part that did not run is written as ``NOT_RUN``, never guessed.
"""

from __future__ import annotations

from typing import Any

from h3bench.errors import UsageError
from h3bench.outcome import Outcome, combine
from h3bench.runspec.schedule import series_of
from h3bench.session.stored import StoredBundle
from h3bench.stats import speed as stats
from h3bench.stats.intervals import Levels, error_levels

__all__ = ["ACCEPTED", "FORMAT", "INCONCLUSIVE", "NOT_RUN", "REJECTED", "entries_of", "refuse_diagnostic"]

FORMAT = "h3bench-ledger/1"
ACCEPTED, REJECTED, INCONCLUSIVE = "accepted", "rejected", "inconclusive"
NOT_RUN = "NOT_RUN"
_OUTCOMES = {"PASS": Outcome.PASS, "EXACT": Outcome.PASS, "FAIL": Outcome.FAIL}
_VERDICTS = {Outcome.PASS: ACCEPTED, Outcome.FAIL: REJECTED, Outcome.INCONCLUSIVE: INCONCLUSIVE}


def refuse_diagnostic(bundle: StoredBundle) -> None:
    """A DIAGNOSTIC bundle is exploration, not evidence: it never enters the ledger."""
    if bundle.diagnostic:
        raise UsageError(
            f"{bundle.path}: a DIAGNOSTIC run (not a campaign result) cannot be entered in the ledger as evidence; "
            "run the campaign formally (pinned, not diagnostic) and add that bundle"
        )


def _effect(candidate: str, duration: float, margin: float, results: list[Any], levels: Levels) -> dict[str, Any]:
    """The paired ratio with its bounds at the campaign's own error levels, recomputed from the samples."""
    blocks = [stats.BlockSamples(r.block.letter, r.latencies) for r in results
              if r.block.candidate == candidate and r.block.duration == duration and r.failure is None
              and r.latencies]
    if {b.role for b in blocks} != {"A", "B"}:
        return {"ratio": None, "ci_low": None, "ci_high": None, "k": 0,
                "why": "no successful block of both arms in this bundle"}
    estimate = stats.speed_report(blocks, margin=margin, levels=levels).estimate
    return {"ratio": estimate.geomean, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high,
            "levels": {"low": levels.fail_level, "high": levels.pass_level}, "k": estimate.k, "design": estimate.design,
            "why": None if estimate.ci_low is not None else "; ".join(estimate.notes)}


def _part(name: str, value: Any, reasons: list[str]) -> tuple[str, Outcome]:
    """One part of the verdict: its outcome, with a reason added when it is not a plain PASS."""
    outcome = _OUTCOMES.get(str(value), Outcome.INCONCLUSIVE)
    if outcome is not Outcome.PASS:
        reasons.append(f"{name}: {value}")
    return name, outcome


def _verdict(duration_verdict: dict[str, Any] | None, heldout: dict[str, Any] | None,
             acceptance: dict[str, Any] | None, stopped: str | None) -> tuple[str, list[str]]:
    reasons: list[str] = []
    if duration_verdict is None:
        return INCONCLUSIVE, ["no verdict for this duration in the bundle (verdict.json absent or incomplete)"]
    parts = [_part("speed", duration_verdict.get("speed"), reasons)]
    if parts[0][1] is not Outcome.PASS:
        reasons.extend(duration_verdict.get("speed_reasons", [])[:1])
    parts.append(_part("quality", duration_verdict.get("quality"), reasons))
    if "lossless" in duration_verdict:
        parts.append(_part("lossless", duration_verdict["lossless"], reasons))
    if heldout is not None:
        parts.append(_part("held-out", heldout.get("verdict"), reasons))
        if parts[-1][1] is not Outcome.PASS:
            reasons.extend(str(r) for r in heldout.get("reasons", []))
    if stopped:
        reasons.append(f"stopped: {stopped}")
    verdict = _VERDICTS[combine(outcome for _, outcome in parts)]
    if acceptance is not None and not acceptance.get("accepted"):
        reasons.extend(f"not accepted: {r}" for r in acceptance.get("reasons", []) or ["(no reason given)"])
        verdict = REJECTED if verdict == ACCEPTED else verdict
    return verdict, reasons


def entries_of(bundle: StoredBundle) -> list[dict[str, Any]]:
    """The ledger entries of a verified, non-diagnostic bundle: one per candidate and duration, chain fields aside."""
    refuse_diagnostic(bundle)
    spec = bundle.runspec()
    results = bundle.block_results()
    verdict_doc = bundle.verdict()
    campaign = bundle.campaign_acceptance()
    outcome = bundle.final.get("outcome")
    entries = []
    for candidate in spec.candidates:
        per_candidate = (verdict_doc.get("candidates") or {}).get(candidate) or {}
        for duration in spec.workload.durations:
            key = f"{duration:g}"
            heldout = bundle.heldout(candidate, key)
            verdict, reasons = _verdict((per_candidate.get("durations") or {}).get(f"{key}s"), heldout,
                                        bundle.acceptance(candidate), per_candidate.get("stopped"))
            if outcome != "completed":
                reasons.append(f"the run ended {outcome}: {bundle.final.get('interrupted') or bundle.final.get('error')}")
            durations = (per_candidate.get("durations") or {}).get(f"{key}s") or {}
            entries.append({
                "format": FORMAT,
                "bundle": {"path": str(bundle.path), "name": bundle.path.name, "started_at": bundle.started_at,
                           "final_sha256": bundle.final_sha256, "outcome": outcome},
                "spec_id": bundle.spec_id,
                "spec_name": spec.name,
                "hardware": bundle.hardware_kind,
                "candidate": candidate,
                "duration": key,
                **bundle.attribution(candidate),
                "effect": _effect(candidate, duration, spec.gates.speed_margin, results,
                                  error_levels(len(spec.workload.durations), len(series_of(spec)))),
                "quality": durations.get("quality", NOT_RUN),
                "lossless": durations.get("lossless", NOT_RUN),
                "heldout": heldout if heldout is not None else NOT_RUN,
                "verdict": verdict,
                "reasons": reasons,
                "final_combination": campaign is not None and campaign.get("final") == candidate,
                "campaign": campaign if campaign is not None else NOT_RUN,
                "engine": bundle.engine(),
                "harness": bundle.harness(),
            })
    return entries
