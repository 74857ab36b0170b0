"""The sequential design in a real campaign: a series stops at the look that decides it, and every stop is evidence.

Two candidates on the simulator, lossless on, round-robin at 5 s then 15 s:
``fast`` (30 % faster) passes at the first look its lossless test allows at
each duration, and the blocks after it do not run; ``slow`` (50 % slower)
stops at 5 s (FAIL, or futility), so none of its 15 s blocks run, and
``fast`` gets the control blocks its lossless test needs before the look
that needs them. verdict.json records where and why each stopped, the blocks
run and not run and the device time; the skipped tests say why. The plan's
simulation, fed the campaign's own latencies, runs the same blocks, block
for block, and reaches the same decisions (tests_unit/course_replay.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from h3bench.course.cases import CandidateWorkload
from h3bench.evidence import verify
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from tests_unit.campaign_project import child_campaign, write_campaign
from tests_unit.course_replay import live_codes, planned_blocks, replay

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sequential-campaign")]


@dataclass(frozen=True)
class Ran:
    code: int
    output: str
    bundle: Path
    verdict: dict[str, Any]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    project = tmp_path_factory.mktemp("sequential")
    # Modelled requests of 0.4-0.9 s: the simulator's fresh renders (warmup, audit) fit inside them on a busy
    # machine too, so an audit's latency is the arm's, never the renderer's.
    spec = write_campaign(project, durations=(5, 15), baseline={"time_scale": 0.0006},
                          candidates={"fast": {"time_scale": 0.00042}, "slow": {"time_scale": 0.0009}},
                          protocol={"design": "sequential", "requests_per_block": 2, "audit_counts": True},
                          gates={"lossless": True})
    code, output, bundle = child_campaign(project, spec, "tests_perf", "--benchmark-disable", "-p", "no:randomly",
                                          "-rs", verbose=True)
    assert bundle is not None, output[-8000:]
    return Ran(code, output, bundle, json.loads((bundle / "verdict.json").read_text()))


def test_a_clear_effect_stops_its_series_at_the_look_that_decides_it(ran):
    verdict = ran.verdict
    for duration, last in (("5s", 8), ("15s", 4)):
        looks = verdict["candidates"]["fast"]["durations"][duration]["looks"]
        assert looks["stopped"] and looks["reason"] == "faster", ran.output[-3000:]
        assert looks["pairs"] == 4, "the first look its lossless test allows: 4 pairs at 0.01 and at 15 s's last"
        assert verdict["candidates"]["fast"]["durations"][duration]["speed"] == "PASS"
        assert len(looks["blocks_run"]) == 2 * looks["pairs"]
        assert len(looks["blocks_not_run"]) == 2 * (last - looks["pairs"])
        assert looks["device_s"] > 0 and looks["fixed_device_s"] > 0
    assert verify(ran.bundle).ok


def test_a_candidate_that_did_not_pass_the_cheaper_duration_runs_nothing_at_the_dearer(ran):
    verdict = ran.verdict
    slow = verdict["candidates"]["slow"]["durations"]
    assert slow["5s"]["looks"]["stopped"] and slow["5s"]["speed"] in ("FAIL", "INCONCLUSIVE")
    assert slow["15s"]["looks"]["blocks_run"] == [] and len(slow["15s"]["looks"]["blocks_not_run"]) == 8
    assert re.search(r"SKIPPED .*15s-slow-1A-baseline: not run: slow did not pass 5 s", ran.output), ran.output[-3000:]
    ran_blocks = sum(d["blocks_run"] for d in verdict["device"].values())
    listed = 2 * 16 + 3 + 2 * 8 + 2  # every series' pairs and the control blocks one series alone could need
    assert re.search(rf"\b{ran_blocks} passed, {listed - ran_blocks} skipped\b", ran.output), ran.output[-500:]


def test_the_summary_and_the_device_time_say_where_each_series_stopped(ran):
    verdict, text = ran.verdict, ran.output
    assert "sequential design: AB/BA pairs round-robin" in text
    assert "  design: sequential design, stopped at look" in text
    for key in ("5s", "15s"):
        device = verdict["device"][key]
        assert device["blocks_run"] + device["blocks_not_run"] == (32 + 3 if key == "5s" else 16 + 2)
        assert device["device_s"] > 0
    assert re.search(r"device time 5s: .*, against [0-9.]+ for the fixed design \(\d+% (saved|more)\)", text), text


def test_a_candidate_whose_rival_stopped_gets_its_controls_before_the_look_that_needs_them(ran):
    """``slow`` stopped at 5 s: ``fast``'s lossless test at 15 s has its 4 A blocks and the 2 controls that run
    before its last look; at 5 s the controls make up what both series' A blocks leave short of 7."""
    results = Results.from_bundle(ran.bundle, Settings(None, "all", ran.bundle.parent))
    baseline_15, candidate_15 = results.schedule.lossless_processes(CandidateWorkload("fast", 15.0))
    ran_15 = [b for b in baseline_15 if b.id in results.ran]
    assert len([b for b in candidate_15 if b.id in results.ran]) == 4
    assert len(ran_15) == 6 and len(results.controls_run(15.0)) == 2
    assert results.baseline_run(5.0, "fast") >= 7
    order = [b.id for b in results.schedule.blocks if b.id in results.ran and b.duration == 15.0]
    assert order.index("15s-baseline-1A-baseline") < order.index("15s-fast-7B-fast"), "before round 4"


def test_the_plans_simulation_of_the_campaigns_own_latencies_runs_the_same_blocks(ran):
    """The plan's course and decisions (h3bench.course.designsim), fed the latencies this campaign measured: the
    same blocks run, block for block, and each series reaches the decision the run took."""
    results = Results.from_bundle(ran.bundle, Settings(None, "all", ran.bundle.parent))
    spec = results.spec
    plan = replay(spec, results)
    assert planned_blocks(spec, plan) == set(results.ran), ran.output[-2000:]
    assert (plan.code[0] == live_codes(spec, results)).all()
