"""A spec whose design cannot reach the verdict it asks for is refused when it loads, naming the design that can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h3bench.course.feasibility import REFERENCE_NOISE, design_problems, design_warnings, speed_power
from h3bench.runspec import load_runspec, parse_runspec
from tests_unit.campaign_project import run_campaign, write_campaign

REPO = Path(__file__).resolve().parents[2]


def sim_spec(order: str, **protocol):
    """sim.toml in the fixed design with ``order``: the design these refusals are about."""
    data = load_runspec(REPO / "fixtures" / "runspecs" / "sim.toml").model_dump(mode="json")
    data["protocol"].update(design="fixed", requests_per_block=3, audit_counts=False, order=order, **protocol)
    return parse_runspec(data, source="test")


def test_the_sequential_design_states_its_simulated_power_and_warns_below_the_target():
    data = load_runspec(REPO / "fixtures" / "runspecs" / "sim.toml").model_dump(mode="json")
    assert design_problems(parse_runspec(data, source="test"), lossless_on=True) == []
    assert design_warnings(parse_runspec(data, source="test")) == []
    data["gates"]["lossless"] = False  # with it on, PASS needs 4 pairs: a design problem (the next test)
    data["protocol"]["looks"] = [[2], [2]]  # one look of two pairs per duration: far too little to find 10 %
    (warning,) = design_warnings(parse_runspec(data, source="test"))
    assert warning.startswith("underpowered: the sequential design calls a true 10% speedup of every candidate PASS")


def test_a_sequential_design_whose_last_look_is_before_the_lossless_test_can_pass_is_refused():
    data = load_runspec(REPO / "fixtures" / "runspecs" / "sim.toml").model_dump(mode="json")
    data["protocol"]["looks"] = [[2], [3]]
    spec = parse_runspec(data, source="test")

    (problem,) = design_problems(spec, lossless_on=True)
    assert problem.startswith("the lossless test at 5 s cannot reach PASS by the last look (2 pairs)")
    assert design_problems(spec, lossless_on=False) == [] and design_warnings(spec) == []


def test_the_default_design_can_reach_every_verdict_it_asks_for():
    spec = sim_spec("ABBAABBA")

    assert design_problems(spec, lossless_on=True) == [] and design_warnings(spec) == []


def test_one_pair_gives_no_interval_and_the_refusal_names_the_smallest_design_that_can():
    (problem,) = design_problems(sim_spec("AB"), lossless_on=True)

    assert problem.startswith("protocol.order = 'AB' cannot reach a speed verdict: one AB/BA pair gives no interval")
    assert problem.endswith('the smallest design with the power it is built for is order = "ABBAABBA"')


def test_a_lossless_test_without_enough_baseline_processes_is_refused_with_the_control_blocks_it_needs():
    (problem,) = design_problems(sim_spec("ABBA", lossless_baseline_blocks=0), lossless_on=True)

    assert "the lossless test cannot reach a verdict with 2 baseline and 2 candidate processes" in problem
    assert problem.endswith("protocol.lossless_baseline_blocks = 6")
    assert design_problems(sim_spec("ABBA", lossless_baseline_blocks=6), lossless_on=True) == []
    assert design_problems(sim_spec("ABBA", lossless_baseline_blocks=0), lossless_on=False) == []


def test_the_power_figures_come_from_the_verdicts_own_bounds():
    # A true 10 % speedup at the reference noise: ABBA finds it rarely, ABBAABBA almost always (both durations).
    abba, abbaabba = speed_power("ABBA", 3, 0.02, 2, 1), speed_power("ABBAABBA", 3, 0.02, 2, 1)
    assert abba < 0.2 and abbaabba > 0.95
    # No effect at all: PASS stays within the campaign-wide level (at most 2.5 % false "faster").
    assert speed_power("ABBAABBA", 3, 0.02, 2, 1, ratio=1.0) <= 0.025
    (warning,) = design_warnings(sim_spec("ABBA"))
    assert f"calls a true 10% speedup PASS in only {abba:.0%} of campaigns" in warning
    assert f"{REFERENCE_NOISE[0]:.0%} request and {REFERENCE_NOISE[1]:.0%} process noise" in warning


def test_block_medians_beyond_the_drawn_requests_have_the_medians_own_distribution():
    """The order-statistic draw gives the spread that drawing every request gives (odd and even k)."""
    import numpy as np

    from h3bench.course.feasibility import _DRAWN_REQUESTS, _block_medians

    for k in (_DRAWN_REQUESTS + 1, _DRAWN_REQUESTS + 2):
        drawn = np.median(np.random.default_rng(1).normal(0.0, 1.0, (20_000, k)), axis=-1)
        exact = _block_medians(np.random.default_rng(2), 1.0, k, (20_000,))
        # Same mean (0) and spread (about 1.25 / sqrt(k)); 20 000 draws give the sd to 0.5 %.
        assert abs(exact.mean()) < 0.003 and abs(exact.std() / drawn.std() - 1) < 0.03, (k, exact.std(), drawn.std())


def test_a_billion_requests_per_block_is_planned_and_refused_for_its_disk_not_for_memory(tmp_path, capsys):
    """Issue 27: ``h3bench plan`` died with "Unable to allocate 233. TiB" where pytest refused the spec cleanly."""
    from h3bench.cli import main

    text = (REPO / "fixtures" / "runspecs" / "sim.toml").read_text()
    spec = tmp_path / "huge.toml"
    spec.write_text(text.replace("requests_per_block = 2", "requests_per_block = 1000000000")
                    .replace("../inputs/", f"{REPO}/fixtures/inputs/"))

    code = main(["plan", "--runspec", str(spec), "--evidence-dir", str(tmp_path / "evidence")])

    out, err = capsys.readouterr()
    assert code == 1 and err == "", err
    assert "expected device time: not simulated (1000000000 measured requests per block" in out
    assert f"problem: the evidence directory {tmp_path / 'evidence'} has " in out
    assert "MB for this campaign's outputs" in out
    assert 0.9 < speed_power("ABBAABBA", 1_000_000_000, 0.02, 2, 1) <= 1.0


@pytest.mark.usefixtures("campaign_subprocess_env")
def test_an_underpowered_spec_is_refused_before_any_server_starts(pytester):
    spec = write_campaign(pytester.path, protocol={"order": "AB"})

    result = run_campaign(pytester, spec)

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*this design cannot reach the verdict it asks for: protocol.order = 'AB'*"
                                 "or pass --allow-underpowered for a DIAGNOSTIC run*"])
    assert not (pytester.path / "evidence").exists() or not any((pytester.path / "evidence").iterdir())


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_allow_underpowered_runs_it_as_a_diagnostic_run_that_says_why(pytester):
    spec = write_campaign(pytester.path, protocol={"order": "AB"})

    result = run_campaign(pytester, spec, "tests_perf", "--benchmark-disable", "--allow-underpowered")

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*DIAGNOSTIC run: not a campaign result; --allow-underpowered: the design cannot reach*",
                                 "*underpowered: protocol.order = 'AB' cannot reach a speed verdict*"])
    (bundle,) = (pytester.path / "evidence").glob("*/manifest.json")
    run = json.loads(bundle.read_text())["run"]
    assert run["kind"] == "DIAGNOSTIC" and run["underpowered"][0].startswith("protocol.order = 'AB'")
