"""h3bench.course.course: one rule for which blocks run, asked one campaign at a time and thousands at once.

The vectorised walk (what the plan simulates) is compared, campaign by
campaign, with the same course asked block by block as the live run asks it
(:meth:`Course.why_not` over the static schedule) and round by round as the
pool asks it (:meth:`Course.first_window`, :meth:`Course.shard_runs`,
:meth:`Course.next_window`), for the same decisions. The decisions are
drawn: each series stops at some look with some outcome, as
:func:`h3bench.stats.sequential.judge_series` would say. The live simulator
campaigns that replay through the plan are in
tests_unit/session/test_sequential_campaign.py and
tests_unit/pool/test_pool_rounds.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.course.cases import Block, CandidateWorkload
from h3bench.course.course import Course
from h3bench.course.design import sequential_design
from h3bench.course.schedule import Schedule, spec_blocks
from h3bench.course.shards import Shard, Window
from h3bench.outcome import Outcome
from h3bench.quality import lossless_design
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from h3bench.stats.sequential import FUTILITY, PASSED, LookDecision

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
OUTCOME = {PASS: Outcome.PASS, FAIL: Outcome.FAIL, INCONCLUSIVE: Outcome.INCONCLUSIVE}


class Replay:
    """A run whose series stop where ``stop`` and ``code`` say (``(series, durations)``): a fake RunView."""

    def __init__(self, course: Course, stop: np.ndarray, code: np.ndarray) -> None:
        self.course, self.stop, self.code = course, stop, code
        self.ran: set[str] = set()
        self.blocks: list[Block] = []

    def _where(self, duration: float, series: str) -> tuple[int, int]:
        return self.course.series.index(series), self.course.durations.index(duration)

    def pairs_run(self, duration: float, series: str) -> int:
        return max((b.pair + 1 for b in self.blocks if b.duration == duration and b.candidate == series), default=0)

    def decision(self, duration: float, series: str) -> LookDecision | None:
        c, d = self._where(duration, series)
        pairs = sum(1 for b in self.blocks if b.duration == duration and b.candidate == series) // 2  # complete ones
        if pairs < 2:
            return None
        looks = self.course.design.looks[d]
        stopped = pairs >= self.stop[c, d]
        code = int(self.code[c, d]) if stopped else INCONCLUSIVE
        return LookDecision(bool(stopped), OUTCOME[code], PASSED if code == PASS else FUTILITY, "drawn", 1, looks,
                            pairs, None, 0.9, 0.8, 1.0, 0.01, 0.01)

    def baseline_run(self, duration: float, series: str) -> int:
        """Counted as the judge counts: the blocks that run the series' control arm (a control block: the baseline)."""
        control = self.course.control_arms[self.course.series.index(series)]
        return sum(1 for b in self.blocks if b.duration == duration and b.letter == "A" and b.arm == control)

    def controls_run(self, duration: float) -> tuple[int, ...]:
        return tuple(b.position for b in self.blocks if b.duration == duration and b.design == "controls")

    def halted(self, series: str) -> tuple[str, str] | None:
        return None

    def take(self, block: Block) -> None:
        self.ran.add(block.id)
        self.blocks.append(block)


def _counts(course: Course, blocks: list[Block]) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.zeros((course.n_series, course.design.n_durations), int)
    controls = np.zeros(course.design.n_durations, int)
    for b in blocks:
        d = course.durations.index(b.duration)
        if b.design == "controls":
            controls[d] += 1
        else:
            c = course.series.index(b.candidate)
            pairs[c, d] = max(pairs[c, d], b.pair + 1)
    return pairs, controls


def one_host(spec, course: Course, stop: np.ndarray, code: np.ndarray) -> Replay:
    """The live rule: every block of the static schedule in order, run unless the course says why not."""
    run = Replay(course, stop, code)
    for block in spec_blocks(spec, lossless=course.lossless):
        why = course.why_not(run, block.duration, None if block.design == "controls" else block.candidate)
        if why is None:
            run.take(block)
    return run


def over_hosts(spec, course: Course, stop: np.ndarray, code: np.ndarray) -> Replay:
    """The pool's rule: round after round, each shard runs its part of the round's window, then a look."""
    run = Replay(course, stop, code)
    window: Window = course.first_window(spec.spec_id)
    blocks = spec_blocks(spec, lossless=course.lossless)
    assert course.shards is not None
    for _ in range(20):
        ran = [b for i in range(1, course.shards + 1) for b in
               Schedule(spec, shard=Shard(i, course.shards), window=window).blocks]
        assert len({b.id for b in ran}) == len(ran) and not {b.id for b in ran} & run.ran, "a block runs once"
        if not ran:
            return run
        for block in sorted(ran, key=blocks.index):
            run.take(block)
        window = course.next_window(run, spec.spec_id, window.round)
    raise AssertionError("the rounds never ended")


def _drawn(course: Course, data: st.DataObject) -> tuple[np.ndarray, np.ndarray]:
    shape = (course.n_series, course.design.n_durations)
    stop = np.array([[data.draw(st.sampled_from(course.design.looks[d])) for d in range(shape[1])]
                     for _ in range(shape[0])])
    code = np.array([[data.draw(st.sampled_from([PASS, PASS, INCONCLUSIVE, FAIL])) for _ in range(shape[1])]
                     for _ in range(shape[0])])
    return stop, code


def lossless_research():
    """sim-research.toml with the lossless test on: its final combination is also compared with a distinct original
    baseline, whose A blocks count for that series' lossless test alone."""
    data = load_runspec(SPECS / "sim-research.toml").model_dump(mode="json")
    data["gates"]["lossless"] = True
    return parse_runspec(data, source="sim-research-lossless")


