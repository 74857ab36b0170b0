"""A campaign's quality results: every output judged, stored under the validator's version, read back, judged again.

A run judges every matched pair whose outputs it has, and the lossless test
of every candidate workload (:func:`judge_all`), and stores the results under
the validator's version (:func:`write_quality`). A reader of the bundle (an
xdist worker, the pool, the bisection) takes the newest stored results
(:func:`load_quality`). ``h3bench validate`` re-judges a stored bundle's
outputs (:func:`validate`): a result once written is frozen, and only a newer
validator writes a new one beside it, as an addendum to the sealed bundle.
"""

from __future__ import annotations

from h3bench import quality
from h3bench.course.cases import CandidateWorkload, MatchedPair
from h3bench.errors import UsageError
from h3bench.evidence import Bundle
from h3bench.outcome import Outcome, combine
from h3bench.session.results import Results
from h3bench.verdict.assemble import candidate_verdicts
from h3bench.verdict.judge import Judge

__all__ = ["judge_all", "load_quality", "validate", "write_quality"]


def load_quality(results: Results) -> str | None:
    """Take the quality results that the newest validator stored in the bundle; its version, or None."""
    versions = results.bundle.quality_versions()
    if not versions:
        return None
    stored = results.bundle.read_quality(versions[-1])
    cases = results.schedule.case_by_id()
    for kind, found in (("quality", stored.get("pairs", {})), ("lossless", stored.get("lossless", {}))):
        for case_id, result in found.items():
            case = cases.get(case_id)
            if isinstance(case, (MatchedPair, CandidateWorkload)):
                candidate = case.candidate.block.candidate if isinstance(case, MatchedPair) else case.candidate
                results.judge.absorb({"kind": kind, "id": case_id, "candidate": candidate,
                                      "duration": case.duration, "result": result})
    return versions[-1]


def write_quality(judge: Judge, bundle: Bundle) -> str | None:
    """Record every quality result under this validator's version, beside any older one; its relpath, or None."""
    if not judge.pairs and not judge.lossless_results:
        return None
    return bundle.write_quality(quality.VALIDATOR_VERSION, judge.quality_document())


def judge_all(results: Results) -> None:
    """Every matched pair whose outputs can be had, then the lossless judgement of every candidate workload."""
    for pair in results.schedule.cases("matched_pair"):
        assert isinstance(pair, MatchedPair)
        if results.available(pair.baseline) and results.available(pair.candidate):
            results.judge.compare(pair)
    if results.judge.lossless_enabled:
        for case in results.schedule.cases("candidate_workload"):
            assert isinstance(case, CandidateWorkload)
            results.judge.lossless(case)


def validate(results: Results) -> Outcome:
    """Run every quality comparison (and the lossless judgement) over stored outputs; the overall outcome."""
    if quality.VALIDATOR_VERSION in results.bundle.quality_versions():
        raise UsageError(
            f"{results.bundle.path} is already validated with {quality.VALIDATOR_VERSION}; its result is frozen, "
            "and only a newer validator version writes a new one beside it"
        )
    pairs = [p for p in results.schedule.cases("matched_pair")
             if isinstance(p, MatchedPair) and results.available(p.baseline) and results.available(p.candidate)]
    if not pairs:
        raise UsageError(f"{results.bundle.path} holds no matched baseline and candidate outputs: nothing to validate")
    judge_all(results)
    return combine(v.outcome for v in candidate_verdicts(results).values())
