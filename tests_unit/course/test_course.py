"""h3bench.course.course: one rule for which blocks run, asked one campaign at a time and thousands at once.

The vectorised walk (what the plan simulates) is compared, campaign by
campaign, with the same course asked block by block as the live run asks it
(:meth:`Course.why_not` over the static schedule) and round by round as the
pool asks it (:meth:`Course.first_window`, :meth:`Course.shard_runs`,
:meth:`Course.next_window`), for the same latencies. The latencies are
drawn (:func:`h3bench.course.designsim.draw_samples`); the walk takes each
series' stop from :func:`h3bench.stats.sequential.judge_series`, as the plan
does, and the course asked block by block takes its own decisions from the
blocks the fake run hands it, as the live run does. The live simulator
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
from h3bench.course.designsim import LatencyModel, draw_samples
from h3bench.course.schedule import Schedule, spec_blocks
from h3bench.course.shards import Shard, Window
from h3bench.quality import lossless_design
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.stats.intervals import INCONCLUSIVE, PASS
from h3bench.stats.sequential import SeriesBlock, judge_series, series_order

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
QUIET = LatencyModel(request_cv=0.002, process_cv=0.001)  # a scenario's latencies: each series stops as its ratio says


def latencies(course: Course, ratios: np.ndarray, seed: int = 0, model: LatencyModel = QUIET) -> np.ndarray:
    """``(series, durations)`` of each series' drawn seconds ``(blocks, columns)``, up to its last look."""
    rng = np.random.default_rng(seed)
    xs = np.empty(ratios.shape, object)
    for d in range(course.design.n_durations):
        found = course.boundaries(d)
        for c in range(course.n_series):
            xs[c, d] = draw_samples(rng, 1, series_order(found.max_pairs), course.design.budget, float(ratios[c, d]),
                                    model, found.looks[0])[0]
    return xs


