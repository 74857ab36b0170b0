"""h3bench.course.schedule: the lossless control blocks, candidate-only anchored orders and what the lossless test counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from h3bench.course.cases import CONTROLS, CandidateWorkload, MatchedPair
from h3bench.course.course import Course
from h3bench.course.design import (
    DesignMode,
    anchored_order,
    control_blocks,
    looks_of,
    lossless_level,
    run_order,
    spread,
)
from h3bench.course.schedule import Schedule, spec_blocks
from h3bench.quality import lossless_design
from h3bench.quality.lossless import lossless_feasibility
from h3bench.runspec import load_runspec

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"


def with_protocol(spec, **changes):
    return spec.model_copy(update={"protocol": spec.protocol.model_copy(update=changes)})


@pytest.fixture(scope="module")
def sim():
    """sim.toml in the fixed design (ABBAABBA, two control blocks first), which these tests are about."""
    return with_protocol(load_runspec(SPECS / "sim.toml"), design=DesignMode.FIXED, requests_per_block=3, audit_counts=False)


def test_lossless_specs_run_two_control_blocks_first_at_each_duration(sim):
    assert sim.gates.lossless and sim.protocol.lossless_baseline_blocks is None and control_blocks(sim) == 2
    blocks = spec_blocks(sim)
    assert [b.id for b in blocks[:10]] == [
        "5s-baseline-1A-baseline", "5s-baseline-2A-baseline",
        "5s-clean-1A-baseline", "5s-clean-2B-clean", "5s-clean-3B-clean", "5s-clean-4A-baseline",
        "5s-clean-5A-baseline", "5s-clean-6B-clean", "5s-clean-7B-clean", "5s-clean-8A-baseline",
    ]
    assert blocks[10].id == "15s-baseline-1A-baseline" and len(blocks) == 20
    assert {b.kind for b in blocks if b.candidate == CONTROLS} == {"controls"}


def test_no_control_blocks_without_lossless_or_when_set_to_zero(sim):
    off = sim.model_copy(update={"gates": sim.gates.model_copy(update={"lossless": False})})
    assert control_blocks(off) == 0 and len(spec_blocks(off)) == 16
    assert control_blocks(with_protocol(sim, lossless_baseline_blocks=0)) == 0
    assert control_blocks(with_protocol(off, lossless_baseline_blocks=3)) == 3


def test_control_blocks_are_baseline_processes_of_the_lossless_test_and_not_speed(sim):
    schedule = Schedule(sim)
    baseline, candidate = schedule.lossless_processes(CandidateWorkload("clean", 5.0))
    assert [b.id for b in baseline] == ["5s-baseline-1A-baseline", "5s-baseline-2A-baseline", "5s-clean-1A-baseline",
                                        "5s-clean-4A-baseline", "5s-clean-5A-baseline", "5s-clean-8A-baseline"]
    assert [b.position for b in candidate] == [2, 3, 6, 7]
    assert all(b.candidate == "clean" for b in schedule.series(5.0, "clean"))
    assert len(schedule.series(5.0, "clean")) == 8
    assert {case.id for case in schedule.cases("candidate_workload")} == {"5s-clean", "15s-clean"}
    assert len(schedule.cases("baseline_output")) == 2 * 6 * 3


def test_every_series_baseline_counts_for_every_candidate(tmp_path):
    spec = with_protocol(load_runspec(SPECS / "sim-candidates.toml"), design=DesignMode.FIXED, requests_per_block=3,
                         audit_counts=False)
    schedule = Schedule(spec)
    baseline, candidate = schedule.lossless_processes(CandidateWorkload("noisy", 5.0))
    assert len(baseline) == control_blocks(spec) + 4 * len(spec.candidates) and len(candidate) == 4
    # A selection reads only its own series and the controls; other series count when they ran.
    needed = schedule.blocks_of(CandidateWorkload("noisy", 5.0))
    assert {b.candidate for b in needed} == {"noisy", CONTROLS}


def test_a_candidate_only_run_runs_the_anchored_order_and_matches_stored_baselines(sim):
    sim = with_protocol(sim, anchored_order="BABBAB")
    schedule = Schedule(sim, "candidate", anchored=True)
    today = [b for b in schedule.blocks if b.duration == 5.0]
    assert "".join(b.letter for b in today) == "BABBAB" == sim.protocol.anchored_order
    assert today[0].id == "5s-clean-anchored-1B-clean" and today[1].id == "5s-clean-anchored-2A-baseline"
    stored_ids = {b.id for b in schedule.stored_blocks}
    assert not stored_ids & {b.id for b in schedule.blocks}
    pairs = [p for p in schedule.cases("matched_pair") if isinstance(p, MatchedPair) and p.duration == 5.0]
    partners = [p.baseline.block.position for p in pairs if p.candidate.index == 0]
    assert partners == [1, 4, 5, 8]  # the i-th candidate block with the i-th stored A block of its series
    assert all(p.baseline.block.kind == "paired" for p in pairs)
    assert len({p.id for p in pairs}) == len(pairs)
    baseline, candidate = schedule.lossless_processes(CandidateWorkload("clean", 5.0))
    assert len(baseline) == 2 and len(candidate) == 4  # today's anchors only: stored processes may have shifted
    assert len(set(schedule.case_by_id())) == sum(len(schedule.cases(f)) for f in
                                                  ("block", "baseline_output", "matched_pair", "candidate_workload"))
    assert [b.letter for b in schedule.stored_series(5.0, "clean")] == ["A"] * 4


def test_candidate_only_without_stored_bundle_keeps_the_spec_order(sim):
    schedule = Schedule(sim, "candidate")
    assert [b.position for b in schedule.blocks if b.duration == 5.0] == [2, 3, 6, 7]


def test_the_plans_block_line_keeps_the_lossless_controls_apart_from_the_series(sim, tmp_path):
    from h3bench.plan.estimate import make_plan
    from h3bench.plan.summary import block_groups

    planned = make_plan(sim, lock_path=tmp_path / "lock")
    line = block_groups(b for b in planned.blocks if b.duration == 5.0)
    assert line == ("lossless controls: 1 baseline, 2 baseline; clean: 1A baseline, 2B clean, 3B clean, "
                    "4A baseline, 5A baseline, 6B clean, 7B clean, 8A baseline")
    anchored = make_plan(sim, arms="candidate", anchored=True, lock_path=tmp_path / "lock")
    assert block_groups(b for b in anchored.blocks if b.duration == 5.0).startswith("clean (anchored): ")


def test_the_plan_of_a_candidate_only_run_lists_its_anchored_blocks(sim, tmp_path):
    from h3bench.plan.estimate import make_plan

    planned = make_plan(sim, arms="candidate", anchored=True, lock_path=tmp_path / "lock")
    assert "".join(b.letter for b in planned.blocks if b.duration == 5.0) == anchored_order(sim) != "BABBAB"
    assert len(make_plan(sim, arms="candidate", lock_path=tmp_path / "lock").blocks) == 8  # the spec's B blocks


# -- the sequential design ---------------------------------------------------------------------------


def test_the_sequential_design_runs_the_series_pairs_round_robin_cheapest_duration_first():
    spec = load_runspec(SPECS / "sim-candidates.toml")
    assert spec.protocol.design is DesignMode.SEQUENTIAL and run_order(spec) == (5.0, 15.0)
    blocks = [b for b in spec_blocks(spec) if b.duration == 5.0 and b.kind == "paired"]
    # Pair k of every series before pair k + 1 of any: AB, then BA, as ABBA.
    assert [b.id for b in blocks[:6]] == [
        "5s-clean-1A-baseline", "5s-clean-2B-clean", "5s-noisy-1A-baseline", "5s-noisy-2B-noisy",
        "5s-audio_shift-1A-baseline", "5s-audio_shift-2B-audio_shift"]
    assert [b.letter for b in blocks if b.candidate == "clean"] == list("ABBA" * 4)
    assert looks_of(spec, 5.0) == (2, 3, 4, 5, 6, 7, 8) and looks_of(spec, 15.0) == (3, 4)


def test_lossless_control_blocks_are_listed_before_the_round_where_pass_is_first_allowed():
    """As many as one series running alone would need there; the course decides which run (tests_unit/runspec/
    test_course.py)."""
    spec = load_runspec(SPECS / "sim.toml")
    course = Course.of(spec)
    for d, duration in enumerate(run_order(spec)):
        blocks = [b for b in spec_blocks(spec) if b.duration == duration]
        controls = [i for i, b in enumerate(blocks) if b.kind == "controls"]
        f = course.first_pass(d)
        assert controls and controls[0] == 2 * (f - 1), "right before the pairs of round f, not first"
        assert controls == list(range(controls[0], controls[0] + len(controls)))
        assert lossless_design.baseline_needed(f, lossless_level(spec, duration)) == len(controls) + f
    assert [course.first_pass(d) for d in range(2)] == [4, 4]  # 0.01 at 5 s: 4 pairs; 15 s: its last look
    off = spec.model_copy(update={"gates": spec.gates.model_copy(update={"lossless": False})})
    assert not [b for b in spec_blocks(off) if b.kind == "controls"]
    assert Course.of(off).first_pass(0) == 2


def test_durations_run_in_order_of_cost_by_their_hints():
    spec = load_runspec(SPECS / "950pr-x4.toml")
    assert run_order(spec) == (5.0, 15.0)
    hints = spec.hints.model_copy(update={"e2e_s": {"baseline": {"5": 9000.0, "15": 5887.24}}})
    assert run_order(spec.model_copy(update={"hints": hints})) == (15.0, 5.0)
    assert run_order(with_protocol(spec, durations_in_order_of_cost=False)) == tuple(spec.workload.durations)


@pytest.mark.parametrize("design, anchors", [(DesignMode.SEQUENTIAL, 7), (DesignMode.FIXED, 6)])
def test_unset_the_anchored_order_has_the_anchors_the_lossless_test_needs_to_decide(sim, design, anchors):
    # With the lossless test on, a candidate-only run's controls are today's anchors only: two (BABBAB) can never
    # decide. Unset, the order has the fewest anchors that can at every duration's level: 0.01 at 5 s in the
    # sequential design (seven), 0.05 in the fixed one (six); without the lossless test, BABBAB.
    spec = with_protocol(sim, design=design)
    order = anchored_order(spec)
    assert order.count("A") == anchors and order.count("B") == 4 and order == spread(anchors, 4)
    for duration in spec.workload.durations:
        assert lossless_feasibility(anchors, 4, alpha=lossless_level(spec, duration)).feasible
    assert not all(lossless_feasibility(anchors - 1, 4, alpha=lossless_level(spec, d)).feasible
                   for d in spec.workload.durations)
    today = [b.letter for b in Schedule(spec, "candidate", anchored=True).blocks if b.duration == 5.0]
    assert "".join(today) == order
    assert anchored_order(spec, lossless=False) == "BABBAB"
