"""The sequential design in a real campaign: a series stops at the look that decides it, and every stop is evidence.

Two candidates on the simulator, round-robin at 5 s then 15 s: ``fast`` (30 %
faster) passes at an early look of each duration, and the blocks after it do
not run; ``slow`` (50 % slower) stops at 5 s (FAIL, or futility), so none of
its 15 s blocks run. verdict.json records where and why each stopped, the
blocks run and not run and the device time; the skipped tests say why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from h3bench.evidence import verify
from tests_unit.campaign_project import child_campaign, write_campaign

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
                          protocol={"design": "sequential", "requests_per_block": 2, "audit_counts": True})
    code, output, bundle = child_campaign(project, spec, "tests_perf", "--benchmark-disable", "-p", "no:randomly",
                                          "-rs", verbose=True)
    assert bundle is not None, output[-8000:]
    return Ran(code, output, bundle, json.loads((bundle / "verdict.json").read_text()))


def test_a_clear_effect_stops_its_series_at_the_look_that_decides_it(ran):
    verdict = ran.verdict
    for duration, last in (("5s", 8), ("15s", 5)):
        looks = verdict["candidates"]["fast"]["durations"][duration]["looks"]
        assert looks["stopped"] and looks["reason"] == "faster", ran.output[-3000:]
        assert verdict["candidates"]["fast"]["durations"][duration]["speed"] == "PASS"
        assert len(looks["blocks_run"]) == 2 * looks["pairs"]
        assert len(looks["blocks_not_run"]) == 2 * (last - looks["pairs"])
        assert looks["device_s"] > 0 and looks["fixed_device_s"] > 0
    assert verify(ran.bundle).ok


def test_a_candidate_that_did_not_pass_the_cheaper_duration_runs_nothing_at_the_dearer(ran):
    verdict = ran.verdict
    slow = verdict["candidates"]["slow"]["durations"]
    assert slow["5s"]["looks"]["stopped"] and slow["5s"]["speed"] in ("FAIL", "INCONCLUSIVE")
    assert slow["15s"]["looks"]["blocks_run"] == [] and len(slow["15s"]["looks"]["blocks_not_run"]) == 10
    assert re.search(r"SKIPPED .*15s-slow-1A-baseline: not run: slow did not pass 5 s", ran.output), ran.output[-3000:]
    ran_blocks = sum(len(d["looks"]["blocks_run"]) for c in verdict["candidates"].values()
                     for d in c["durations"].values())
    assert re.search(rf"\b{ran_blocks} passed, {2 * 16 + 2 * 10 - ran_blocks} skipped\b", ran.output), ran.output[-500:]


def test_the_summary_and_the_device_time_say_where_each_series_stopped(ran):
    verdict, text = ran.verdict, ran.output
    assert "sequential design: AB/BA pairs round-robin" in text
    assert "  design: sequential design, stopped at look" in text
    for key in ("5s", "15s"):
        device = verdict["device"][key]
        assert device["blocks_run"] + device["blocks_not_run"] == (32 if key == "5s" else 20)
        assert device["device_s"] > 0
    assert re.search(r"device time 5s: .*, against [0-9.]+ for the fixed design \(\d+% (saved|more)\)", text), text
