"""The schedule: a RunSpec's blocks in the order they run, and the session's view of them.

Per duration (in :func:`~h3bench.course.design.run_order`), each block one
fresh server process (:class:`~h3bench.course.cases.Block`):

- the fixed design lists its **lossless control blocks** first
  (:func:`~h3bench.course.design.control_blocks`: the spec's
  ``protocol.lossless_baseline_blocks``, else 2 when ``gates.lossless`` is
  on: baseline blocks that only add baseline processes to the lossless
  test, never used for speed), then per candidate the spec's order
  (``ABBAABBA`` by default): ``A`` a baseline block, ``B`` a candidate block;
- the sequential design lists the series' AB/BA pairs round-robin up to the
  last look (:func:`h3bench.stats.sequential.series_order`, the order the
  statistics assume), and its control blocks before the pairs of the round
  where PASS is first allowed, as many as a series running alone could need
  (:meth:`h3bench.course.course.Course.control_slots`).

Adjacent blocks form the AB/BA pairs that the statistics pair
(:func:`h3bench.stats.speed.paired_block_ratios`). The schedule lists; which
listed blocks run is the course's decision (:mod:`h3bench.course.course`): a
series stopped by a look, or not past a cheaper duration, and controls no
series needs, are not run. A shard of a campaign over several hosts runs the
AB/BA units of its round (:mod:`h3bench.course.shards`).

A candidate-only run (``--arm candidate --baseline-evidence BUNDLE``) runs,
per duration and candidate, its anchored order instead
(:func:`~h3bench.course.design.anchored_order`: ``BABBAB``, or with the
lossless test on as many anchors as that test needs): its ``A`` blocks are
fresh baseline **anchors** of the day, and the speed verdict compares the
candidate with them
(:func:`h3bench.stats.speed.anchored_speed_report`). The stored bundle's blocks are
the rest of the schedule: they give the shift report, the quality
references (the i-th candidate block is matched with the i-th stored
baseline block of its series). The lossless test's controls are today's
anchors only (:meth:`Schedule.lossless_processes`).

A **series** is one comparison: a candidate against its control, the
``baseline``. When the spec names an ``original_baseline`` other than the
baseline, the final combination gets one more series, ``<final>-vs-<original>``
(:func:`~h3bench.course.design.series_of`), whose ``A`` blocks run the
original baseline: the direct comparison that campaign acceptance needs. Its
name cannot be an arm's (arm names have no hyphen).

The lossless test of a candidate at a duration (:meth:`Schedule.lossless_processes`)
counts as control processes every block of that duration that runs its
series' control: for a candidate against the baseline, the control blocks,
the ``A`` blocks of every candidate's series and, in a candidate-only run,
the anchors; for the final combination against the original baseline, that
series' ``A`` blocks.
"""

from __future__ import annotations

from h3bench.course.cases import (
    CASE_FIXTURES,
    CONTROLS,
    Block,
    BlockKind,
    CandidateWorkload,
    Case,
    MatchedPair,
    OutputRef,
)
from h3bench.course.course import Course
from h3bench.course.design import Series, anchored_order, control_blocks, looks_of, run_order, series_of
from h3bench.course.shards import Shard, Window
from h3bench.runspec import BASELINE, RunSpec
from h3bench.stats.sequential import series_order

__all__ = ["Schedule", "spec_blocks"]


def _series(duration: float, series: Series, order: str, kind: BlockKind, *, start: int = 1) -> list[Block]:
    return [Block(duration, series.name, series.control if letter == "A" else series.arm, position,
                  "A" if letter == "A" else "B", kind, series.control)
            for position, letter in enumerate(order, start=start)]