def judged(course: Course, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each series' stop (pairs) and speed code from all its latencies, as the plan's simulation takes them."""
    stop, code = np.zeros(xs.shape, int), np.zeros(xs.shape, int)
    design = course.design
    for (c, d), x in np.ndenumerate(xs):
        found = course.boundaries(d)
        out = judge_series(x[None], series_order(found.max_pairs), design.budget, found,
                           leak_level=design.leak_level, cache_ratio=design.cache_ratio)
        stop[c, d], code[c, d] = int(out.pairs[0]), int(out.code[0])
    return stop, code


class Replay:
    """A run whose blocks measure the latencies ``xs`` (:func:`latencies`): a fake RunView, handing blocks over."""

    def __init__(self, course: Course, xs: np.ndarray) -> None:
        self.course, self.xs = course, xs
        self.ran: set[str] = set()
        self.blocks: list[Block] = []

    def pairs_run(self, duration: float, series: str) -> int:
        return max((b.pair + 1 for b in self.blocks if b.duration == duration and b.candidate == series), default=0)

    def series_blocks(self, duration: float, series: str) -> list[SeriesBlock]:
        x = self.xs[self.course.series.index(series), self.course.durations.index(duration)]
        measured = self.course.design.budget.measured
        ran = sorted((b for b in self.blocks if b.duration == duration and b.candidate == series),
                     key=lambda b: b.position)
        found = []
        for position, block in enumerate(ran, start=1):
            if block.position != position:
                break
            row = x[position - 1]
            found.append(SeriesBlock(block.letter, tuple(map(float, row[:measured])),
                                     float(row[measured]) if self.course.design.budget.audit else None))
        return found

    def baseline_run(self, duration: float, series: str) -> int:
        """Counted as the judge counts: the blocks that run the series' control arm (a control block: the baseline)."""
        control = self.course.control_arms[self.course.series.index(series)]
        return sum(1 for b in self.blocks if b.duration == duration and b.letter == "A" and b.arm == control)

    def controls_run(self, duration: float) -> tuple[int, ...]:
        return tuple(b.position for b in self.blocks if b.duration == duration and b.kind == "controls")

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
        if b.kind == "controls":
            controls[d] += 1
        else:
            c = course.series.index(b.candidate)
            pairs[c, d] = max(pairs[c, d], b.pair + 1)
    return pairs, controls


def one_host(spec, course: Course, xs: np.ndarray) -> Replay:
    """The live rule: every block of the static schedule in order, run unless the course says why not."""
    run = Replay(course, xs)
    for block in spec_blocks(spec, lossless=course.lossless):
        why = course.why_not(run, block.duration, None if block.kind == "controls" else block.candidate)
        if why is None:
            run.take(block)
    return run


def over_hosts(spec, course: Course, xs: np.ndarray) -> Replay:
    """The pool's rule: round after round, each shard runs its part of the round's window, then a look."""
    run = Replay(course, xs)
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


def _drawn(course: Course, data: st.DataObject) -> np.ndarray:
    """Latencies of true ratios that stop a series at any look, with any outcome, at the reference noise."""
    shape = (course.n_series, course.design.n_durations)
    ratios = np.array([[data.draw(st.sampled_from([0.6, 0.9, 0.96, 1.0, 1.0, 1.5])) for _ in range(shape[1])]
                       for _ in range(shape[0])])
    return latencies(course, ratios, data.draw(st.integers(0, 2**16)), LatencyModel())


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
    xs = _drawn(course, data)
    stop, code = judged(course, xs)
    live = one_host(spec, course, xs)
    walk = course.walk(stop[None], code[None])
    pairs, controls = _counts(course, live.blocks)
    assert (pairs == walk.pairs[0]).all() and (controls == walk.controls[0]).all(), (stop, code, pairs, controls)
    # Each series' lossless test has, by the judge's count of what ran, the control processes the walk counts.
    schedule = Schedule(spec, lossless=course.lossless)
    counted = [[sum(1 for b in schedule.lossless_processes(CandidateWorkload(s, duration))[0] if b.id in live.ran)
                for duration in course.durations] for s in course.series]
    assert counted == walk.baseline[0].tolist(), (stop, code)


@settings(max_examples=15, deadline=None)
@given(data=st.data(), shards=st.integers(2, 3))
def test_rounds_over_hosts_run_block_for_block_what_the_plan_walks(spec, data, shards):
    course = Course.of(spec, shards=shards)
    xs = _drawn(course, data)
    stop, code = judged(course, xs)
    pooled = over_hosts(spec, course, xs)
    walk = course.walk(stop[None], code[None])
    pairs, controls = _counts(course, pooled.blocks)
    assert (pairs == walk.pairs[0]).all() and (controls == walk.controls[0]).all(), (stop, code, pairs, controls)


def test_a_candidate_whose_rival_stopped_early_gets_its_controls_before_the_look_that_needs_them():
    """910b1-x8.toml: candidate 2 stops for futility after 2 pairs, candidate 1 goes on. Before round f, where
    candidate 1 may first PASS, the controls make up what the two series' A blocks leave short."""
    spec = load_runspec(SPECS / "910b1-x8.toml")
    course = Course.of(spec)
    f, alpha = course.first_pass(0), course.design.lossless_alpha(0)
    xs = latencies(course, np.array([[0.5, 0.5], [1.0, 1.0]]))  # 1: clearly faster; 2: clearly not faster
    stop, code = judged(course, xs)
    assert stop[:, 0].tolist() == [f, 2] and code[:, 0].tolist() == [PASS, INCONCLUSIVE] and code[0, 1] == PASS
    run = one_host(spec, course, xs)
    at_5 = [b for b in run.blocks if b.duration == 5.0]
    controls = [i for i, b in enumerate(at_5) if b.kind == "controls"]
    needed = lossless_design.baseline_needed(f, alpha)
    assert len(controls) == needed - (f + 2), "what the A blocks of both series leave short"
    assert all(b.pair == f - 1 for b in at_5[controls[-1] + 1:]), "run before the pairs of round f"
    assert run.baseline_run(5.0, course.series[0]) >= needed
    # Both series going on: their A blocks are enough, no control runs.
    both = one_host(spec, course, latencies(course, np.full((2, 2), 0.5)))
    assert not both.controls_run(5.0)
    # At 15 s the first candidate is alone: its controls before the last look.
    assert len(run.controls_run(15.0)) == lossless_design.baseline_needed(4, course.design.lossless_alpha(1)) - 4


def test_a_control_is_not_decided_before_the_round_it_precedes():
    """Asked early (the ETA, the unfinished list) the course does not yet skip a control: it may still be needed."""
    spec = load_runspec(SPECS / "sim.toml")
    course = Course.of(spec)
    run = Replay(course, latencies(course, np.array([[1.0, 0.5]])))
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
    run = one_host(fixed, course, latencies(course, np.full((1, 2), 1.0)))
    assert [b.id for b in run.blocks][:2] == ["5s-baseline-1A-baseline", "5s-baseline-2A-baseline"]
    assert len(run.controls_run(15.0)) == 2
