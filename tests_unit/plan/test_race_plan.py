"""``h3bench plan`` prices a race spec (issue 44) beside its sequential design, through the race's own simulation.

The spec is ``sim-candidates.toml`` (three simulator candidates) with
``design = "race"``; pricing it simulates whole races (six scenarios of 2000
races, three candidates): a few CPU seconds, most of them the critical
values' calibration.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.course.design import RACE_NOT_RUN_LIVE, Design, design_text, sequential_counterpart
from h3bench.course.racesim import simulate_races
from h3bench.plan.estimate import make_plan
from h3bench.plan.summary import plan_lines
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.runspec.tables import DesignMode
from h3bench.stats.intervals import PASS
from tests_unit.bundlesim import FIXTURES

SOURCE = FIXTURES / "sim-candidates.toml"


def race_spec(path: Path = SOURCE):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data["protocol"]["design"] = "race"
    return parse_runspec(data, source="race", spec_dir=path.parent)


@pytest.fixture(scope="module")
def plan():
    return make_plan(race_spec())


def test_a_race_spec_loads_and_its_design_runs_the_sequential_looks_in_rounds():
    race, sequential = race_spec(), load_runspec(SOURCE)
    assert race.protocol.design is DesignMode.RACE and race.spec_id != sequential.spec_id
    assert sequential_counterpart(race).spec_id == sequential.spec_id and sequential_counterpart(sequential) is sequential
    design, counterpart = Design.of(race), Design.of(sequential)
    assert design.race and not design.sequential and counterpart.sequential and not counterpart.race
    assert (design.looks, design.budget, design.margin, design.allowance, design.futility) == (
        counterpart.looks, counterpart.budget, counterpart.margin, counterpart.allowance, counterpart.futility)
    assert design_text(race).startswith("race design (priced, not run live yet)")
    assert "after [2, 3, 4, 5, 6, 7, 8] rounds" in design_text(race)
    assert design_text(sequential).startswith("sequential design")


def test_the_plan_prices_the_race_beside_the_sequential_design(plan):
    race = plan.race
    assert race is not None and plan.spec.spec_id == sequential_counterpart(race.spec).spec_id
    assert [e.scenario for e in race.device] == [e.scenario for e in plan.device]
    assert all(len(e.pass_rates) == 3 for e in race.device)
    none, true = race.device[0], race.device[1]
    assert max(none.pass_rates) == 0 and min(true.pass_rates) > 0.5
    assert none.race.wall_h[0] < true.race.wall_h[0]  # futility ends a race without effect early
    errors = race.errors
    assert errors.n == 2000 and errors.faster_worst is not None
    assert 0 <= errors.faster <= 0.025 and 0 <= errors.faster_worst <= 0.025 and 0 <= errors.slower <= 0.025
    assert plan.problems[-1] == RACE_NOT_RUN_LIVE


def test_the_plans_figures_are_the_race_simulation_s_own(plan):
    """No copy: the PASS rates at a true 10 % are those of h3bench.course.racesim at the same seed."""
    run = simulate_races(Design.of(plan.race.spec), [[0.9, 0.9]] * 3, n=2000, seed=0)
    assert plan.race.device[1].pass_rates == tuple(float(p) for p in (run.outcome == PASS).mean(0))


def test_the_plan_says_what_the_race_costs_and_risks(plan):
    lines = plan_lines(plan)
    assert lines[0].startswith(f"plan of sim-candidates (id {plan.race.spec.spec_id[:16]}): race design")
    assert "are the sequential design's" in lines[1]
    at = next(i for i, line in enumerate(lines) if line.startswith("expected device time of the race"))
    assert "over 2000 simulated races" in lines[at]
    assert lines[at + 2].startswith("  a true 10 % speedup: ") and "; sequential design: " in lines[at + 2]
    assert "PASS per candidate: clean " in lines[at + 2] and ", audio_shift " in lines[at + 2]
    errors = next(line for line in lines if line.startswith("race's family-wise error rates"))
    assert "at the intersection-union worst case over durations" in errors and "budget 2.5% each" in errors
    assert lines[-1] == f"problem: {RACE_NOT_RUN_LIVE}"


def test_a_sequential_plan_has_no_race():
    plan = make_plan(load_runspec(SOURCE))
    assert plan.race is None and RACE_NOT_RUN_LIVE not in plan.problems
    assert not any("race" in line for line in plan_lines(plan))


def test_the_cli_plans_a_race_exits_1_for_its_refusal_and_shards_the_sequential_design(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text = SOURCE.read_text(encoding="utf-8").replace('design = "sequential"', 'design = "race"', 1)
    spec = FIXTURES / f"_race_plan_{tmp_path.name}.toml"  # beside the inputs its relative paths name
    spec.write_text(text, encoding="utf-8")
    try:
        code = main(["plan", "--runspec", str(spec), "--shards", "2", "--evidence-dir", str(tmp_path / "ev")])
    finally:
        spec.unlink()
    out = capsys.readouterr().out
    assert code == 1 and "race design (priced, not run live yet)" in out and "expected device time of the race" in out
    assert f"problem: {RACE_NOT_RUN_LIVE}" in out
    assert "the race over several hosts is not priced yet; the sequential design's:\nover 2 hosts" in out

