"""The three outcomes every verdict in h3bench takes, and how several combine into one."""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["Outcome", "combine"]


class Outcome(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"

    def __str__(self) -> str:
        return self.value


def combine(outcomes: Iterable[Outcome]) -> Outcome:
    """FAIL if any part failed; PASS only if every part passed (none at all is PASS); else INCONCLUSIVE."""
    seen = set(outcomes)
    if Outcome.FAIL in seen:
        return Outcome.FAIL
    if Outcome.INCONCLUSIVE in seen:
        return Outcome.INCONCLUSIVE
    return Outcome.PASS
