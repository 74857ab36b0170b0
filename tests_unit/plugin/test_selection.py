"""The campaign's commands as a user types them: every selection runs to a verdict or is refused before a server starts.

``--arm``, ``-m``, ``-k`` and ``--baseline-evidence`` combine freely on the
command line; each combination is decided at collection. A run of one arm
or one workload says exactly what it judged, and a refusal names the
command that runs instead.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from h3bench.evidence import Bundle
from h3bench.report.contents import read_contents
from h3bench.report.markdown import render_summary
from h3bench.report.screen import screen_lines
from h3bench.runspec import parse_runspec
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.campaign_project import bundles_in, child_campaign, run_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]


# -k: the first pair at 5 s, in the paired order (1A 2B) and in the anchored one (1B 2A).
SELECTIONS = {"all": [], "-m": ["-m", "ref2va_5s"], "-k": ["-k", "not 15s and (1A or 2B or anchored-1B or anchored-2A)"]}
# Tests that read the same run share one xdist worker, where the module fixture runs it once: every run that takes
# the stored baseline, the baseline-only run that is that baseline, and the one-workload run.
SHARED = pytest.mark.xdist_group("selection-stored")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Callable[..., SimpleNamespace]:
    """Run the campaign (both workloads, tests_perf and tests_quality, -v) with an arm, a selection and a stored
    baseline, once per combination for the module, each in a project of its own.

    A run's ``result`` is what pytest printed; ``evidence`` is its evidence directory.
    """
    runs: dict[tuple[str, str, Path | None], SimpleNamespace] = {}

    def run(arm: str, selection: str, baseline: Path | None = None) -> SimpleNamespace:
        if (arm, selection, baseline) not in runs:
            root = tmp_path_factory.mktemp("selection")
            spec = write_campaign(root, durations=(5, 15), protocol={"audit": False})
            extra = ["--baseline-evidence", str(baseline)] if baseline else []
            code, out, _ = child_campaign(root, spec, "tests_perf", "tests_quality", "--benchmark-disable", "--arm",
                                          arm, *extra, *SELECTIONS[selection], verbose=True)
            runs[arm, selection, baseline] = SimpleNamespace(result=pytest.RunResult(code, out.splitlines(), [], 0.0),
                                                             evidence=root / "evidence")
        return runs[arm, selection, baseline]

    return run


@pytest.fixture(scope="module")
def stored_baseline(campaign) -> Path:
    """A formal baseline-only run of the spec (the combination baseline-fresh-all): what ``--baseline-evidence`` takes."""
    run = campaign("baseline", "all")
    output = "\n".join(run.result.outlines)
    assert run.result.ret == 0, output
    assert re.findall(r"^tests_perf/\S+ (\w+)", output, re.M) == ["PASSED"] * 4, output  # 2 blocks per workload
    (bundle,) = bundles_in(run.evidence)
    return bundle


COMBINATIONS = [
    pytest.param(arm, evidence, selection, id=f"{arm}-{'stored' if evidence else 'fresh'}-{selection}",
                 marks=[SHARED] if evidence or (arm, selection) in {("baseline", "all"), ("all", "-m")} else [])
    for arm in ("all", "baseline", "candidate") for evidence in (False, True) for selection in SELECTIONS
]


@pytest.mark.parametrize(("arm", "evidence", "selection"), COMBINATIONS)
def test_every_combination_runs_to_a_verdict_or_is_refused_before_any_server_starts(
        campaign, request, arm, evidence, selection):
    run = campaign(arm, selection, request.getfixturevalue("stored_baseline") if evidence else None)

    result = run.result
    out = "\n".join(result.outlines)
    assert "Traceback" not in out and "INTERNALERROR" not in out
    refused = (arm == "candidate") != evidence
    if refused:
        assert result.ret == pytest.ExitCode.USAGE_ERROR, out
        assert not run.evidence.exists() or not bundles_in(run.evidence)
        return
    assert result.ret == pytest.ExitCode.OK, out
    (bundle,) = bundles_in(run.evidence)
    verdict = json.loads((bundle / "verdict.json").read_text())
    judged = {key for c in verdict["candidates"].values() for key in c["durations"]}
    assert "15s" not in judged if selection != "all" else True
    if arm == "baseline":
        assert verdict["candidates"] == {} and set(verdict["not_selected"]["clean"]) == {"5s", "15s"}


def test_a_candidate_only_run_without_a_stored_baseline_names_the_baseline_run_and_the_candidate_run(pytester):
    spec = write_campaign(pytester.path, protocol={"audit": False})

    result = run_campaign(pytester, spec, "tests_perf", "-m", "ref2va_5s", "--arm", "candidate")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--arm candidate runs only the candidate's blocks" in err and "holds none" in err
    baseline_command, candidate_command = (line.strip() for line in err.splitlines()[-2:])
    assert "--arm baseline" in baseline_command and "-m ref2va_5s" in baseline_command
    assert candidate_command.endswith("--baseline-evidence " + shlex.quote(f"{pytester.path / 'evidence'}/<that bundle>"))
    assert not (pytester.path / "evidence").exists(), "nothing runs, nothing is written"


@SHARED
def test_a_candidate_only_run_names_the_newest_stored_baseline_to_add(pytester, stored_baseline):
    spec = write_campaign(pytester.path, durations=(5, 15), protocol={"audit": False})  # the stored run's spec
    stored = shutil.copytree(stored_baseline, pytester.path / "evidence" / stored_baseline.name)

    result = run_campaign(pytester, spec, "tests_perf", "--arm", "candidate")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().splitlines()[-1].strip().endswith(f"--arm candidate --baseline-evidence {stored}")


@SHARED
def test_a_one_workload_run_judges_that_workload_and_says_the_other_was_not_selected(campaign, tmp_path):
    run = campaign("all", "-m")  # as `pytest tests_perf tests_quality -m ref2va_5s -v` runs it

    result = run.result
    assert result.ret == pytest.ExitCode.OK
    # Nothing was rejected: the run judged 5 s and says that 15 s is not judged, on one screen and in -v.
    result.stdout.fnmatch_lines(["verdict clean for ref2va_5s: *; not judged: ref2va_15s not selected",
                                 "candidate clean: not judged: ref2va_15s not selected"])
    assert "ref2va 15s" not in result.stdout.str() and "rejected" not in result.stdout.str()
    (bundle,) = bundles_in(run.evidence)
    opened = Bundle.open(bundle)
    screen = screen_lines(parse_runspec(opened.manifest.spec, source="spec"), VerdictDocument.read(opened),
                          bundle=bundle)
    assert fnmatch.filter(screen, "verdict clean for ref2va_5s: *; not judged: ref2va_15s not selected"), screen
    verdict = json.loads((bundle / "verdict.json").read_text())
    assert list(verdict["candidates"]["clean"]["durations"]) == ["5s"]
    assert verdict["not_selected"] == {"clean": ["15s"]}
    summary = render_summary(read_contents(bundle), tmp_path / "report.html")  # summary.md, without the figures
    assert "### 5 s" in summary and "### 15 s" not in summary and "clean: ref2va_15s not selected" in summary


@SHARED
def test_the_header_of_a_candidate_only_run_shows_the_anchored_order_it_runs(pytester, stored_baseline):
    spec = write_campaign(pytester.path, durations=(5, 15), protocol={"audit": False})  # the stored run's spec

    result = run_campaign(pytester, spec, "tests_perf", "--arm", "candidate", "--baseline-evidence",
                          str(stored_baseline), "--collect-only")

    result.stdout.fnmatch_lines(["*h3bench arms: candidate; candidate-only run: anchored order BABBAB*",
                                 "h3bench 5 s runs: clean BABBAB"])
    assert "order ABBA" not in result.stdout.str()


def test_h3bench_run_takes_the_same_marker_expression_as_pytest(pytester, capsys):
    from h3bench.cli import main

    spec = write_campaign(pytester.path, durations=(5, 15), protocol={"audit": False})

    code = main(["run", "--runspec", str(spec), "--evidence-dir", str(pytester.path / "evidence"), "-m", "ref2va_5s"])

    out = capsys.readouterr().out
    assert code in (0, 1, 3), out
    assert "ref2va_15s not selected" in out and "ref2va 15s" not in out
    (bundle,) = bundles_in(pytester.path / "evidence")
    verdict = json.loads((bundle / "verdict.json").read_text())
    assert list(verdict["candidates"]["clean"]["durations"]) == ["5s"] and verdict["not_selected"] == {"clean": ["15s"]}
