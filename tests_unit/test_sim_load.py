"""The simulator's E2E follows its profile while other processes hold every core.

A reduced copy of the default campaign (both durations, every test, the
default 384x224 canvas, half the default time scale, ``ABBA`` instead of
``ABBAABBA``) runs beside one CPU-bound process per core, started and killed
here. It has two candidates against the baseline, each in its own blocks: the
default's ``clean`` arm, 10 % faster, and ``same``, identical to the
baseline (an A/A comparison). The speed verdicts and ratios come from the
project's own review of the bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from h3bench.review import Review
from h3bench.settings import Settings
from tests_unit.campaign_project import bundle_of, run_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

TIME_SCALE = 0.0005  # the default's is 0.001: 5 s requests take 0.37 s here, 15 s ones 2.9 s
ARM = {"time_scale": TIME_SCALE, "jitter_cv": 0.01, "workers": 2}


@pytest.fixture
def busy_cores() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One ``while True: pass`` per core this process may run on, for the length of the test."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_10_percent_faster_profile_measures_0_9_and_an_identical_one_is_not_judged(pytester, busy_cores) -> None:
    spec = write_campaign(
        pytester.path,
        durations=(5, 15),
        size="384x224",
        baseline=ARM,
        candidates={"clean": {**ARM, "time_scale": TIME_SCALE * 0.9}, "same": ARM},
        protocol={"request_timeout_s": 60.0},
        gates={"lossless": True, "min_control_pairs": 1},
    )

    result = run_campaign(pytester, spec)

    assert all(spinner.poll() is None for spinner in busy_cores)  # the cores stayed busy throughout
    bundle = bundle_of(pytester)
    verdicts = json.loads((bundle / "verdict.json").read_text())["candidates"]
    review = Review.from_bundle(bundle, Settings(None))
    for duration in (5, 15):
        clean, same = (review.speed(duration, name) for name in ("clean", "same"))
        assert clean is not None and same is not None
        assert 0.88 <= clean.estimate.geomean <= 0.92, result.stdout.str()
        assert verdicts["clean"]["durations"][f"{duration}s"]["speed"] == "PASS"
        assert verdicts["same"]["durations"][f"{duration}s"]["speed"] == "INCONCLUSIVE", result.stdout.str()
    assert verdicts["clean"]["verdict"] == "PASS", result.stdout.str()
    assert verdicts["same"]["stopped"] is None  # no block of the A/A arm failed, its audits included
    result.stdout.fnmatch_lines(["verdict clean: PASS", "verdict same: INCONCLUSIVE"])