@pytest.fixture(scope="module", params=["sim.toml", "sim-candidates.toml", "910b1-x8.toml", "950pr-x4.toml",
                                        "sim-research.toml, lossless"])
def spec(request):
    return lossless_research() if request.param == "sim-research.toml, lossless" else load_runspec(SPECS / request.param)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_one_host_runs_block_for_block_what_the_plan_walks(spec, data):
    course = Course.of(spec)
    stop, code = _drawn(course, data)
    live = one_host(spec, course, stop, code)
    walk = course.walk(stop[None], code[None])
    pairs, controls = _counts(course, live.blocks)
    assert (pairs == walk.pairs[0]).all() and (controls == walk.controls[0]).all(), (stop, code, pairs, controls)
    # Each series' lossless test has, by the judge's count of what ran, the control processes the walk counts.
    schedule = Schedule(spec, lossless=course.lossless)
    judged = [[sum(1 for b in schedule.lossless_processes(CandidateWorkload(s, duration))[0] if b.id in live.ran)
               for duration in course.durations] for s in course.series]
    assert judged == walk.baseline[0].tolist(), (stop, code)


@settings(max_examples=15, deadline=None)
@given(data=st.data(), shards=st.integers(2, 3))
def test_rounds_over_hosts_run_block_for_block_what_the_plan_walks(spec, data, shards):
    course = Course.of(spec, shards=shards)
    stop, code = _drawn(course, data)
    pooled = over_hosts(spec, course, stop, code)
    walk = course.walk(stop[None], code[None])
    pairs, controls = _counts(course, pooled.blocks)
    assert (pairs == walk.pairs[0]).all() and (controls == walk.controls[0]).all(), (stop, code, pairs, controls)


def test_a_candidate_whose_rival_stopped_early_gets_its_controls_before_the_look_that_needs_them():
    """910b1-x8.toml: candidate 2 stops for futility after 2 pairs, candidate 1 goes on. Before round f, where
    candidate 1 may first PASS, the controls make up what the two series' A blocks leave short."""
    spec = load_runspec(SPECS / "910b1-x8.toml")
    course = Course.of(spec)
    f, alpha = course.first_pass(0), course.design.lossless_alpha(0)
    stop, code = np.array([[f, 4], [2, 3]]), np.array([[PASS, PASS], [INCONCLUSIVE, INCONCLUSIVE]])
    run = one_host(spec, course, stop, code)
    at_5 = [b for b in run.blocks if b.duration == 5.0]
    controls = [i for i, b in enumerate(at_5) if b.design == "controls"]
    needed = lossless_design.baseline_needed(f, alpha)
    assert len(controls) == needed - (f + 2), "what the A blocks of both series leave short"
    assert all(b.pair == f - 1 for b in at_5[controls[-1] + 1:]), "run before the pairs of round f"
    assert run.baseline_run(5.0, course.series[0]) >= needed
    # Both series going on: their A blocks are enough, no control runs.
    both = one_host(spec, course, np.array([[f, 4], [f, 4]]), np.array([[PASS, PASS], [PASS, PASS]]))
    assert not both.controls_run(5.0)
    # At 15 s the first candidate is alone: its controls before the last look.
    assert len(run.controls_run(15.0)) == lossless_design.baseline_needed(4, course.design.lossless_alpha(1)) - 4


def test_a_control_is_not_decided_before_the_round_it_precedes():
    """Asked early (the ETA, the unfinished list) the course does not yet skip a control: it may still be needed."""
    spec = load_runspec(SPECS / "sim.toml")
    course = Course.of(spec)
    run = Replay(course, np.array([[8, 4]]), np.array([[INCONCLUSIVE, PASS]]))
    assert course.why_not(run, 5.0, None) is None
    for block in spec_blocks(spec)[:2]:
        run.take(block)
    assert course.why_not(run, 5.0, None) is None
    assert course.why_not(run, 15.0, None) is None  # 15 s waits for 5 s


def test_the_gate_on_the_dearer_duration_is_the_speed_pass_alone():
    design = sequential_design(2)
    course = Course(design, 2, lossless=True)
    stop = np.array([[[4, 4], [2, 4]]])
    code = np.array([[[PASS, PASS], [INCONCLUSIVE, PASS]]])
    walk = course.walk(stop, code)
    assert walk.reached[0].tolist() == [[True, True], [True, False]]
    assert walk.pairs[0, 1, 1] == 0 and walk.pairs[0, 0, 1] == 4
    every = Course(dataclasses.replace(design, in_order_of_cost=False), 2, lossless=True).walk(stop, code)
    assert every.reached.all()


def test_the_fixed_design_runs_its_controls_first_whenever_the_duration_runs():
    data = load_runspec(SPECS / "sim.toml").model_dump(mode="json")
    data["protocol"]["design"] = "fixed"
    fixed = parse_runspec(data, source="sim-fixed")
    course = Course.of(fixed)
    assert [course.control_slots(d) for d in range(2)] == [2, 2]
    walk = course.walk(np.full((1, 1, 2), 4), np.full((1, 1, 2), INCONCLUSIVE))
    assert walk.controls.tolist() == [[2, 2]] and walk.baseline.tolist() == [[[6, 6]]]
    run = one_host(fixed, course, np.full((1, 2), 4), np.full((1, 2), INCONCLUSIVE))
    assert [b.id for b in run.blocks][:2] == ["5s-baseline-1A-baseline", "5s-baseline-2A-baseline"]
    assert len(run.controls_run(15.0)) == 2
