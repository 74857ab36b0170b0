"""The verdict: per candidate, speed, quality and lossless at each duration, and one overall outcome.

Every part is an :class:`~h3bench.outcome.Outcome` (lossless adds EXACT, the
strongest PASS); a part that was never evaluated counts as INCONCLUSIVE.
The overall outcome combines them (:func:`h3bench.outcome.combine`): FAIL if
any part failed, PASS only if every part passed; a stopped candidate adds
its stop rule's outcome. For speed that is the campaign's error control:
PASS needs PASS at every duration, one FAIL is enough to fail
(:mod:`h3bench.stats.intervals`). ``verdict.json`` holds
:meth:`CandidateVerdict.to_dict`, with every reason, the speed estimate and
each block's record (its median and the warmup check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from h3bench.outcome import Outcome, combine
from h3bench.quality import json_safe
from h3bench.run.records import Stop
from h3bench.stats.speed import RatioEstimate, SpeedReport
from h3bench.stats.warmup import WarmupCheck
from h3bench.verdict.judge import LosslessOutcome, PairOutcome

__all__ = ["NOT_EVALUATED", "BlockRecord", "CandidateVerdict", "DurationVerdict", "quality_outcome"]

NOT_EVALUATED = "NOT_EVALUATED"


def quality_outcome(pairs: Sequence[PairOutcome], optional: tuple[str, ...]) -> Outcome | None:
    """The gates over every matched pair: FAIL if one failed, INCONCLUSIVE if a required check was not measured."""
    if not pairs:
        return None
    missing = any(name not in optional for pair in pairs for name in pair.unmeasured)
    return combine([*(p.outcome for p in pairs if p.outcome is Outcome.FAIL),
                    Outcome.INCONCLUSIVE if missing else Outcome.PASS])


@dataclass(frozen=True)
class BlockRecord:
    """One block of a candidate's series, as the verdict reports it."""

    id: str
    median_e2e_s: float | None
    warmup: WarmupCheck | None  # None: the block has too few measured requests for the check

    def to_dict(self) -> dict[str, Any]:
        return {"median_e2e_s": self.median_e2e_s, "warmup": json_safe(self.warmup)}


@dataclass(frozen=True)
class DurationVerdict:
    """One candidate at one duration."""

    speed: Outcome
    speed_reasons: tuple[str, ...]
    estimate: RatioEstimate | None  # None: no block pair or anchor to compare
    quality: Outcome | None  # None: no matched pair was evaluated
    quality_pairs: int
    lossless_enabled: bool
    lossless: LosslessOutcome | None  # None: not evaluated (or lossless mode is off)
    blocks: tuple[BlockRecord, ...] = ()

    @classmethod
    def of(cls, speed: SpeedReport | None, pairs: Sequence[PairOutcome], optional: tuple[str, ...], *,
           lossless_enabled: bool, lossless: LosslessOutcome | None,
           blocks: Sequence[BlockRecord] = ()) -> DurationVerdict:
        reasons: tuple[str, ...] = ("no complete AB/BA pair was measured",)
        outcome, estimate = Outcome.INCONCLUSIVE, None
        if speed is not None:
            outcome, reasons, estimate = speed.verdict.outcome, speed.verdict.reasons, speed.estimate
        return cls(outcome, tuple(reasons), estimate, quality_outcome(pairs, optional), len(pairs), lossless_enabled,
                   lossless if lossless_enabled else None, tuple(blocks))

    @property
    def outcomes(self) -> list[Outcome]:
        parts = [self.speed, self.quality or Outcome.INCONCLUSIVE]
        if self.lossless_enabled:
            parts.append(self.lossless.as_outcome if self.lossless else Outcome.INCONCLUSIVE)
        return parts

    @property
    def warmup_flags(self) -> tuple[WarmupCheck, ...]:
        return tuple(b.warmup for b in self.blocks if b.warmup is not None and b.warmup.flagged)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "speed": str(self.speed),
            "speed_reasons": list(self.speed_reasons),
            "speed_estimate": json_safe(self.estimate) if self.estimate else None,
            "quality": str(self.quality) if self.quality else NOT_EVALUATED,
            "quality_pairs": self.quality_pairs,
            "blocks": {b.id: b.to_dict() for b in self.blocks},
        }
        if self.lossless_enabled:
            entry["lossless"] = self.lossless.result if self.lossless else NOT_EVALUATED
        return entry


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate over every duration, with the stop rule that fired, if any.

    ``notes`` say what a reader should know but does not change the outcome,
    such as a block whose device telemetry stands out (:mod:`h3bench.host.telemetry`).
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
