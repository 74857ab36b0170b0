"""A lossless sequential campaign whose final combination is also compared with a distinct original baseline.

A variant of fixtures/runspecs/sim-research.toml, kept small: its final
combination ``combined`` against the baseline and, as the series
``combined-vs-original``, against the original baseline (10 % slower), the
lossless test on, one duration. The A blocks of ``combined-vs-original`` run
the original baseline: they are control processes of that series' lossless
test only, and the control blocks (the baseline) count for the series against
the baseline only. The judge, the live run's course and the plan's simulation
count them by that one rule, so the plan's simulation, fed this campaign's own
latencies (tests_unit/course_replay.py), runs the same blocks and the same
control blocks, and its lossless test decides where the live one does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from h3bench.course.cases import CandidateWorkload
from h3bench.course.design import run_order, series_of
from h3bench.quality import lossless_design
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from tests_unit.campaign_project import child_campaign, write_campaign
from tests_unit.course_replay import live_codes, planned_blocks, replay

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("original-baseline-campaign")]

CODES = {"PASS": PASS, "FAIL": FAIL, "INCONCLUSIVE": INCONCLUSIVE}
SEEDED = {"block_seed": 0}  # each block a process of its own outputs, as sim-research's arms


@dataclass(frozen=True)
class Ran:
    output: str
    results: Results


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    project = tmp_path_factory.mktemp("original-baseline")
    # sim-research's arms: the original baseline 10 % slower, the combination 30 % faster. Modelled requests of
    # 0.4-0.5 s: the simulator's fresh renders (warmup, audit) fit inside them on a busy machine too, so an audit's
    # latency is the arm's, never the renderer's.
    spec = write_campaign(project, baseline={"time_scale": 0.0006, **SEEDED},
                          candidates={"combined": {"time_scale": 0.00042, **SEEDED},
                                      "original": {"time_scale": 0.00066, **SEEDED}},
                          protocol={"design": "sequential", "order": "ABBAABBA", "requests_per_block": 3,
                                    "audit": False},  # the audit's fresh render is the busy machine's, not the arm's
                          gates={"lossless": True})
    spec.write_text('final = "combined"\noriginal_baseline = "original"\n' + spec.read_text())
    _, output, bundle = child_campaign(project, spec, "tests_perf", "tests_quality/test_lossless.py",
                                       "--benchmark-disable", "-p", "no:randomly", "-rs")
    assert bundle is not None, output[-8000:]
    return Ran(output, Results.from_bundle(bundle, Settings(None, "all", bundle.parent)))


def _live_lossless(results: Results) -> np.ndarray:
    """``(series, durations)``: each series' lossless outcome as the judge gave it (INCONCLUSIVE where none)."""
    spec = results.spec
    found = json.loads((results.bundle.path / "verdict.json").read_text())["candidates"]
    codes = np.full((len(series_of(spec)), len(run_order(spec))), INCONCLUSIVE)
    for c, series in enumerate(series_of(spec)):
        for d, duration in enumerate(run_order(spec)):
            lossless: dict[str, Any] | None = found[series.name]["durations"][f"{duration:g}s"]["lossless"]
            if lossless is not None:
                codes[c, d] = CODES[lossless["outcome"]]
    return codes


def test_each_series_counts_the_processes_of_its_own_control_arm(ran):
    results = ran.results
    schedule = results.schedule
    for series in series_of(results.spec):
        baseline, _ = schedule.lossless_processes(CandidateWorkload(series.name, 5.0))
        assert {b.arm for b in baseline} == {series.control}
        assert results.baseline_run(5.0, series.name) == sum(1 for b in baseline if b.id in results.ran)
    # The series against the baseline has the control blocks and the A blocks of combined; the one against the
    # original baseline only its own A blocks, which the control blocks cannot make up for.
    f, needed = 4, lossless_design.baseline_needed(4, results.course.design.lossless_alpha(0))
    assert results.baseline_run(5.0, "combined") == needed == f + len(results.controls_run(5.0))
    assert results.baseline_run(5.0, "combined-vs-original") == f < needed


def test_the_plans_simulation_runs_the_same_blocks_and_decides_the_same_lossless_tests(ran):
    """The plan's course and decisions fed the campaign's own latencies: the same blocks and control blocks run,
    and the lossless test is decided (here PASS: the outputs are lossless) exactly where the judge decided it."""
    results = ran.results
    spec = results.spec
    plan = replay(spec, results)
    assert planned_blocks(spec, plan) == set(results.ran), ran.output[-2000:]
    assert plan.controls[0].tolist() == [len(results.controls_run(d)) for d in run_order(spec)]
    assert (plan.code[0] == live_codes(spec, results)).all()
    live = _live_lossless(results)
    assert live.tolist() == [[PASS], [INCONCLUSIVE]], ran.output[-3000:]
    assert (plan.lossless_code[0] == live).all(), (plan.lossless_code[0], live)
