"""The simulator's E2E follows its profile while other processes hold every core.

Reduced copies of the default campaign (every test, the default 384x224
canvas and ``ABBAABBA`` order) run beside one CPU-bound process per core,
started and killed here:

- A/B: the default's ``clean`` arm, 10 % faster, against the baseline at 5 s
  and 15 s. Its measured ratio must lie within [0.88, 0.92] at both, and its
  verdict be PASS. To keep the run short, the time scale is 0.0008 (the
  default's is 0.001) and the DiT step at 15 s costs twice the 5 s step, not
  eight times, so the modelled time is 0.60 s at 5 s and 1.2 s at 15 s: still
  several times what rendering costs.
- A/A: an arm identical to the baseline, at 5 s (where the default campaign
  measured CPU contention instead of the profile): its speed verdict must be
  INCONCLUSIVE. The statistics call an A/A comparison FAIL (slower) with the
  95 % interval's one-sided error of 2.5 %, a designed rate that
  ``test_stats.py`` measures; no load may add to it.

The two campaigns run at the same time, each with its own device lock, and
their ratios and verdicts come from the project's own review of each bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from h3bench.server.proctree import die_with_parent
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from tests_unit.campaign_project import bundles_in, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

BASELINE = {"time_scale": 0.0008, "step_s": [14.9, 29.8], "jitter_cv": 0.01, "workers": 2}
CAMPAIGNS = {
    "ab": {"durations": (5, 15), "candidates": {"clean": {**BASELINE, "time_scale": 0.0008 * 0.9}}},
    "aa": {"durations": (5,), "candidates": {"same": BASELINE}},
}


@pytest.fixture
def busy_cores() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One ``while True: pass`` per core this process may run on, for the length of the test."""
    # Each child dies with this process, even when a killed test never reaches its finally.
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent)
                for _ in os.sched_getaffinity(0)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def start_campaign(root: Path, durations: tuple[int, ...], candidates: dict) -> subprocess.Popen[str]:
    """Write a campaign project under ``root`` and run pytest on it in a child process with its own device lock."""
    root.mkdir()
    spec = write_campaign(root, durations=durations, size="384x224", baseline=BASELINE, candidates=candidates,
                          protocol={"order": "ABBAABBA", "request_timeout_s": 60.0})
    # Its own device lock; no LPIPS weights (the spec does not require them): this test is about latency.
    env = {**os.environ, "H3BENCH_DEVICE_LOCK": str(root / "devices.lock"), "H3BENCH_CACHE_DIR": str(root / "cache")}
    argv = [sys.executable, "-m", "pytest", "--runspec", str(spec), "--evidence-dir", str(root / "evidence"),
            "-p", "no:cacheprovider"]
    # It stops (SIGTERM: its servers with it) if this process dies, so a killed test leaves no campaign behind.
    return subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=die_with_parent)


def test_a_10_percent_faster_profile_measures_0_9_and_an_identical_one_is_not_judged(
    tmp_path: Path, busy_cores: list[subprocess.Popen[bytes]]
) -> None:
    runs = {name: start_campaign(tmp_path / name, **campaign) for name, campaign in CAMPAIGNS.items()}
    try:
        outputs = {name: run.communicate(timeout=900)[0] for name, run in runs.items()}
    finally:
        for run in runs.values():  # after a timeout: nothing keeps running past the test (its servers die with it)
            if run.poll() is None:
                run.kill()
                run.wait()
    assert all(spinner.poll() is None for spinner in busy_cores)  # the cores stayed busy throughout

    reviews, verdicts = {}, {}
    for name in CAMPAIGNS:
        (bundle,) = bundles_in(tmp_path / name / "evidence")
        reviews[name] = Results.from_bundle(bundle, Settings(None))
        verdicts[name] = json.loads((bundle / "verdict.json").read_text())["candidates"]
    for duration in (5, 15):
        clean = reviews["ab"].speed(duration, "clean")
        assert clean is not None, outputs["ab"]
        assert 0.88 <= clean.estimate.geomean <= 0.92, outputs["ab"]
        assert verdicts["ab"]["clean"]["durations"][f"{duration}s"]["speed"] == "PASS", outputs["ab"]
    assert verdicts["ab"]["clean"]["verdict"] == "PASS", outputs["ab"]
    assert runs["ab"].returncode == 0, outputs["ab"]
    same = verdicts["aa"]["same"]
    assert same["durations"]["5s"]["speed"] == "INCONCLUSIVE", outputs["aa"]
    assert same["stopped"] is None and same["durations"]["5s"]["quality"] == "PASS", outputs["aa"]
