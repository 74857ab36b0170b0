"""``--resume BUNDLE`` after a real SIGKILL or Ctrl-C in the middle of a block (pytester projects).

Finished blocks are kept and not run again; the interrupted block runs again
in full, its partial samples kept and marked incomplete; what the killed run
left behind is stopped first; no sample is lost or counted twice; the bundle
stays append-only and verifies; the verdict is the one its samples give.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from h3bench import evidence
from h3bench.report.terminal import summary_lines
from h3bench.server.proctree import CAMPAIGN_ID_ENV, marked_processes
from h3bench.session.results import Results
from h3bench.session.revalidation import load_quality
from h3bench.session.settings import Settings
from h3bench.verdict.assemble import candidate_verdicts
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.campaign_project import bundle_of, run_campaign, start_campaign, wait_until, write_campaign

# One worker for the module, so that its Ctrl-C'd campaign runs once (see interrupted).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env"), pytest.mark.xdist_group("resume")]

BLOCKS = ["5s-clean-1A-baseline", "5s-clean-2B-clean", "5s-clean-3B-clean", "5s-clean-4A-baseline"]


def _spec(pytester: pytest.Pytester, **protocol) -> Path:
    return write_campaign(pytester.path, candidates={"clean": {"time_scale": 0.002}},
                          protocol={"audit": False, "shutdown_budget_s": 3.0, **protocol})


def _left_behind(bundle: Path) -> subprocess.Popen[bytes]:
    """A process that carries the killed run's id, as a worker that outlived its server would."""
    session = json.loads((bundle / "manifest.json").read_text())["session"]
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            env={**os.environ, CAMPAIGN_ID_ENV: session}, start_new_session=True)


def _interrupt_in_block_3b(pytester: pytest.Pytester, spec: Path, sig: signal.Signals) -> Path:
    proc = start_campaign(pytester, spec, "tests_perf", "--benchmark-disable", output=pytester.path / "first.txt")
    samples = lambda: [json.loads(line) for p in (pytester.path / "evidence").glob("*/samples.jsonl")  # noqa: E731
                       for line in p.read_text().splitlines()]
    wait_until(lambda: any(s["block_id"] == "5s-clean-3B-clean" and s["kind"] == "measured" for s in samples()), proc)
    os.kill(proc.pid, sig)
    proc.wait(timeout=120)
    return bundle_of(pytester)


@pytest.fixture(scope="module")
def ctrl_c_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module keeps a project as Ctrl-C in block 3B left it, once its first test has run it."""
    return tmp_path_factory.mktemp("resume") / "ctrl-c"


def _interrupted(pytester: pytest.Pytester, sig: signal.Signals, ctrl_c_project: Path) -> tuple[Path, Path]:
    """The spec and bundle of a campaign interrupted by ``sig`` in block 3B, in this test's project.

    A SIGKILLed campaign is run for its test. A Ctrl-C'd one is run once per module: each test resumes (or is refused)
    on its own copy of that project, bundle and all, as it was when the campaign ended.
    """
    if sig != signal.SIGINT or not ctrl_c_project.exists():
        spec = _spec(pytester)
        bundle = _interrupt_in_block_3b(pytester, spec, sig)
        if sig == signal.SIGINT:
            shutil.copytree(pytester.path, ctrl_c_project, symlinks=True)
        return spec, bundle
    shutil.copytree(ctrl_c_project, pytester.path, symlinks=True, dirs_exist_ok=True)
    return pytester.path / "spec.toml", bundle_of(pytester)


def _finished_blocks(bundle: Path) -> list[str]:
    events = [json.loads(line) for p in sorted(bundle.glob("**/lifecycle.jsonl")) for line in p.read_text().splitlines()]
    return [e["block"] for e in events if not e.get("interrupted")]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_resume_runs_what_is_missing_and_keeps_every_sample(pytester, sig, ctrl_c_project):
    spec, bundle = _interrupted(pytester, sig, ctrl_c_project)
    orphan = _left_behind(bundle) if sig == signal.SIGKILL else None
    before = evidence.verify(bundle)
    # A sealed (interrupted) bundle verifies; a killed one is only incomplete, nothing else is wrong.
    assert before.ok if sig == signal.SIGINT else [p for p in before.problems if not p.startswith("incomplete")] == []
    samples_before = (bundle / "samples.jsonl").read_text().splitlines()

    result = run_campaign(pytester, spec, "--resume", str(bundle), "-p", "no:randomly", "-v")

    result.assert_outcomes(passed=4 + 20 + 6 + 6, skipped=2)
    if orphan is not None:  # what the killed run left was stopped before anything started
        result.stdout.fnmatch_lines([f"h3bench resume: stopped pid {orphan.pid} *"])
        assert orphan.wait(timeout=30) is not None
    result.stdout.fnmatch_lines(["h3bench resume: incomplete attempt of 5s-clean-3B-clean (* samples, not used)"])
    assert evidence.verify(bundle).ok, evidence.verify(bundle).problems
    assert (bundle / "samples.jsonl").read_text().splitlines() == samples_before, "the first run's lines are kept"
    # Blocks 1A and 2B ran once, before the interruption; 3B again in full, then 4A.
    assert _finished_blocks(bundle) == BLOCKS
    resume = json.loads((bundle / "resume-1" / "resume.json").read_text())
    (incomplete,) = resume["incomplete"]
    assert incomplete["block"] == "5s-clean-3B-clean" and incomplete["samples"] >= 2
    # No sample lost or counted twice: each block's accepted measured requests, exactly once.
    results = Results.from_bundle(bundle, Settings.for_bundle(bundle, lossless=False, lpips_dir=None, lpips_device="cpu"))
    accepted = Counter((r.block.id, s.index) for r in results.ran.values() for s in r.measured)
    assert sorted(accepted) == sorted((b, i) for b in BLOCKS for i in range(3)) and set(accepted.values()) == {1}
    stored = sum(1 for p in bundle.glob("**/samples.jsonl") for _ in p.read_text().splitlines())
    # 4 blocks of 1 warmup and 3 measured requests, and the interrupted attempt's own.
    assert stored == 4 * 4 + incomplete["samples"], "every request of every attempt is in the bundle"
    # The verdict and summary are those that the bundle's own samples give.
    load_quality(results)
    written = VerdictDocument.read(results.bundle)
    assert written is not None and candidate_verdicts(results) == written.candidates
    printed = result.stdout.str()
    for line in summary_lines(results.spec, written, bundle=bundle):
        assert line in printed, line
    assert not marked_processes(CAMPAIGN_ID_ENV, json.loads((bundle / "manifest.json").read_text())["session"])


def test_a_resume_under_an_edited_spec_is_refused(pytester, ctrl_c_project):
    _, bundle = _interrupted(pytester, signal.SIGINT, ctrl_c_project)
    edited = _spec(pytester, shutdown_budget_s=4.0)

    result = run_campaign(pytester, edited, "--resume", str(bundle))

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot resume*the RunSpec 'plugin-test' was edited since the run*"])
    assert not (bundle / "resume-1").exists()


def test_the_cli_resumes_too(pytester, capsys, ctrl_c_project):
    from h3bench.cli import main

    spec, bundle = _interrupted(pytester, signal.SIGINT, ctrl_c_project)

    code = main(["run", "--runspec", str(spec), "--evidence-dir", str(pytester.path / "evidence"),
                 "--resume", str(bundle)])

    out = capsys.readouterr().out
    assert code in (0, 1, 3), out
    assert f"evidence bundle: {bundle}" in out
    assert _finished_blocks(bundle) == BLOCKS
    assert evidence.verify(bundle).ok
