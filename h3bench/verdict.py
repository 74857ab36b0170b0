"""The verdict: per candidate, speed, quality and lossless at each duration, and one overall outcome.

Every part is an :class:`~h3bench.outcome.Outcome` (lossless adds EXACT, the
strongest PASS); a part that was never evaluated counts as INCONCLUSIVE.
The overall outcome combines them (:func:`h3bench.outcome.combine`): FAIL if
any part failed, PASS only if every part passed; a stopped candidate adds
its stop rule's outcome. ``verdict.json`` holds :meth:`CandidateVerdict.to_dict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from h3bench.judging import LosslessOutcome, PairOutcome
from h3bench.outcome import Outcome, combine
from h3bench.records import Stop
from h3bench.stats import SpeedReport

__all__ = ["NOT_EVALUATED", "CandidateVerdict", "DurationVerdict", "quality_outcome"]

NOT_EVALUATED = "NOT_EVALUATED"


def quality_outcome(pairs: Sequence[PairOutcome], optional: tuple[str, ...]) -> Outcome | None:
    """The gates over every matched pair: FAIL if one failed, INCONCLUSIVE if a required check was not measured."""
    if not pairs:
        return None
    missing = any(name not in optional for pair in pairs for name in pair.unmeasured)
    return combine([*(p.outcome for p in pairs if p.outcome is Outcome.FAIL),
                    Outcome.INCONCLUSIVE if missing else Outcome.PASS])


@dataclass(frozen=True)
class DurationVerdict:
    """One candidate at one duration."""

    speed: Outcome
    speed_reasons: tuple[str, ...]
    quality: Outcome | None  # None: no matched pair was evaluated
    quality_pairs: int
    lossless_enabled: bool
    lossless: LosslessOutcome | None  # None: not evaluated (or lossless mode is off)

    @classmethod
    def of(cls, speed: SpeedReport | None, pairs: Sequence[PairOutcome], optional: tuple[str, ...], *,
           lossless_enabled: bool, lossless: LosslessOutcome | None) -> DurationVerdict:
        reasons: tuple[str, ...] = ("no complete AB/BA pair was measured",)
        outcome = Outcome.INCONCLUSIVE
        if speed is not None:
            outcome, reasons = speed.verdict.outcome, speed.verdict.reasons
        return cls(outcome, tuple(reasons), quality_outcome(pairs, optional), len(pairs), lossless_enabled,
                   lossless if lossless_enabled else None)

    @property
    def outcomes(self) -> list[Outcome]:
        parts = [self.speed, self.quality or Outcome.INCONCLUSIVE]
        if self.lossless_enabled:
            parts.append(self.lossless.as_outcome if self.lossless else Outcome.INCONCLUSIVE)
        return parts

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "speed": str(self.speed),
            "speed_reasons": list(self.speed_reasons),
            "quality": str(self.quality) if self.quality else NOT_EVALUATED,
            "quality_pairs": self.quality_pairs,
        }
        if self.lossless_enabled:
            entry["lossless"] = self.lossless.result if self.lossless else NOT_EVALUATED
        return entry


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate over every duration, with the stop rule that fired, if any.

    ``notes`` say what a reader should know but does not change the outcome,
    such as a block whose device telemetry stands out (:mod:`h3bench.telemetry`).
    """

    durations: dict[str, DurationVerdict]
    stopped: Stop | None
    notes: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        parts = [o for d in self.durations.values() for o in d.outcomes]
        return combine(parts + ([self.stopped.outcome] if self.stopped else []))

    def to_dict(self) -> dict[str, Any]:
        return {
            "durations": {name: d.to_dict() for name, d in self.durations.items()},
            "stopped": self.stopped.reason if self.stopped else None,
            "verdict": str(self.outcome),
            "notes": list(self.notes),
        }