def _sequential(spec: RunSpec, duration: float, course: Course) -> list[Block]:
    """The series' AB/BA pairs round-robin up to the last look, the control blocks before round ``f``.

    Round-robin keeps every series' pairs close in time (a drift of the
    outputs' nondeterminism then reaches all series alike).
    """
    d = run_order(spec).index(duration)
    order = series_order(looks_of(spec, duration)[-1])
    blocks: list[Block] = []
    for pair in range(1, len(order) // 2 + 1):
        if pair == course.controls_before(d):
            blocks += _series(duration, Series(CONTROLS, BASELINE), "A" * course.control_slots(d), "controls")
        for one in series_of(spec):
            blocks += _series(duration, one, order[2 * pair - 2: 2 * pair], "paired", start=2 * pair - 1)
    return blocks


def spec_blocks(spec: RunSpec, arms: str = "all", *, anchored: bool = False, lossless: bool | None = None
                ) -> tuple[Block, ...]:
    """Per duration: the control blocks, then each series (:func:`series_of`); ``arms`` filters them.

    ``arms`` is ``all``, ``baseline`` (the ``A`` blocks) or ``candidate``
    (the ``B`` blocks). ``anchored`` gives a candidate-only run's blocks
    instead: each series' anchored order, anchors included. The sequential
    design lists every block up to its last look, and every control block a
    series might need: which of them run is the course's decision
    (:meth:`h3bench.course.course.Course.why_not`).
    ``lossless``: the lossless test is on (default: the spec's gate).
    """
    course = Course.of(spec, lossless=lossless)
    blocks: list[Block] = []
    for duration in run_order(spec):
        if anchored:
            for series in series_of(spec):
                blocks += _series(duration, series, anchored_order(spec, lossless), "anchored")
        elif course.design.sequential:
            blocks += _sequential(spec, duration, course)
        else:
            blocks += _series(duration, Series(CONTROLS, BASELINE), "A" * control_blocks(spec), "controls")
            for series in series_of(spec):
                blocks += _series(duration, series, spec.protocol.order, "paired")
    return tuple(b for b in blocks if anchored or arms == "all" or (arms == BASELINE) == (b.letter == "A"))


class Schedule:
    """The blocks one session runs, in order, and the test cases they make.

    ``arms`` selects the blocks this session runs; ``lossless`` lists the
    control blocks of a lossless test (default: the spec's gate; ``--lossless``
    turns it on). A candidate-only run
    (``anchored``) runs the anchored orders, and its other blocks come from
    the stored bundle (:attr:`stored_blocks`). A shard of a campaign over
    several hosts (``shard``) runs its AB/BA units of the round's ``window``
    (round 1 without one); its lossless test counts its own host's processes.
    """

    def __init__(self, spec: RunSpec, arms: str = "all", *, anchored: bool = False, shard: Shard | None = None,
                 window: Window | None = None, lossless: bool | None = None) -> None:
        self.spec = spec
        self.anchored = anchored
        self.shard = shard
        self.lossless = spec.gates.lossless if lossless is None else lossless
        self._rounds = None if shard is None else Course.of(spec, lossless=self.lossless, shards=shard.count)
        self.window = (window if window is not None or self._rounds is None
                       else self._rounds.first_window(spec.spec_id))
        every = spec_blocks(spec, lossless=self.lossless)
        self.blocks = self._own(spec_blocks(spec, arms, anchored=anchored, lossless=self.lossless))
        self.stored_blocks = tuple(b for b in every if b.letter == "A") if anchored else ()
        self.baseline_blocks = tuple(b for b in (*self.stored_blocks, *(self.blocks if anchored else self._own(every)))
                                     if b.letter == "A")
        self._controls = {series.name: series.control for series in series_of(spec)}
        self._order = {block.id: index for index, block in enumerate(self.blocks)}
        self._campaign = self.blocks if anchored or arms == "all" else every

    def _own(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        """The blocks of ``blocks`` that this session's shard runs in its round (:meth:`Course.shard_runs`)."""
        shard, window, course = self.shard, self.window, self._rounds
        if shard is None or window is None or course is None:
            return blocks
        return tuple(b for b in blocks if course.shard_runs(b.duration, None if b.kind == "controls" else b.candidate,
                                                             b.pair, b.position, shard, window))

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
            return list(dict.fromkeys(CandidateWorkload(b.candidate, b.duration)
                                      for b in self.blocks if b.kind != "controls"))
        raise ValueError(f"no campaign cases for fixture {fixture!r}")

    def partner(self, block: Block) -> Block:
        """The control block a candidate block's outputs are matched with.

        The other block of its AB/BA pair; in a candidate-only run, the
        stored baseline block of its series with the same rank (cycling when
        the stored series has fewer).
        """
        if block.kind == "anchored":
            stored = [b for b in self.stored_blocks
                      if b.kind == "paired" and b.candidate == block.candidate and b.duration == block.duration]
            ours = [b for b in self.blocks if b.letter == "B" and b.candidate == block.candidate
                    and b.duration == block.duration]
            return stored[ours.index(block) % len(stored)]
        position = block.position + (1 if block.position % 2 else -1)
        return Block(block.duration, block.candidate, block.control, position, "A", control=block.control)

    def matched_pairs(self, case: CandidateWorkload) -> list[MatchedPair]:
        pairs = self.cases("matched_pair")
        return [p for p in pairs if isinstance(p, MatchedPair)
                and p.candidate.block.candidate == case.candidate and p.duration == case.duration]

    def series(self, duration: float, candidate: str) -> list[Block]:
        """The blocks a candidate's speed comparison uses: its series in this session's order."""
        return [b for b in self.blocks if b.duration == duration and b.candidate == candidate]

    def campaign_series(self, duration: float, candidate: str) -> list[Block]:
        """A series' blocks in the campaign's order, whichever of them this session runs (``--arm``)."""
        return [b for b in self._campaign if b.duration == duration and b.candidate == candidate]

    def stored_series(self, duration: float, candidate: str) -> list[Block]:
        """A candidate-only run: the stored baseline blocks of the candidate's series (the shift report)."""
        return [b for b in self.stored_blocks
                if b.duration == duration and b.candidate == candidate and b.kind == "paired"]

    def lossless_processes(self, case: CandidateWorkload) -> tuple[list[Block], list[Block]]:
        """Control and candidate processes of a series' lossless test, each in schedule order.

        The control processes are every block of the duration that runs the
        series' control arm (the baseline, or the original baseline). In a
        candidate-only run only today's anchors: a day shift in the outputs
        makes the stored processes unlike today's, and with them as controls
        a lossless candidate failed in 6.7 % (a shift of half the process
        spread) to 11.5 % (a whole one) of campaigns at the 5 % level
        (tests_unit/quality/test_lossless_anchored.py).
        """
        control = self._controls.get(case.candidate, BASELINE)
        baseline = [b for b in self.baseline_blocks if b.duration == case.duration and b.arm == control
                    and (b.kind == "anchored" or not self.anchored)]
        candidate = [b for b in self.blocks
                     if b.letter == "B" and b.candidate == case.candidate and b.duration == case.duration]
        return baseline, candidate

    def blocks_of(self, case: object) -> tuple[Block, ...]:
        """The blocks a test of ``case`` reads; what a selection of tests needs to run.

        A lossless test needs its candidate's series and the control blocks;
        the other series' baseline blocks are counted when they ran.
        """
        if isinstance(case, Block):
            return (case,)
        if isinstance(case, OutputRef):
            return (case.block,)
        if isinstance(case, MatchedPair):
            return (case.baseline.block, case.candidate.block)
        if isinstance(case, CandidateWorkload):
            baseline, candidate = self.lossless_processes(case)
            own = [b for b in baseline if b.candidate in (case.candidate, CONTROLS)]
            return (*own, *candidate)
        return ()

    def case_by_id(self) -> dict[str, Case]:
        """Every case of every fixture by its test id (the ids do not collide across fixtures)."""
        return {case.id: case for fixture in CASE_FIXTURES for case in self.cases(fixture)}
