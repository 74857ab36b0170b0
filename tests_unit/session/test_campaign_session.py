"""What one pytest session selects, runs and seals (pytester, in subprocesses).

The selection decides what runs: ``-k`` and ``-m`` pick blocks with or
without xdist, the schedule order holds whatever plugins reorder, and a run
that runs nothing (``--collect-only``) writes nothing. The bundle says how
the run really ended: completed, or interrupted with the reason, and its
``final.json`` lists the verdict. pytest-benchmark groups the blocks by
duration.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from h3bench import evidence
from tests_unit.campaign_project import (
    bundle_of,
    bundles_in,
    evidence_lines,
    run_campaign,
    start_campaign,
    wait_until,
    write_campaign,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]


def _blocks_run(bundle: Path) -> list[str]:
    return [json.loads(line)["block"] for line in (bundle / "lifecycle.jsonl").read_text().splitlines()]


def _final(bundle: Path) -> dict:
    return json.loads((bundle / "final.json").read_text())


def test_benchmarks_are_grouped_by_duration(pytester):
    spec = write_campaign(pytester.path, durations=(5, 15), protocol={"audit": False})
    report = pytester.path / "bench.json"

    # One block of each arm at each duration: what the grouping is checked on (the others would repeat it).
    result = run_campaign(pytester, spec, "tests_perf", "-k", "1A or 2B", f"--benchmark-json={report}")

    result.assert_outcomes(passed=4)
    groups = {bench["name"]: bench["group"] for bench in json.loads(report.read_text())["benchmarks"]}
    assert set(groups.values()) == {"ref2va_5s", "ref2va_15s"}
    assert all(group == ("ref2va_5s" if "[5s-" in name else "ref2va_15s") for name, group in groups.items())


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["with-header", "quiet"])
def test_collect_only_lists_the_schedule_and_writes_nothing(pytester, quiet):
    spec = write_campaign(pytester.path)

    result = run_campaign(pytester, spec, "--collect-only", *quiet)

    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_block_latency[[]5s-clean-1A-baseline[]]*",
                                 "*test_block_latency[[]5s-clean-4A-baseline[]]*"])
    assert not (pytester.path / "evidence").exists()


def test_a_completed_run_lists_its_verdict_in_final_json(pytester):
    spec = write_campaign(pytester.path)

    run_campaign(pytester, spec, "tests_perf", "--benchmark-disable").assert_outcomes(passed=4)

    bundle = bundle_of(pytester)
    final = _final(bundle)
    assert final["outcome"] == "completed" and final["interrupted"] is None
    assert "verdict.json" in final["files"]
    assert not (bundle / "addenda.jsonl").exists()
    assert evidence.verify(bundle).ok, evidence.verify(bundle).problems


def test_a_run_stopped_by_maxfail_is_sealed_as_interrupted_naming_the_blocks_not_run(pytester):
    # The first candidate's block fails, -x ends the session, and the second candidate's blocks never run.
    spec = write_campaign(pytester.path, candidates={"broken": {"fail_request": 3}, "clean": {}})

    result = run_campaign(pytester, spec, "tests_perf", "--benchmark-disable", "-x")

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["the bundle is sealed as INTERRUPTED: stopped early*before 4 selected block(s) ran*"])
    final = _final(bundle_of(pytester))
    assert final["outcome"] == "interrupted" and "5s-clean-1A-baseline" in final["interrupted"]
    assert evidence.verify(bundle_of(pytester)).ok


def test_ctrl_c_in_the_middle_of_a_block_seals_the_bundle_as_interrupted(pytester, tmp_path):
    # A slow enough candidate that SIGINT lands while its block runs.
    spec = write_campaign(pytester.path, candidates={"slow": {"time_scale": 0.002}}, protocol={"audit": False})
    log = tmp_path / "out.txt"
    # The candidate's block alone (-k): the baseline's block before it is not what SIGINT lands in.
    proc = start_campaign(pytester, spec, "tests_perf", "-k", "2B", "--benchmark-disable", output=log)
    wait_until(lambda: any(s["block_id"] == "5s-slow-2B-slow" for s in evidence_lines(pytester, "samples.jsonl")), proc)
    proc.send_signal(signal.SIGINT)

    assert proc.wait(timeout=120) == pytest.ExitCode.INTERRUPTED
    output = log.read_text()
    assert "the bundle is sealed as INTERRUPTED: interrupted (KeyboardInterrupt)" in output
    bundle = bundle_of(pytester)
    final = _final(bundle)
    assert final["outcome"] == "interrupted" and "verdict.json" in final["files"]
    assert json.loads((bundle / "verdict.json").read_text())["interrupted"] == "interrupted (KeyboardInterrupt)"
    assert evidence.verify(bundle).ok


def test_the_schedule_order_holds_when_pytest_randomly_shuffles(pytester):
    pytest.importorskip("pytest_randomly")
    spec = write_campaign(pytester.path)

    result = run_campaign(pytester, spec, "--randomly-seed=4", "-v", "--benchmark-disable")

    result.assert_outcomes(passed=4 + 20 + 6 + 6, skipped=2)
    assert _blocks_run(bundle_of(pytester)) == [f"5s-clean-{p}" for p in
                                                 ("1A-baseline", "2B-clean", "3B-clean", "4A-baseline")]
    ran = [line.split("::")[0] for line in result.stdout.lines if " PASSED" in line or " SKIPPED" in line]
    # Perf tests first, then lifecycle, then quality.
    assert ran == sorted(ran, key=lambda path: ("tests_perf", "tests_lifecycle", "tests_quality").index(path.split("/")[0]))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_k_selects_exactly_the_blocks_that_run(pytester, workers):
    spec = write_campaign(pytester.path)

    result = run_campaign(pytester, spec, "tests_perf", "-k", "2B or 3B", "--benchmark-disable", *workers)

    result.assert_outcomes(passed=2)
    assert _blocks_run(bundle_of(pytester)) == ["5s-clean-2B-clean", "5s-clean-3B-clean"]
    assert _final(bundle_of(pytester))["outcome"] == "completed"


def test_pytest_dot_under_xdist_makes_one_campaign_in_the_controller(pytester):
    spec = write_campaign(pytester.path)
    pytester.makepyfile(**{"tests_unit/test_plain": "def test_plain():\n    assert True\n"})

    result = run_campaign(pytester, spec, ".", "-n", "2", "--benchmark-disable")

    result.assert_outcomes(passed=4 + 20 + 6 + 6 + 1, skipped=2)
    bundle = bundle_of(pytester)
    assert len(_blocks_run(bundle)) == 4


def test_a_failing_block_fails_only_its_own_lifecycle_tests(pytester):
    spec = write_campaign(pytester.path, candidates={"stubborn": {"worker_ignores_sigterm": True}},
                          protocol={"shutdown_budget_s": 2.0})

    result = run_campaign(pytester, spec, "tests_lifecycle", "-rA")

    # Block 1A passes its five tests; 2B fails only its shutdown test; 3B and 4A are skipped (the series stopped).
    result.assert_outcomes(passed=5 + 4, failed=1, skipped=10)
    result.stdout.fnmatch_lines(["FAILED *test_shutdown_within_shared_budget[[]5s-stubborn-2B-stubborn[]]*"])


def test_tracebacks_are_hidden_only_in_campaign_tests(pytester):
    pytester.makepyfile(test_own="""
        from h3bench.errors import UsageError

        def test_raises():
            raise UsageError("a harness test's own error")
    """)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_own.py")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*raise UsageError*", "E * h3bench.errors.UsageError: a harness test*s own error"])


def _outputs(bundle: Path) -> dict[tuple[str, str, int], str]:
    return {(s["block_id"], s["kind"], s["index"]): s["output_sha256"]
            for s in map(json.loads, (bundle / "samples.jsonl").read_text().splitlines())}


def test_block_seeds_give_every_run_of_a_campaign_the_same_outputs(pytester):
    # A simulator spec with block_seed: each block is a process with its own seed, and a rerun repeats them all.
    seeded = {"block_seed": 0}
    spec = write_campaign(pytester.path, baseline=seeded, candidates={"clean": seeded}, protocol={"audit": False})

    for _ in range(2):  # the baseline's two blocks (two processes of one arm) and a candidate's
        run_campaign(pytester, spec, "tests_perf", "-k", "1A or 2B or 4A",
                     "--benchmark-disable").assert_outcomes(passed=3)

    first, second = (_outputs(bundle) for bundle in bundles_in(pytester.path / "evidence"))
    assert first == second and len(first) == 3 * 4  # warmup and three measured requests per block
    # The measured requests of one process repeat its output; two processes of one arm differ.
    assert first[("5s-clean-1A-baseline", "measured", 0)] != first[("5s-clean-4A-baseline", "measured", 0)]
    log = bundles_in(pytester.path / "evidence")[0] / "logs" / "5s-clean-1A-baseline.log"
    assert "(fixed), block 5s-clean-1A-baseline" in log.read_text()


def test_without_block_seeds_every_run_draws_new_processes(pytester):
    spec = write_campaign(pytester.path, protocol={"audit": False})

    for _ in range(2):
        run_campaign(pytester, spec, "tests_perf", "-k", "1A", "--benchmark-disable").assert_outcomes(passed=1)

    first, second = (_outputs(bundle) for bundle in bundles_in(pytester.path / "evidence"))
    assert first.keys() == second.keys() and not set(first.values()) & set(second.values())
