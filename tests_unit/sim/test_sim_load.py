"""The simulator's E2E follows its profile while other processes hold every core.

Reduced copies of the default campaign (every test, the default 384x224
canvas and ``ABBAABBA`` order) run beside one CPU-bound process per core (at
nice 10: contention, not starvation), started and killed here:

- A/B: the default's ``clean`` arm, 10 % faster, against the baseline at 5 s
  and 15 s. Its measured ratio must lie within [0.88, 0.92] at both, and its
  verdict be PASS. To keep the run short, the time scale is 0.0008 (the
  default's is 0.001) and the DiT step at 15 s costs twice the 5 s step, not
  eight times, so the modelled time is 0.60 s at 5 s and 1.2 s at 15 s: still
  several times what rendering costs. Its 99.9 % interval of the paired
  ratios must reach into [0.88, 0.92]: it fails in at most 0.1 % of runs of
  a simulator that follows its profile.
- A/A: an arm identical to the baseline, at 5 s (where the default campaign
  measured CPU contention instead of the profile): the 99.9 % interval of
  its ratio must contain 1. The campaign's own verdict may call an A/A pair
  PASS or FAIL in up to 2.5 % + 1.25 % of campaigns by design
  (``tests_unit/stats/test_error_rates.py`` measures that), so the test does not ask for
  INCONCLUSIVE, which it could not guarantee.

The two campaigns run at the same time, each with its own device lock, and
their ratios and verdicts come from each bundle's verdict.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from h3bench.outcome import Outcome
from h3bench.server.proctree import die_with_parent
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.stats import intervals
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.campaign_project import NO_REPORT, UNUSED_PLUGINS, bundles_in, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

BASELINE = {"time_scale": 0.0008, "step_s": [14.9, 29.8], "jitter_cv": 0.01, "workers": 2}
CAMPAIGNS = {
    "ab": {"durations": (5, 15), "candidates": {"clean": {**BASELINE, "time_scale": 0.0008 * 0.9}}},
    "aa": {"durations": (5,), "candidates": {"same": BASELINE}},
}


def _spinner() -> None:
    """In the child before it spins: it dies with this process, and it runs at nice 10."""
    die_with_parent()
    os.nice(10)


@pytest.fixture
def busy_cores() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One ``while True: pass`` per core this process may run on, for the length of the test.

    At nice 10 the spinners keep every core busy and still take about a tenth of a core from each process that
    wants one: contention, not starvation, and inside the whole suite (where other workers contend as well)
    they do not eat a quarter of its CPU.
    """
    # Each child dies with this process, even when a killed test never reaches its finally.
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_spinner)
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
            *UNUSED_PLUGINS, *NO_REPORT]
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

    documents = {}
    for name in CAMPAIGNS:
        (bundle,) = bundles_in(tmp_path / name / "evidence")
        documents[name] = VerdictDocument.read(Results.from_bundle(bundle, Settings(None)).bundle)
        assert documents[name] is not None, outputs[name]
    clean = documents["ab"].candidates["clean"]
    for duration in (5, 15):
        d = clean.durations[f"{duration}s"]
        assert d.estimate is not None and d.speed is Outcome.PASS, outputs["ab"]
        # The profile's 0.9, within what rendering outside the modelled time may add (about ±2 %).
        assert overlaps(interval_999(d.estimate.ratios), (0.88, 0.92)), (d.estimate.ratios, outputs["ab"])
    assert clean.outcome is Outcome.PASS and runs["ab"].returncode == 0, outputs["ab"]
    same = documents["aa"].candidates["same"]
    d = same.durations["5s"]
    assert d.estimate is not None and overlaps(interval_999(d.estimate.ratios), (1.0, 1.0)), outputs["aa"]
    assert same.stopped is None and d.quality is Outcome.PASS, outputs["aa"]


def interval_999(ratios: tuple[float, ...]) -> tuple[float, float]:
    """The two-sided 99.9 % t interval of the paired ratios: it misses the true ratio in 0.1 % of campaigns."""
    _, lower, upper, _ = intervals.t_bounds(np.log(ratios), 0.0005, 0.0005)
    return float(lower), float(upper)


def overlaps(interval: tuple[float, float], band: tuple[float, float]) -> bool:
    return interval[0] <= band[1] and band[0] <= interval[1]


def test_the_interval_misses_its_ratio_in_one_campaign_in_a_thousand():
    """What the assertions above rest on, measured on 20 000 simulated A/A campaigns of the same design (4 pairs)."""
    rng = np.random.default_rng(7)
    ratios = np.exp(rng.normal(0.0, 0.02, (20_000, 4)))
    _, lower, upper, _ = intervals.t_bounds(np.log(ratios), 0.0005, 0.0005)
    missed = float(np.mean((lower > 1) | (upper < 1)))
    assert missed <= 0.001 + 3.5 * (0.001 * 0.999 / 20_000) ** 0.5
