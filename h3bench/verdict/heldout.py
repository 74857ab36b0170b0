"""The held-out verdict of one candidate at one duration: every held-out case through every quality gate.

The blocks ran in :mod:`h3bench.run.heldout`. PASS when every case passes
every gate, FAIL when a case fails one (or the candidate's server or request
failed), INCONCLUSIVE when a gate could not be measured or the baseline's
block broke. Its requests never enter the formal statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from h3bench.outcome import Outcome
from h3bench.run.heldout import HeldoutCase
from h3bench.run.records import BlockResult
from h3bench.verdict.judge import Judge, PairOutcome, quality_outcome
from h3bench.verdict.verdicts import HeldoutVerdict

__all__ = ["judge_heldout"]


def judge_heldout(judge: Judge, candidate: str, duration: float, results: Mapping[str, BlockResult],
                  cases: list[HeldoutCase], output: Callable[[str], Path]) -> HeldoutVerdict:
    """Compare the candidate's output of every case with the baseline's of the same case (one AB or BA pair).

    ``output`` gives an output's path from its SHA-256 (the bundle's).
    """
    by_letter = {r.block.letter: r for r in results.values()}
    control, trial = by_letter["A"], by_letter["B"]
    if trial.failure is not None:
        return HeldoutVerdict(Outcome.FAIL, (f"{trial.block.id}: {trial.failure.text.splitlines()[0]}",))
    if control.failure is not None:
        return HeldoutVerdict(Outcome.INCONCLUSIVE,
                              (f"the baseline's held-out block broke: {control.failure.text.splitlines()[0]}",))
    pairs, reasons = [], []
    for index, case in enumerate(cases):
        shas = [next((s.output_sha256 for s in r.samples if s.kind == "measured" and s.index == index), None)
                for r in (control, trial)]
        if shas[0] is None or shas[1] is None:
            reasons.append(f"{case.label}: no output")
            continue
        report = judge.compare_files((output(shas[0]), output(shas[1])), duration,
                                     f"held-out {candidate} {duration:g}s {case.label}")
        pair = PairOutcome.from_record({"id": case.label, "candidate": candidate, "duration": duration,
                                        "result": report.to_dict()})
        pairs.append(pair)
        if pair.failing:
            reasons.append(f"{case.label}: failed quality gates ({'; '.join(pair.failing)})")
    outcome = quality_outcome(pairs, judge.optional_checks()) or Outcome.INCONCLUSIVE
    if reasons and outcome is Outcome.PASS:
        outcome = Outcome.INCONCLUSIVE
    if not reasons:
        reasons = [f"every gate passed on {len(pairs)} held-out case(s): {', '.join(c.label for c in cases)}"
                   if outcome is Outcome.PASS else "a gate could not be measured on a held-out case"]
    return HeldoutVerdict(outcome, tuple(reasons))
