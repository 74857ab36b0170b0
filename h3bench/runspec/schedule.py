"""The schedule: a RunSpec's blocks, and the cases every campaign test is parametrized by.

Per duration, blocks run in this order, each one fresh server process:

1. the **lossless control blocks** (``protocol.lossless_baseline_blocks``,
   by default 2 when ``gates.lossless`` is on): baseline blocks that only
   add baseline processes to the lossless test. They run first, so they also
   absorb first-block-of-the-day effects, and they are never used for speed;
2. per candidate, the spec's order (``ABBAABBA`` by default): ``A`` a
   baseline block, ``B`` a candidate block. Adjacent blocks form the AB/BA
   pairs that the statistics pair (:func:`h3bench.stats.speed.paired_block_ratios`).

A candidate-only run (``--arm candidate --baseline-evidence BUNDLE``) runs,
per duration and candidate, its anchored order instead (:func:`anchored_order`:
``BABBAB``, or with the lossless test on as many anchors as that test needs):
its ``A`` blocks are fresh baseline **anchors** of the day, and the speed
verdict compares the candidate with them
(:func:`h3bench.stats.speed.anchored_speed_report`). The stored bundle's blocks are
the rest of the schedule: they give the shift report, the quality
references (the i-th candidate block is matched with the i-th stored
baseline block of its series). The lossless test's controls are today's
anchors only (:meth:`Schedule.lossless_processes`).

The cases, in schedule order:

- ``block``: one per block this session runs (the perf tests time it, the
  lifecycle tests check it);
- ``baseline_output``: one per measured request of each baseline block;
- ``matched_pair``: each measured candidate output and the baseline output of
  the same inputs and seed, from the partner block;
- ``candidate_workload``: one per candidate and duration (the lossless judgement).

A **series** is one comparison: a candidate against its control, the
``baseline``. When the spec names an ``original_baseline`` other than the
baseline, the final combination gets one more series, ``<final>-vs-<original>``
(:func:`series_of`), whose ``A`` blocks run the original baseline: the direct
comparison that campaign acceptance needs. Its name cannot be an arm's (arm
names have no hyphen).

The lossless test of a candidate at a duration (:meth:`Schedule.lossless_processes`)
counts as control processes every block of that duration that runs its
series' control: for a candidate against the baseline, the control blocks,
the ``A`` blocks of every candidate's series and, in a candidate-only run,
the anchors; for the final combination against the original baseline, that
series' ``A`` blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from h3bench.errors import UsageError
from h3bench.quality.lossless import ALPHA as LOSSLESS_ALPHA
from h3bench.quality.lossless import lossless_feasibility
from h3bench.quality.lossless_design import controls_at_pass, controls_before_pair, lossless_levels, pass_from_pairs
from h3bench.runspec import BASELINE, RunSpec
from h3bench.runspec.shards import SeriesWindow, Shard, Window, round_up
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.sequential import DEARER_LOOKS, FIRST_LOOKS

__all__ = [
    "CASE_FIXTURES",
    "CONTROLS",
    "DEFAULT_ANCHORED_ORDER",
    "DEFAULT_CONTROL_BLOCKS",
    "Block",
    "CandidateWorkload",
    "Case",
    "MatchedPair",
    "OutputRef",
    "Schedule",
    "Series",
    "anchored_order",
    "budget_of",
    "check_shards",
    "control_blocks",
    "design_text",
    "first_window",
    "in_order_of_cost",
    "interleaved_controls",
    "looks_of",
    "lossless_level",
    "pass_from",
    "run_order",
    "series_of",
    "shard_blocks",
    "spec_blocks",
    "spread",
]

DEFAULT_CONTROL_BLOCKS = 2  # 4 + 2 baseline processes against 4 candidate ones: see h3bench.quality.lossless
DEFAULT_ANCHORED_ORDER = "BABBAB"  # a candidate-only run without the lossless test: two anchors, four candidate blocks
_ANCHORED_CANDIDATES = 4  # candidate blocks of a default anchored order
CONTROLS = BASELINE  # the series of the control blocks: no candidate can be called "baseline"
Design = Literal["paired", "controls", "anchored"]


@dataclass(frozen=True)
class Block:
    """One server process of one arm, at one position of its series' order.

    ``design`` says which order: ``paired`` (the spec's AB/BA order),
    ``controls`` (a lossless control block) or ``anchored`` (a candidate-only
    run's anchored order).
    """

    duration: float
    candidate: str  # the candidate whose series this block belongs to; CONTROLS for a control block
    arm: str  # the series' control (A) or the candidate (B)
    position: int  # 1-based position in its series' order
    letter: Literal["A", "B"]  # A: the series' control (the baseline, or the original baseline), B: candidate
    design: Design = "paired"
    control: str = BASELINE  # the arm of the series' A blocks

    @property
    def pair(self) -> int:
        """Adjacent blocks form AB/BA pairs: positions 1-2 are pair 0, 3-4 pair 1, ..."""
        return (self.position - 1) // 2

    @property
    def id(self) -> str:
        tag = "-anchored" if self.design == "anchored" else ""
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
        where = f"anchored{b.position}" if b.design == "anchored" else f"pair{b.pair}"
        return f"{b.duration:g}s-{b.candidate}-{where}-r{self.candidate.index}"


Case = Block | OutputRef | MatchedPair | CandidateWorkload
CASE_FIXTURES = ("block", "baseline_output", "matched_pair", "candidate_workload")


def anchored_order(spec: RunSpec, lossless: bool | None = None) -> str:
    """What a candidate-only run runs per duration: the spec's ``anchored_order``, else the default.

    The default is ``BABBAB`` (two anchors: enough for the speed verdict),
    and with the lossless test on, the fewest anchors beside the four
    candidate blocks that let that test decide at every duration's level
    (its controls are today's anchors only, :meth:`Schedule.lossless_processes`):
    seven at the sequential design's 0.01, six at 0.05, spread among the
    candidate blocks (``AABAABAABAB``). ``lossless``: the test is on
    (default: the spec's gate).
    """
    if spec.protocol.anchored_order is not None:
        return spec.protocol.anchored_order
    if not (spec.gates.lossless if lossless is None else lossless):
        return DEFAULT_ANCHORED_ORDER
    levels = [lossless_level(spec, d) for d in spec.workload.durations]
    anchors = next(a for a in range(2, 41)
                   if all(lossless_feasibility(a, _ANCHORED_CANDIDATES, alpha=level).feasible for level in levels))
    return spread(anchors, _ANCHORED_CANDIDATES)


def spread(anchors: int, candidates: int) -> str:
    """``anchors`` A blocks and ``candidates`` B blocks, the Bs spread evenly among the As (a drift reaches both)."""
    n = anchors + candidates
    return "".join("B" if (i + 1) * candidates // n > i * candidates // n else "A" for i in range(n))


def control_blocks(spec: RunSpec) -> int:
    """Lossless control blocks per duration: the spec's number, else 2 when ``gates.lossless`` is on."""
    count = spec.protocol.lossless_baseline_blocks
    return count if count is not None else (DEFAULT_CONTROL_BLOCKS if spec.gates.lossless else 0)


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


def _series(duration: float, series: Series, order: str, design: Design, *, start: int = 1) -> list[Block]:
    return [Block(duration, series.name, series.control if letter == "A" else series.arm, position,
                  "A" if letter == "A" else "B", design, series.control)
            for position, letter in enumerate(order, start=start)]


def budget_of(spec: RunSpec) -> BlockBudget:
    """What each block measures: the spec's warmups, measured requests and audit."""
    p = spec.protocol
    return BlockBudget(p.warmups_per_block, p.requests_per_block, p.audit, p.audit and p.audit_counts)


def design_text(spec: RunSpec, *, anchored: bool = False) -> str:
    """How the blocks are run and judged, as the header, the plan and the verdict name it."""
    p = spec.protocol
    budget = budget_of(spec).describe()
    if anchored:
        return (f"candidate-only run: anchored order {anchored_order(spec)} against a stored baseline, {budget} per "
                "block")
    if p.design == "fixed":
        return f"fixed design: order {p.order} at every duration, {budget} per block"
    looks = "; ".join(f"{d:g} s after {list(looks_of(spec, d))} pairs" for d in run_order(spec))
    gate = ", a dearer duration only after a PASS at the cheaper" if in_order_of_cost(spec) else ""
    return (f"sequential design: AB/BA pairs round-robin, {budget} per block, looks {looks}, {p.spending} spending"
            f"{', futility at 1 - margin' if p.futility else ''}{gate}")


def in_order_of_cost(spec: RunSpec) -> bool:
    """Whether a dearer duration runs only for a candidate that passed the cheaper ones (unset: the sequential design)."""
    chosen = spec.protocol.durations_in_order_of_cost
    return chosen if chosen is not None else spec.protocol.design == "sequential"


def run_order(spec: RunSpec) -> tuple[float, ...]:
    """The durations in the order their blocks run: by cost (the hinted baseline request, else the length) or as given."""
    durations = tuple(spec.workload.durations)
    if not in_order_of_cost(spec):
        return durations
    hinted = (spec.hints.e2e_s.get(BASELINE, {}) if spec.hints is not None else {})
    return tuple(sorted(durations, key=lambda d: (hinted.get(f"{d:g}", d), d)))


def looks_of(spec: RunSpec, duration: float) -> tuple[int, ...]:
    """The AB/BA pairs after which the series of ``duration`` are judged: one look at the end in the fixed design."""
    protocol = spec.protocol
    if protocol.design == "fixed":
        return (len(protocol.order) // 2,)
    index = run_order(spec).index(duration)
    if protocol.looks is not None:
        return protocol.looks[min(index, len(protocol.looks) - 1)]
    return FIRST_LOOKS if index == 0 else DEARER_LOOKS


def lossless_level(spec: RunSpec, duration: float) -> float:
    """The relabelling test's level at ``duration``: the spec's per-candidate level split over the durations."""
    levels = lossless_levels(len(spec.workload.durations), spec.protocol.lossless_per_candidate)
    return levels[run_order(spec).index(duration)] if spec.protocol.design == "sequential" else LOSSLESS_ALPHA


def pass_from(spec: RunSpec, duration: float, lossless_on: bool) -> int:
    """The fewest pairs at which a series may PASS: where its lossless test can reach a verdict (sequential only)."""
    if not lossless_on or spec.protocol.design != "sequential":
        return 0
    return pass_from_pairs(lossless_level(spec, duration))


def _controls_plan(spec: RunSpec, duration: float, lossless_on: bool) -> tuple[list[int], int]:
    """Where the lossless control blocks go: before which pairs (1-based), and how many after the last one.

    Before a pair while the baseline processes would fall short of what the
    lossless test needs (:func:`h3bench.quality.lossless_design.controls_before_pair`);
    after the last pair as many as a series that passes at any look could
    still be short of (:func:`~h3bench.quality.lossless_design.controls_at_pass`),
    run only when one is (:meth:`h3bench.session.results.Results.not_needed`).
    """
    if not lossless_on:
        return [], 0
    n_series = len(series_of(spec))
    alpha = lossless_level(spec, duration)
    first_pass = pass_from(spec, duration, lossless_on)
    looks = looks_of(spec, duration)
    before, controls, at_look = [], 0, {}
    for pair in range(1, looks[-1] + 1):
        if controls_before_pair(pair, first_pass, controls + (pair - 1) * n_series, alpha):
            before.append(pair)
            controls += 1
        at_look[pair] = controls + pair * n_series
    after = max((controls_at_pass(n, at_look[n], alpha) for n in looks if n >= first_pass), default=0)
    return before, after


def _sequential(spec: RunSpec, duration: float, lossless_on: bool) -> list[Block]:
    """The series' AB/BA pairs round-robin up to the last look, lossless control blocks between them where short.

    Round-robin keeps every series' pairs close in time (a drift of the
    outputs' nondeterminism then reaches all series alike).
    """
    blocks: list[Block] = []
    before, after = _controls_plan(spec, duration, lossless_on)
    controls = 0
    for pair in range(1, looks_of(spec, duration)[-1] + 1):
        if pair in before:
            controls += 1
            blocks += _series(duration, Series(CONTROLS, BASELINE), "A", "controls", start=controls)
        for one in series_of(spec):
            blocks += _series(duration, one, "AB" if pair % 2 else "BA", "paired", start=2 * pair - 1)
    for _ in range(after):
        controls += 1
        blocks += _series(duration, Series(CONTROLS, BASELINE), "A", "controls", start=controls)
    return blocks


def interleaved_controls(spec: RunSpec, duration: float, lossless_on: bool) -> int:
    """How many of a duration's control blocks run between its pairs; the rest run after the last pair."""
    return len(_controls_plan(spec, duration, lossless_on)[0]) if spec.protocol.design == "sequential" else \
        control_blocks(spec)


def spec_blocks(spec: RunSpec, arms: str = "all", *, anchored: bool = False, lossless: bool | None = None
                ) -> tuple[Block, ...]:
    """Per duration: the control blocks, then each series (:func:`series_of`); ``arms`` filters them.

    ``arms`` is ``all``, ``baseline`` (the ``A`` blocks) or ``candidate``
    (the ``B`` blocks). ``anchored`` gives a candidate-only run's blocks
    instead: each series' anchored order, anchors included. The sequential
    design lists every block up to its last look: a series that stops at an
    earlier look leaves the rest unrun (:meth:`Schedule.not_needed`).
    ``lossless``: the lossless test is on (default: the spec's gate).
    """
    lossless_on = spec.gates.lossless if lossless is None else lossless
    blocks: list[Block] = []
    for duration in run_order(spec):
        if anchored:
            for series in series_of(spec):
                blocks += _series(duration, series, anchored_order(spec, lossless_on), "anchored")
        elif spec.protocol.design == "sequential":
            blocks += _sequential(spec, duration, lossless_on)
        else:
            blocks += _series(duration, Series(CONTROLS, BASELINE), "A" * control_blocks(spec), "controls")
            for series in series_of(spec):
                blocks += _series(duration, series, spec.protocol.order, "paired")
    return tuple(b for b in blocks if anchored or arms == "all" or (arms == BASELINE) == (b.letter == "A"))


def first_window(spec: RunSpec, shards: int, lossless: bool | None = None) -> Window:
    """Round 1 of a sharded campaign: each series up to its first look, in whole units on every shard.

    The fixed design has one look, at the end: its round 1 is every pair. A
    dearer duration run in order of cost waits for the look that passes the
    cheaper one (its window is empty until then).
    """
    windows: dict[str, dict[str, SeriesWindow]] = {}
    for index, duration in enumerate(run_order(spec)):
        looks = looks_of(spec, duration)
        waits = spec.protocol.design == "sequential" and in_order_of_cost(spec) and index > 0
        through = 0 if waits else round_up(looks[0], shards, looks[-1])
        windows[f"{duration:g}s"] = {s.name: SeriesWindow(0, through) for s in series_of(spec)}
    return Window(1, shards, spec.spec_id, windows)


def shard_blocks(spec: RunSpec, blocks: tuple[Block, ...], shard: Shard, window: Window,
                 lossless: bool | None = None) -> tuple[Block, ...]:
    """The blocks of ``blocks`` that ``shard`` runs in ``window``'s round (:mod:`h3bench.runspec.shards`).

    A pair goes with its AB/BA unit; a sequential design's control block goes
    with the pair it precedes, a fixed design's round-robin over the shards
    in round 1; the controls after the last pair are not run.
    """
    lossless_on = spec.gates.lossless if lossless is None else lossless
    precedes: dict[tuple[float, int], int] = {}  # (duration, control position) → the 0-based pair it precedes
    if spec.protocol.design == "sequential":
        for duration in run_order(spec):
            before, _ = _controls_plan(spec, duration, lossless_on)
            precedes.update({(duration, i): pair - 1 for i, pair in enumerate(before, start=1)})

    def keeps(block: Block) -> bool:
        if block.design == "controls":
            pair = precedes.get((block.duration, block.position))
            if spec.protocol.design != "sequential":
                return window.round == 1 and (block.position - 1) % shard.count + 1 == shard.index
            return pair is not None and shard.runs_pair(pair) and any(
                w.runs(pair) for s in series_of(spec) if (w := window.of(block.duration, s.name)) is not None)
        found = window.of(block.duration, block.candidate)
        return found is not None and shard.runs_pair(block.pair) and found.runs(block.pair)

    return tuple(b for b in blocks if keeps(b))


def check_shards(spec: RunSpec, shards: int) -> None:
    """Refuse more shards than the longest series has AB/BA units: a shard would have no pair to run at all.

    A duration with fewer units than shards leaves the last shards idle
    there (950pr-x4.toml's 15 s has 3 units: a fourth host runs 5 s only).
    """
    units = max(math.ceil(looks_of(spec, d)[-1] / 2) for d in run_order(spec))
    if shards > units:
        raise UsageError(f"--shard .../{shards}: {spec.name} has at most {units} AB/BA unit(s) of 2 pairs per "
                         f"duration, so at most {units} shards can each run whole pairs")


class Schedule:
    """The blocks one session runs, in order, and the test cases they make.

    ``arms`` selects the blocks this session runs. A candidate-only run
    (``anchored``) runs the anchored orders, and its other blocks come from
    the stored bundle (:attr:`stored_blocks`). A shard of a campaign over
    several hosts (``shard``) runs its AB/BA units of the round's ``window``
    (round 1 without one); its lossless test counts its own host's processes.
    """

    def __init__(self, spec: RunSpec, arms: str = "all", *, anchored: bool = False, shard: Shard | None = None,
                 window: Window | None = None) -> None:
        self.spec = spec
        self.anchored = anchored
        self.shard = shard
        self.window = window if window is not None or shard is None else first_window(spec, shard.count)
        self.blocks = self._own(spec_blocks(spec, arms, anchored=anchored))
        self.stored_blocks = tuple(b for b in spec_blocks(spec) if b.letter == "A") if anchored else ()
        self.baseline_blocks = tuple(b for b in (*self.stored_blocks,
                                                 *(self.blocks if anchored else self._own(spec_blocks(spec))))
                                     if b.letter == "A")
        self._controls = {series.name: series.control for series in series_of(spec)}
        self._order = {block.id: index for index, block in enumerate(self.blocks)}
        self._campaign = self.blocks if anchored or arms == "all" else spec_blocks(spec)

    def _own(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        if self.shard is None or self.window is None:
            return blocks
        return shard_blocks(self.spec, blocks, self.shard, self.window)

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
                                      for b in self.blocks if b.design != "controls"))
        raise ValueError(f"no campaign cases for fixture {fixture!r}")

    def partner(self, block: Block) -> Block:
        """The control block a candidate block's outputs are matched with.

        The other block of its AB/BA pair; in a candidate-only run, the
        stored baseline block of its series with the same rank (cycling when
        the stored series has fewer).
        """
        if block.design == "anchored":
            stored = [b for b in self.stored_blocks
                      if b.design == "paired" and b.candidate == block.candidate and b.duration == block.duration]
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
                if b.duration == duration and b.candidate == candidate and b.design == "paired"]

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
                    and (b.design == "anchored" or not self.anchored)]
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
