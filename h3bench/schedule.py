"""The schedule: a RunSpec's AB/BA blocks, and the cases every campaign test is parametrized by.

Per duration and candidate, the blocks follow the spec's order string
(``ABBAABBA`` by default): ``A`` is a baseline block, ``B`` a candidate
block, and each block is one fresh server process. Adjacent blocks form the
AB/BA pairs that the statistics pair (:func:`h3bench.stats.paired_block_ratios`).

The cases, in schedule order:

- ``block``: one per block (the perf tests time it, the lifecycle tests check it);
- ``baseline_output``: one per measured request of each baseline block;
- ``matched_pair``: each measured candidate output and the baseline output of
  the same inputs and seed, from the partner block of its AB/BA pair;
- ``candidate_workload``: one per candidate and duration (the lossless judgement).

Control pairs, for lossless mode, are baseline outputs of the same request
index from two different baseline blocks: two distinct server processes.

A **series** is one comparison: a candidate against its control, the
``baseline``. When the spec names an ``original_baseline`` other than the
baseline, the final combination gets one more series, ``<final>-vs-<original>``
(:func:`series_of`), whose ``A`` blocks run the original baseline: the direct
comparison that campaign acceptance needs. Its name cannot be an arm's (arm
names have no hyphen).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from h3bench.runspec import BASELINE, RunSpec

__all__ = ["CASE_FIXTURES", "Block", "CandidateWorkload", "Case", "MatchedPair", "OutputRef", "Schedule", "Series",
           "plan", "series_of"]


@dataclass(frozen=True)
class Block:
    """One server process of one arm, at one position of the AB/BA order."""

    duration: float
    candidate: str  # the candidate this block's series compares with the baseline
    arm: str  # "baseline" or the candidate's name
    position: int  # 1-based position in the order string
    letter: Literal["A", "B"]  # A: the series' control (the baseline), B: candidate
    control: str = BASELINE  # the arm of the series' A blocks

    @property
    def pair(self) -> int:
        """Adjacent blocks form AB/BA pairs: positions 1-2 are pair 0, 3-4 pair 1, ..."""
        return (self.position - 1) // 2

    @property
    def id(self) -> str:
        return f"{self.duration:g}s-{self.candidate}-{self.position}{self.letter}-{self.arm}"


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
    """A candidate output and its baseline output: same inputs and seed, paired blocks."""

    baseline: OutputRef
    candidate: OutputRef

    @property
    def duration(self) -> float:
        return self.candidate.duration

    @property
    def id(self) -> str:
        b = self.candidate.block
        return f"{b.duration:g}s-{b.candidate}-pair{b.pair}-r{self.candidate.index}"


Case = Block | OutputRef | MatchedPair | CandidateWorkload
CASE_FIXTURES = ("block", "baseline_output", "matched_pair", "candidate_workload")


@dataclass(frozen=True)
class Series:
    """One comparison: ``arm`` (B blocks) against ``control`` (A blocks), named ``name`` in ids and verdicts."""

    name: str
    arm: str
    control: str = BASELINE


def series_of(spec: RunSpec) -> tuple[Series, ...]:
    """Every candidate against the baseline, then the final combination against a different original baseline."""
    found = [Series(candidate, candidate) for candidate in spec.candidates]
    if spec.final is not None and spec.final_control != BASELINE:
        found.append(Series(f"{spec.final}-vs-{spec.final_control}", spec.final, spec.final_control))
    return tuple(found)


def plan(spec: RunSpec, arms: str = "all") -> tuple[Block, ...]:
    """Per duration, per series, the blocks in the spec's order; ``arms`` (all, baseline, candidate) filters them."""
    blocks = []
    for duration in spec.workload.durations:
        for series in series_of(spec):
            for position, letter in enumerate(spec.protocol.order, start=1):
                if arms == "all" or (arms == BASELINE) == (letter == "A"):
                    arm = series.control if letter == "A" else series.arm
                    blocks.append(Block(duration, series.name, arm, position, "A" if letter == "A" else "B",
                                        series.control))
    return tuple(blocks)


class Schedule:
    """The blocks one session runs, in order, and the test cases they make.

    ``arms`` selects the blocks this session runs; in a candidate-only run
    (``--arm candidate`` against a stored baseline) the baseline blocks come
    from the stored bundle, and still give the baseline outputs and pairs.
    """

    def __init__(self, spec: RunSpec, arms: str = "all") -> None:
        self.spec = spec
        self.blocks = plan(spec, arms)
        self.baseline_blocks = tuple(b for b in plan(spec) if b.letter == "A")
        self._order = {block.id: index for index, block in enumerate(self.blocks)}

    def index(self, block: Block) -> int:
        """The block's place in the order this session runs it (ValueError if it does not run it)."""
        try:
            return self._order[block.id]
        except KeyError:
            raise ValueError(f"{block.id} is not in this session's schedule") from None

    def cases(self, fixture: str) -> list[Case]:
        """The parametrization of one campaign fixture, in schedule order."""
        k = self.spec.protocol.requests_per_block
        if fixture == "block":
            return list(self.blocks)
        if fixture == "baseline_output":
            return [OutputRef(b, i) for b in self.baseline_blocks for i in range(k)]
        if fixture == "matched_pair":
            return [MatchedPair(OutputRef(self.partner(b), i), OutputRef(b, i))
                    for b in self.blocks if b.letter == "B" for i in range(k)]
        if fixture == "candidate_workload":
            return list(dict.fromkeys(CandidateWorkload(b.candidate, b.duration) for b in self.blocks))
        raise ValueError(f"no campaign cases for fixture {fixture!r}")

    def partner(self, block: Block) -> Block:
        """The control block of the same AB/BA pair."""
        position = block.position + (1 if block.position % 2 else -1)
        return Block(block.duration, block.candidate, block.control, position, "A", block.control)

    def matched_pairs(self, case: CandidateWorkload) -> list[MatchedPair]:
        pairs = self.cases("matched_pair")
        return [p for p in pairs if isinstance(p, MatchedPair)
                and p.candidate.block.candidate == case.candidate and p.duration == case.duration]

    def control_pairs(self, case: CandidateWorkload) -> list[tuple[OutputRef, OutputRef]]:
        """Baseline outputs of the same inputs from different server processes: every two baseline blocks."""
        baselines = [b for b in self.baseline_blocks if b.candidate == case.candidate and b.duration == case.duration]
        k = self.spec.protocol.requests_per_block
        return [(OutputRef(a, i), OutputRef(b, i)) for a, b in itertools.combinations(baselines, 2) for i in range(k)]

    def blocks_of(self, case: object) -> tuple[Block, ...]:
        """The blocks a test of ``case`` reads; what a selection of tests needs to run."""
        if isinstance(case, Block):
            return (case,)
        if isinstance(case, OutputRef):
            return (case.block,)
        if isinstance(case, MatchedPair):
            return (case.baseline.block, case.candidate.block)
        if isinstance(case, CandidateWorkload):
            return tuple(b for b in plan(self.spec)
                         if b.candidate == case.candidate and b.duration == case.duration)
        return ()

    def case_by_id(self) -> dict[str, Case]:
        """Every case of every fixture by its test id (the ids do not collide across fixtures)."""
        return {case.id: case for fixture in CASE_FIXTURES for case in self.cases(fixture)}
