"""The units a campaign is made of: a :class:`Block` (one server process), and the cases its tests are parametrized by.

The cases, in schedule order (:meth:`h3bench.course.schedule.Schedule.cases`):

- ``block``: one per block this session runs (the perf tests time it, the
  lifecycle tests check it);
- ``baseline_output``: one per measured request of each baseline block
  (an :class:`OutputRef`);
- ``matched_pair``: each measured candidate output and the baseline output of
  the same inputs and seed, from the partner block (a :class:`MatchedPair`);
- ``candidate_workload``: one per candidate and duration (the lossless
  judgement, a :class:`CandidateWorkload`).

Every case has an ``id``, its test id; the ids do not collide across fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from h3bench.runspec import BASELINE

__all__ = ["CASE_FIXTURES", "CONTROLS", "Block", "BlockKind", "CandidateWorkload", "Case", "MatchedPair",
           "OutputRef"]

CONTROLS = BASELINE  # the series of the control blocks: no candidate can be called "baseline"
BlockKind = Literal["paired", "controls", "anchored"]  # which order a block belongs to


@dataclass(frozen=True)
class Block:
    """One server process of one arm, at one position of its series' order.

    ``kind`` says which order: ``paired`` (the spec's AB/BA order),
    ``controls`` (a lossless control block) or ``anchored`` (a candidate-only
    run's anchored order).
    """

    duration: float
    candidate: str  # the candidate whose series this block belongs to; CONTROLS for a control block
    arm: str  # the series' control (A) or the candidate (B)
    position: int  # 1-based position in its series' order
    letter: Literal["A", "B"]  # A: the series' control (the baseline, or the original baseline), B: candidate
    kind: BlockKind = "paired"
    control: str = BASELINE  # the arm of the series' A blocks

    @property
    def pair(self) -> int:
        """Adjacent blocks form AB/BA pairs: positions 1-2 are pair 0, 3-4 pair 1, ..."""
        return (self.position - 1) // 2

    @property
    def id(self) -> str:
        tag = "-anchored" if self.kind == "anchored" else ""
        return f"{self.duration:g}s-{self.candidate}{tag}-{self.position}{self.letter}-{self.arm}"


@dataclass(frozen=True)
class CandidateWorkload:
    """One candidate at one duration: the unit of the lossless judgement."""

    candidate: str
    duration: float

    @property
    def id(self) -> str:
        return f"{self.duration:g}s-{self.candidate}"


@dataclass(frozen=True)
class OutputRef:
    """The output of one measured request of one block."""

    block: Block
    index: int

    @property
    def duration(self) -> float:
        return self.block.duration

    @property
    def id(self) -> str:
        return f"{self.block.id}-r{self.index}"


@dataclass(frozen=True)
class MatchedPair:
    """A candidate output and its baseline output: same inputs and seed, partner blocks."""

    baseline: OutputRef
    candidate: OutputRef

    @property
    def duration(self) -> float:
        return self.candidate.duration

    @property
    def id(self) -> str:
        b = self.candidate.block
        where = f"anchored{b.position}" if b.kind == "anchored" else f"pair{b.pair}"
        return f"{b.duration:g}s-{b.candidate}-{where}-r{self.candidate.index}"


Case = Block | OutputRef | MatchedPair | CandidateWorkload
CASE_FIXTURES = ("block", "baseline_output", "matched_pair", "candidate_workload")
