"""The campaign as research: which candidates are accepted, and whether the campaign is.

Every candidate and the final combination are measured directly against the
same control in their own AB/BA blocks (the summary shows their ratios side
by side, :mod:`h3bench.report.terminal`); percentages from separate cohorts
are never added or multiplied into a prediction.

Acceptance (``verdict.json``'s ``accepted``): a candidate is accepted when its
formal verdict is PASS (every duration) and, when the spec has ``[heldout]``,
its held-out verdict is PASS at every duration. A run that judged only a part
(a selection, a DIAGNOSTIC run) neither accepts nor rejects: the candidate is
"not judged", naming what was left out, unless what ran already FAILed it. The campaign is accepted only
when the spec names a ``final`` combination, that arm is accepted, and its
direct comparison with the ``original_baseline`` passed at every duration.
A DIAGNOSTIC run accepts nothing, and neither does a selection (``-m``,
``-k``, ``--arm``): acceptance needs every workload of every arm. A shard of
a campaign over several hosts (``--shard I/N``) is not judged alone: it
covers its host's pairs only, and the campaign is judged by ``h3bench pool``
over every shard (:func:`shard_alone` says so, in place of a rejection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from h3bench.course.design import series_of
from h3bench.course.shards import Shard
from h3bench.outcome import Outcome
from h3bench.runspec import RunSpec
from h3bench.verdict.verdicts import (
    DIAGNOSTIC_VERDICT,
    Acceptance,
    CandidateAcceptance,
    CandidateVerdict,
    HeldoutVerdict,
    duration_key,
    key_marker,
)

__all__ = ["acceptance", "heldout_candidates", "shard_alone"]


def heldout_candidates(spec: RunSpec, verdicts: Mapping[str, CandidateVerdict]) -> list[str]:
    """The candidates the formal blocks did not reject (PASS, or INCONCLUSIVE): the ones the held-out phase checks.

    An INCONCLUSIVE speed estimate is checked as well, so that its held-out
    result is known; acceptance still needs the formal PASS.
    """
    return [c for c in spec.candidates if c in verdicts and verdicts[c].outcome is not Outcome.FAIL]


def _direct_series(spec: RunSpec) -> str:
    assert spec.final is not None
    return next(s.name for s in series_of(spec) if s.arm == spec.final and s.control == spec.final_control)


def _not_selected(keys: Sequence[str]) -> str:
    return ", ".join(map(key_marker, keys)) + " not selected"


def shard_alone(index: int, count: int) -> str:
    """What a shard's acceptance says: neither accepted nor rejected, and what to do."""
    return f"not judged alone: shard {index} of {count}; pool the shards with h3bench pool"


def _candidate(spec: RunSpec, name: str, verdict: CandidateVerdict | None, heldout: Mapping[str, HeldoutVerdict],
               diagnostic: bool, not_selected: Sequence[str]) -> CandidateAcceptance:
    failed = verdict is not None and verdict.outcome is Outcome.FAIL  # a FAIL at any duration rejects
    if not failed and (diagnostic or not_selected or verdict is None):  # nothing here can accept or reject it
        unjudged = ([f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing"] if diagnostic else []) + (
            [_not_selected(not_selected)] if not_selected else []) + (
            ["none of its blocks was selected"] if verdict is None else [])
        return CandidateAcceptance(False, tuple(unjudged), judged=False)
    reasons = []
    if diagnostic:
        reasons.append(f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing")
    if not_selected:
        reasons.append("partial run: " + _not_selected(not_selected))
    if verdict is None:
        reasons.append("not judged: none of its blocks was selected")
    elif verdict.outcome is not Outcome.PASS:
        stop = f" ({verdict.stopped.reason})" if verdict.stopped else ""
        reasons.append(f"formal verdict {verdict.outcome}{stop}")
    elif spec.heldout is not None:
        for duration in map(duration_key, spec.workload.durations):
            result = heldout.get(duration)
            if result is None:
                reasons.append(f"held-out {duration}: not run")
            elif result.outcome is not Outcome.PASS:
                reasons.append(f"held-out {duration}: {result.outcome}: {'; '.join(result.reasons)}")
    if reasons:
        return CandidateAcceptance(False, tuple(reasons))
    return CandidateAcceptance(True, ("formal PASS at every duration" + (
        ", held-out PASS at every duration" if spec.heldout is not None else
        f"; no [heldout] table, so not checked beyond seed {spec.workload.seed}"),))


def acceptance(spec: RunSpec, verdicts: Mapping[str, CandidateVerdict],
               heldout: Mapping[str, Mapping[str, HeldoutVerdict]], *, diagnostic: bool,
               not_selected: Mapping[str, Sequence[str]] | None = None,
               shard: Shard | None = None) -> Acceptance:
    """Each candidate's acceptance, and the campaign's: the final combination against the original baseline.

    ``shard``: a shard run alone, which accepts and rejects nothing (:func:`shard_alone`).
    """
    if shard is not None:
        alone = (shard_alone(shard.index, shard.count),
                 *([f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing"] if diagnostic else []))
        return Acceptance(spec.final, False, alone, {name: CandidateAcceptance(False, alone, judged=False)
                                                     for name in spec.candidates})
    skipped = not_selected or {}
    candidates = {name: _candidate(spec, name, verdicts.get(name), heldout.get(name, {}), diagnostic,
                                   skipped.get(name, ()))
                  for name in spec.candidates}
    reasons = []
    if spec.final is None:
        reasons.append("the spec names no final combination (final = ...): no campaign acceptance")
    elif skipped:
        reasons.append("partial run: a selection of the campaign accepts nothing; run every workload of every arm")
    else:
        if not candidates[spec.final].accepted:
            reasons.append(f"final {spec.final!r} is not accepted: {'; '.join(candidates[spec.final].reasons)}")
        direct = verdicts[_direct_series(spec)]
        for key, d in direct.durations.items():
            if d.outcome is not Outcome.PASS:
                reasons.append(f"direct comparison of {spec.final!r} with {spec.final_control!r} at {key}: "
                               f"{d.outcome} (speed {d.speed}: {d.speed_reasons[0]}; quality {d.quality})")
        if direct.stopped is not None:
            reasons.append(f"direct comparison stopped: {direct.stopped.reason}")
    accepted = spec.final is not None and not reasons and not diagnostic
    if diagnostic and spec.final is not None:
        reasons.append(f"{DIAGNOSTIC_VERDICT}: a diagnostic run accepts nothing")
    if accepted:
        reasons.append(f"{spec.final!r} passed against {spec.final_control!r} at every duration, formal and held-out")
    return Acceptance(spec.final, accepted, tuple(reasons), candidates)
