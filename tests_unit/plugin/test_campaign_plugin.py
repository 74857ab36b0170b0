"""The pytest plugin driving real simulator campaigns (pytester, in subprocesses).

Each test writes a small campaign project (the real campaign tests, a RunSpec
with a 64x64 canvas and fast simulator arms) and runs pytest on it in a
subprocess, because servers and signals are involved. Every failure injection
of the simulator must end in a test failure (or skip) that names its cause.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from h3bench import evidence
from tests_unit.campaign_project import UNUSED_PLUGINS, bundle_of, bundles_in, child_campaign, run_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

# The tests of candidate-only runs share one worker, where their stored baseline runs once.
STORED_BASELINE = pytest.mark.xdist_group("plugin-stored-baseline")


@pytest.fixture(scope="module")
def stored_baseline(tmp_path_factory) -> Path:
    """A baseline-only run of the default spec, once for the module: what ``--baseline-evidence`` takes."""
    root = tmp_path_factory.mktemp("stored-baseline")
    code, out, bundle = child_campaign(root, write_campaign(root), "tests_perf", "--arm", "baseline",
                                       "--benchmark-disable")
    assert code == pytest.ExitCode.OK and bundle is not None, out
    assert pytest.RunResult.parse_summary_nouns(out.splitlines()) == {"passed": 2}, out  # its 2 blocks
    return bundle


@pytest.fixture(scope="module")
def candidate_only(tmp_path_factory, stored_baseline) -> SimpleNamespace:
    """The whole campaign run candidate-only (-v, its report written) against a copy of the stored baseline, once.

    ``evidence`` holds that copy (``baseline``) and the run's own bundle; ``result`` is what pytest printed.
    """
    root = tmp_path_factory.mktemp("candidate-only")
    spec = write_campaign(root)  # the stored run's spec, so the same spec id
    baseline = Path(shutil.copytree(stored_baseline, root / "evidence" / stored_baseline.name))
    code, out, _ = child_campaign(root, spec, "--arm", "candidate", "--baseline-evidence", str(baseline),
                                  "--benchmark-disable", report=True, verbose=True)
    return SimpleNamespace(evidence=root / "evidence", baseline=baseline,
                           result=pytest.RunResult(code, out.splitlines(), [], 0.0))


def run(pytester: pytest.Pytester, spec, *args: str) -> pytest.RunResult:
    """The campaign with -v: these tests read every reason of the summary, which one screen leaves to -v."""
    return run_campaign(pytester, spec, "-v", *args)


def test_clean_campaign_passes_every_test_and_writes_a_verifiable_bundle(pytester):
    # Without run-to-run noise the simulator is bit-exact across processes, so the lossless verdict is EXACT;
    # EXACT needs no control blocks, but a design without them could not say PASS or FAIL for a candidate that
    # is not bit-exact, so it runs only as a DIAGNOSTIC run.
    exact = {"run_to_run_noise": 0.0}
    spec = write_campaign(
        pytester.path,
        baseline=exact,
        candidates={"clean": {"time_scale": 0.00015, **exact}},
        protocol={"lossless_baseline_blocks": 0},
        gates={"lossless": True},
    )

    result = run(pytester, spec, "--allow-underpowered")

    # 4 blocks; lifecycle 5 tests x 4 blocks; 2 baseline blocks x 3 outputs; 2 x 3 pairs; lossless; LPIPS skipped
    result.assert_outcomes(passed=4 + 20 + 6 + 6 + 1, skipped=1)
    result.stdout.fnmatch_lines([
        "*h3bench campaign summary*",
        "DIAGNOSTIC ref2va 5s, clean against baseline:",
        "*baseline*n=6*median E2E*",
        "*quality PASS over 6 matched pairs*",
        "*lossless EXACT: every output of the 2 candidate processes decodes bitwise equal to its matched baseline*",
        "DIAGNOSTIC LPIPS is not required by this RunSpec*",
        "*DIAGNOSTIC run: not a campaign result; --allow-underpowered: the design cannot reach*",
        "*underpowered: the lossless test cannot reach a verdict with 2 baseline and 2 candidate processes*",
        "*evidence bundle: *",
    ])
    bundle = bundle_of(pytester)
    assert evidence.verify(bundle).ok
    verdict = json.loads((bundle / "verdict.json").read_text())
    assert verdict["candidates"]["clean"]["durations"]["5s"]["quality"] == "PASS"
    kinds = [json.loads(line)["kind"] for line in (bundle / "samples.jsonl").read_text().splitlines()]
    assert kinds.count("warmup") == 4 and kinds.count("measured") == 12 and kinds.count("audit") == 4


def test_the_default_design_reaches_a_lossless_verdict_and_says_what_it_counted(pytester):
    # ABBAABBA with lossless on: two control blocks first make 6 baseline + 4 candidate processes. The
    # simulator's run-to-run noise differs in every process and the candidate is truly lossless, so the
    # verdict is PASS, or FAIL in 4.76 % of runs (the test's exact level), but never INCONCLUSIVE.
    spec = write_campaign(pytester.path, candidates={"clean": {"time_scale": 0.00015}},
                          protocol={"order": "ABBAABBA"}, gates={"lossless": True})

    result = run(pytester, spec, "--benchmark-disable")

    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    output = result.stdout.str()
    counted = r"\(6 baseline \+ 4 candidate server processes \(the independent units; their 45 pairs are not independent\)"
    test = r"exact process-relabelling rank test, max-T over 4 metrics, 210 labelings, p = "
    assert re.search(rf"lossless (PASS: no deviation beyond the control variability detected|FAIL: deviation beyond "
                     rf"the control variability) {counted}, {test}", output), output[-3000:]
    # Every reason is printed, not only the first.
    result.stdout.fnmatch_lines(["  speed *", "      minimum detectable ratio (80 % power, margin included)*",
                                 "      upper bound one-sided 0.025*"])
    bundle = bundle_of(pytester)
    summary = json.loads((bundle / "verdict.json").read_text())["candidates"]["clean"]["durations"]["5s"]["lossless"]
    (quality,) = (bundle / "quality").glob("*.json")
    record = json.loads(quality.read_text())["result"]["lossless"]["5s-clean"]  # the whole record, matrices too
    assert summary["outcome"] == record["outcome"] in ("PASS", "FAIL") and record["labelings"] == 210
    assert summary["p_value"] == record["p_value"] and summary["baseline_processes"] == 6
    assert [b.split("-")[1] for b in record["processes"]["baseline"]] == ["baseline"] * 2 + ["clean"] * 4
    assert len(record["processes"]["candidate"]) == 4 and 1 / 210 <= record["p_value"] <= 1
    matrix = record["pair_deviations"]["ssim"]
    assert len(matrix) == 10 and all(matrix[i][j] == matrix[j][i] > 0 for i in range(10) for j in range(i))
    assert evidence.verify(bundle).ok


@STORED_BASELINE
def test_arm_option_runs_only_the_candidates_blocks(candidate_only):
    # A candidate-only run is judged against a stored baseline-only run (its references) and today's anchors.
    result, output = candidate_only.result, "\n".join(candidate_only.result.outlines)

    # the anchored order: 4 candidate blocks and 2 of today's baseline blocks that tie them to the stored run
    assert re.findall(r"^tests_perf/\S+ (\w+)", output, re.M) == ["PASSED"] * 6, output
    result.stdout.fnmatch_lines(["*--arm candidate*", "h3bench 5 s runs: clean BABBAB"])
    assert len(bundles_in(candidate_only.evidence)) == 2


def test_bad_arm_value_is_refused_on_the_command_line(pytester):
    spec = write_campaign(pytester.path)

    result = run(pytester, spec, "--arm", "both")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid --arm 'both'*baseline, candidate, all*"])


def test_bad_runspec_is_a_usage_error_naming_the_field(pytester):
    spec = write_campaign(pytester.path, protocol={"requests_per_block": 2})

    result = run(pytester, spec, "tests_perf")

    assert result.ret != 0
    assert "protocol.requests_per_block" in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_markers_are_registered(pytester):
    write_campaign(pytester.path)

    result = pytester.runpytest_subprocess("--markers", *UNUSED_PLUGINS)

    result.stdout.fnmatch_lines(["@pytest.mark.ref2va_5s:*", "@pytest.mark.ref2va_15s:*"])


# Every injected failure is one candidate of one campaign: each series' first block is the baseline's, then the
# candidate's, which fails. name: (the candidate's sim profile, the cause its verdict names)
FAILURES = {
    "startup_exit": ({"startup_error": "conflicting offload settings"},
                     "*server did not start*exit code 1*startup failed*conflicting offload settings*"),
    "http_500": ({"fail_request": 3}, "*request failed*500*"),
    "worker_crash": ({"crash_request": 3}, "*request failed*500*died*"),
    "hang": ({"hang_request": 3}, "*request failed*no response from*within 4 s*"),
}


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> SimpleNamespace:
    """The perf campaign of every injected failure (-v -rs), once for the module: what pytest printed, its bundle."""
    root = tmp_path_factory.mktemp("failures")
    spec = write_campaign(root, candidates={name: profile for name, (profile, _) in FAILURES.items()},
                          protocol={"request_timeout_s": 4.0})
    code, out, bundle = child_campaign(root, spec, "tests_perf", "--benchmark-disable", "-rs", verbose=True)
    assert bundle is not None, out
    return SimpleNamespace(result=pytest.RunResult(code, out.splitlines(), [], 0.0), bundle=bundle)


def outcomes_of(result: pytest.RunResult, series: str) -> list[str]:
    """The -v outcome of each block of one series, in order."""
    return re.findall(rf"^tests_\w+/\S+\[5s-{series}-\S+\] (\w+)", "\n".join(result.outlines), re.M)


@pytest.mark.xdist_group("plugin-failures")
@pytest.mark.parametrize("name", FAILURES, ids=lambda name: name.replace("_", "-"))
def test_failure_injection_fails_the_block_names_the_cause_and_stops_the_candidate(failures, name):
    result, cause = failures.result, FAILURES[name][1]

    # Block 1A passes, 2B (the candidate's first) fails, and the rest of its series (3B, 4A) is skipped.
    assert outcomes_of(result, name) == ["PASSED", "FAILED", "SKIPPED", "SKIPPED"], result.outlines
    result.stdout.fnmatch_lines([f"*candidate '{name}' was stopped*"])
    result.stdout.fnmatch_lines([f"verdict {name}: FAIL (stopped: {cause}"])
    verdict = json.loads((failures.bundle / "verdict.json").read_text())
    assert verdict["candidates"][name]["verdict"] == "FAIL"


def test_a_candidate_that_serves_repeats_from_a_cache_fails_its_speed_verdict_by_the_audit(pytester):
    # Slow enough that serving from a cache stands out from scheduling noise. Four blocks per arm: from fewer, two
    # slow audits could imitate a cache, so a suspicion only holds PASS back (h3bench.stats.cache_audit).
    spec = write_campaign(pytester.path, candidates={"cached": {"cache_outputs": True, "time_scale": 0.002}},
                          protocol={"order": "ABBABAAB"})

    result = run(pytester, spec, "tests_perf", "--benchmark-disable")

    # Every block runs (each one's own audit is its outputs); the series' audit judges the latencies.
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*speed FAIL: anti-shortcut audit failed at look 1*", "verdict cached: FAIL*"])


# Both ways past the shutdown budget are candidates of one campaign. name: the candidate's sim profile
STUBBORN = {"ignores_sigterm": {"worker_ignores_sigterm": True}, "slow_shutdown": {"shutdown_delay_s": 8.0}}


@pytest.fixture(scope="module")
def stubborn(tmp_path_factory) -> SimpleNamespace:
    """The lifecycle campaign of both stubborn candidates (-v), once for the module: what pytest printed, its bundle."""
    root = tmp_path_factory.mktemp("stubborn")
    spec = write_campaign(root, candidates=STUBBORN, protocol={"shutdown_budget_s": 3.0})
    code, out, bundle = child_campaign(root, spec, "tests_lifecycle", verbose=True)
    assert bundle is not None, out
    return SimpleNamespace(result=pytest.RunResult(code, out.splitlines(), [], 0.0), bundle=bundle)


@pytest.mark.xdist_group("plugin-stubborn")
@pytest.mark.parametrize("name", STUBBORN, ids=["worker-ignores-sigterm", "slow-shutdown"])
def test_shutdown_beyond_the_shared_budget_fails_the_lifecycle_test(stubborn, name):
    result = stubborn.result

    result.stdout.fnmatch_lines([f"*5s-{name}-*not stopped by SIGTERM within 3 s; it was killed*"])
    result.stdout.fnmatch_lines([f"verdict {name}: FAIL (stopped: *did not exit within the shared shutdown budget of 3 s*"])
    # Every process was still proven gone after the SIGKILL.
    lifecycle = [json.loads(line) for line in (stubborn.bundle / "lifecycle.jsonl").read_text().splitlines()]
    assert all(not event["exit"]["survivors"] for event in lifecycle)


def test_noisy_candidate_fails_the_video_gates_with_values_and_thresholds(pytester):
    spec = write_campaign(pytester.path, candidates={"noisy": {"video_noise": 12.0}})

    result = run(pytester, spec, "tests_quality", "-k", "gates")

    # The first pair's three outputs fail; the failed gate stops the candidate, so the second pair is skipped.
    result.assert_outcomes(failed=3, skipped=3)
    result.stdout.fnmatch_lines(["*ssim: 0.9* (threshold >= 0.97)*", "*psnr_db: 3* (threshold >= 34)*"])
    result.stdout.fnmatch_lines(["verdict noisy: FAIL (stopped: *failed quality gates*"])


def test_under_xdist_the_controller_runs_the_blocks_and_workers_check_quality(pytester):
    spec = write_campaign(pytester.path)

    result = run(pytester, spec, "-n", "2")

    result.assert_outcomes(passed=4 + 20 + 6 + 6, skipped=2)
    result.stdout.fnmatch_lines(["*under xdist the controller runs every block first*", "*quality PASS over 6 matched pairs*"])
    verdict = json.loads((bundle_of(pytester) / "verdict.json").read_text())
    assert verdict["candidates"]["clean"]["durations"]["5s"]["quality_pairs"] == 6


@STORED_BASELINE
def test_candidate_only_run_is_anchored_to_fresh_baseline_blocks_and_reports_the_shift(candidate_only):
    result, baseline = candidate_only.result, candidate_only.baseline

    # BABBAB: 4 candidate blocks and 2 fresh anchors; lifecycle 5 tests x 6 blocks; the outputs of the stored
    # baseline's 2 blocks and of the 2 anchors; 4 x 3 matched pairs (against the stored baseline's outputs).
    result.assert_outcomes(passed=6 + 30 + 12 + 12, skipped=2)
    result.stdout.fnmatch_lines([
        f"*h3bench baseline evidence: {baseline} (quality references and the day's shift; "
        "speed and lossless against today's anchors, order BABBAB)*",
        "*ratio * over 6 blocks, 4 candidate against 2 of today's anchors (two-sample t)*",
        "*today's anchors are *% against the stored baseline's 2 blocks*",
        f"*candidate-only run: quality references and the shift report from the stored baseline {baseline}*",
    ])
    (bundle,) = set(bundles_in(candidate_only.evidence)) - {baseline}
    verdict = json.loads((bundle / "verdict.json").read_text())["candidates"]["clean"]["durations"]["5s"]
    assert verdict["estimate"]["shift"] is not None and verdict["quality_pairs"] == 12
    ids = [block["id"] for block in verdict["blocks"]]
    assert "".join(block.split("-")[3][-1] for block in ids) == "BABBAB"
    assert all("-anchored-" in block for block in ids)


@STORED_BASELINE
def test_candidate_only_run_refuses_a_baseline_from_another_spec(pytester, stored_baseline):
    baseline = stored_baseline
    other = write_campaign(pytester.path, protocol={"shutdown_budget_s": 6.0})

    result = run(pytester, other, "tests_perf", "--arm", "candidate", "--baseline-evidence", str(baseline))

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*different frozen RunSpecs*"])


def test_benchmark_compare_catches_a_slowed_down_arm(pytester):
    storage = f"file://{pytester.path / 'benchmarks'}"
    spec = write_campaign(pytester.path, candidates={"clean": {"time_scale": 0.0002}})
    run(pytester, spec, "tests_perf", "--benchmark-autosave", f"--benchmark-storage={storage}").assert_outcomes(passed=4)
    # The same blocks again, the candidate now ten times slower in its modelled latency.
    spec = write_campaign(pytester.path, candidates={"clean": {"time_scale": 0.002}})

    result = run(pytester, spec, "tests_perf", f"--benchmark-storage={storage}",
                 "--benchmark-compare", "--benchmark-compare-fail=median:5%")

    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    regressions = output[output.index("Performance has regressed"):]
    assert "5s-clean-2B-clean" in regressions and "5s-clean-3B-clean" in regressions
