"""Quality of every measured candidate output against its matched baseline (vLLM-Omni's tests/e2e/accuracy/helpers.py).

Matched means the same inputs and seed, from the paired AB/BA blocks. Each
pair goes through every gate: SSIM, PSNR, LPIPS, audio spectral cosine, RMS
ratio, the format checks and the expected-duration checks for the requested
seconds. Baseline outputs are checked for their expected duration too: a
broken baseline invalidates the comparison. These tests read outputs from the
evidence bundle and never start servers themselves, so `-n auto` is safe.
"""

from __future__ import annotations

import pytest

from h3bench.plugin import assert_expected_duration, assert_quality_gates

pytestmark = pytest.mark.quality


def test_lpips_weights_authenticated(campaign):
    """The LPIPS weights are hash-checked against the pins before any LPIPS value is used."""
    status = campaign.judge.lpips_status()
    if not status.required:
        pytest.skip(f"LPIPS not required by this RunSpec: {status.detail}")
    assert status.ok, status.detail


def test_baseline_output_has_expected_duration(campaign, baseline_output):
    assert_expected_duration(campaign.judge.probed(baseline_output), baseline_output.duration)


def test_candidate_passes_quality_gates(campaign, matched_pair):
    report = campaign.judge.compare(matched_pair)
    assert_quality_gates(report, allow_not_measured=campaign.judge.optional_checks())
