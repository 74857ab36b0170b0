"""Lossless mode: candidate deviations against the control envelope, on real files."""

from __future__ import annotations

import pytest

from h3bench import lossless, media, quality

METRICS = ("ssim", "psnr_db", "audio_spectral_cosine", "audio_rms_ratio")


@pytest.fixture
def outputs(make_mp4):
    """A baseline, two reruns with small independent noise (controls) and candidates."""
    return {
        "base": make_mp4("base.mp4", noise=2.0, noise_seed=100),
        "rerun1": make_mp4("rerun1.mp4", noise=2.0, noise_seed=110),
        "rerun2": make_mp4("rerun2.mp4", noise=2.0, noise_seed=120),
        "same": make_mp4("same.mp4", noise=2.0, noise_seed=130),
        "lossy": make_mp4("lossy.mp4", noise=9.0, noise_seed=140),
    }


def judge(outputs, candidate, *, independent=2, metrics=METRICS):
    controls = [quality.compare(outputs["base"], outputs[name], measure_lpips=False) for name in ("rerun1", "rerun2")]
    report = quality.compare(outputs["base"], outputs[candidate], measure_lpips=False)
    equal = media.decoded_digest(outputs["base"]) == media.decoded_digest(outputs[candidate])
    return lossless.judge([(report, equal)], controls, tolerance=1.0, min_controls=2,
                          independent_controls=independent, metrics=metrics)


def test_bitwise_equal_decoded_media_is_exact(outputs, tmp_path):
    copy = tmp_path / "copy.mp4"
    copy.write_bytes(outputs["base"].read_bytes())
    outputs["copy"] = copy

    verdict = judge(outputs, "copy")

    assert verdict.outcome == "EXACT" and verdict.exact_pairs == 1


def test_a_candidate_like_another_baseline_process_passes(outputs):
    verdict = judge(outputs, "same")

    assert verdict.outcome == "PASS", verdict.reasons
    assert set(verdict.envelopes) == set(METRICS)


def test_a_lossy_candidate_fails_and_names_the_metric(outputs):
    verdict = judge(outputs, "lossy")

    assert verdict.outcome == "FAIL"
    assert any("ssim deviation" in reason and "outside the control envelope" in reason for reason in verdict.reasons)


def test_too_few_independent_controls_is_inconclusive_even_for_a_good_candidate(outputs):
    verdict = judge(outputs, "same", independent=1)

    assert verdict.outcome == "INCONCLUSIVE"
    assert "distinct baseline server processes" in verdict.reasons[0]


def test_an_unmeasured_required_metric_is_inconclusive_not_lossless(outputs):
    verdict = judge(outputs, "same", metrics=(*METRICS, "lpips"))

    assert verdict.outcome == "INCONCLUSIVE"
    assert "not measured: lpips" in verdict.reasons[0] and "never called lossless" in verdict.reasons[0]


def test_deviations_are_zero_for_identical_media(outputs):
    report = quality.compare(outputs["base"], outputs["base"], measure_lpips=False)

    assert {k: v for k, v in lossless.deviations(report).items() if k != "lpips"} == dict.fromkeys(METRICS, 0.0)
