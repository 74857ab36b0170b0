"""Expected-duration checks (encoder_processing.py, media_utils.py) on MP4s muxed as vLLM-Omni muxes them.

The correct files come from :func:`h3bench.media.write_mp4`, which reproduces
vLLM-Omni's muxing (H.264 yuv420p at 24 FPS, AAC stereo 32 kHz, the whole
waveform as one AudioFrame with ``pts = 0``). Each violation changes one thing.
Files are 64x32, so even 15 s (362 frames) is cheap.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import h3, media, quality
from h3bench.errors import UsageError
from h3bench.quality import Status
from tests_unit import mediagen

WIDTH, HEIGHT = 64, 32
FIVE = h3.expected_shape(5)

ALL_CHECKS = [
    "decodable",
    "has_video",
    "has_audio",
    "expected_frames",
    "expected_fps",
    "video_start",
    "video_pts_steps",
    "expected_audio_format",
    "audio_declared_duration",
    "audio_not_short",
    "audio_padding",
    "audio_start",
    "audio_covers_video",
]


def _by_name(checks: list[quality.Check]) -> dict[str, quality.Check]:
    return {check.name: check for check in checks}


def _write(path: Path, *, frames: int = FIVE.frames, samples: int | None = FIVE.audio_samples, **kwargs) -> Path:
    """An H3-style MP4 through h3bench.media.write_mp4 (``kwargs``: fps, sample_rate, channels)."""
    channels = kwargs.pop("channels", 2)
    audio = None if samples is None else mediagen.tone(samples, channels=channels)
    return media.write_mp4(path, mediagen.textured_frames(frames, WIDTH, HEIGHT), audio, **kwargs)


def _write_with_pts(path: Path, *, video_pts, audio_pts: int = 0) -> Path:
    """Mux as write_mp4 does, but with chosen timestamps (PyAV directly).

    ``video_pts(i)`` gives frame i's pts in 1/24 s; ``audio_pts`` is the
    AudioFrame's pts in 1/32000 s.
    """
    with av.open(os.fspath(path), mode="w", format="mp4") as container:
        video = container.add_stream("libx264", rate=24)
        video.pix_fmt, video.width, video.height = "yuv420p", WIDTH, HEIGHT
        video.options = {"crf": "18"}
        audio = container.add_stream("aac", rate=32_000)
        audio.layout = "stereo"
        for index, rgb in enumerate(mediagen.textured_frames(FIVE.frames, WIDTH, HEIGHT)):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = video_pts(index)
            container.mux(video.encode(frame))
        container.mux(video.encode())
        frame = av.AudioFrame.from_ndarray(mediagen.tone(FIVE.audio_samples), format="fltp", layout="stereo")
        frame.sample_rate, frame.pts = 32_000, audio_pts
        container.mux(audio.encode(frame))
        container.mux(audio.encode())
    return path


# --- expected_shape ----------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "frames", "latents", "samples"),
    [
        # The campaign states 5 s and 15 s; the others follow the 17n+5 and 800-per-latent rules by hand:
        # 4 s: 96 → 107 (17·6+5), 5·107/3 = 178.3 → 178; 8 s: 192 = 17·11+5, 5·192/3 = 320;
        # 10 s: 240 → 243 (17·14+5), 5·243/3 = 405.
        (4, 107, 178, 142_400),
        (5, 124, 207, 165_600),
        (8, 192, 320, 256_000),
        (10, 243, 405, 324_000),
        (15, 362, 603, 482_400),
    ],
)
def test_expected_shape_follows_the_17n_plus_5_rule(seconds, frames, latents, samples):
    shape = h3.expected_shape(seconds)
    assert (shape.frames, shape.audio_latents, shape.audio_samples) == (frames, latents, samples)
    assert shape.audio_duration_s == samples / 32_000
    assert shape.video_duration_s == frames / 24


@pytest.mark.parametrize("seconds", [3.99, 15.01, 0, -5, math.inf, math.nan, True, "5"])
def test_expected_shape_refuses_durations_outside_h3s_range(seconds):
    with pytest.raises(UsageError, match="expected duration"):
        h3.expected_shape(seconds)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=4, max_value=15))
def test_expected_shape_invariants(seconds):
    shape = h3.expected_shape(seconds)
    requested = round(seconds * 24)
    assert shape.frames % 17 == 5
    assert 0 <= shape.frames - requested < 17  # snapped up, to the nearest boundary
    assert shape.audio_samples % 800 == 0
    # Audio and video differ by design, by less than half an audio latent (1/80 s) ...
    assert abs(shape.audio_duration_s - shape.video_duration_s) <= 1 / 120 + 1e-12
    # ... so the audio always reaches the last frame's timestamp.
    assert shape.audio_duration_s >= (shape.frames - 1) / 24


# --- a correct file ----------------------------------------------------------


@pytest.mark.parametrize("seconds", [4, 5, 15])
def test_h3_output_passes_every_check(tmp_path, seconds):
    shape = h3.expected_shape(seconds)
    path = _write(tmp_path / "ok.mp4", frames=shape.frames, samples=shape.audio_samples)
    checks = quality.assert_expected_duration(path, seconds)
    assert [check.name for check in checks] == ALL_CHECKS
    assert all(check.status is Status.PASS for check in checks)


def test_decoded_pcm_carries_the_aac_padding_that_reference_measured(tmp_path):
    # vLLM-Omni's diffusion/utils/media_utils.py: at 5 s PyAV decodes 165 888 samples (162 AAC frames), 288 past the waveform.
    checks = _by_name(quality.expected_duration_checks(_write(tmp_path / "ok.mp4"), 5))
    assert checks["audio_not_short"].value == 165_888
    assert checks["audio_padding"].value == 288
    assert checks["audio_declared_duration"].value == pytest.approx(5.175)


# --- one violation per file ----------------------------------------------------


VIOLATIONS = {
    # name: (builder, the check that must fail)
    "frames_not_17n_plus_5": (lambda p: _write(p, frames=120), "expected_frames"),
    "frames_of_another_duration": (lambda p: _write(p, frames=107), "expected_frames"),
    "fps_25": (lambda p: _write(p, fps=25), "expected_fps"),
    "audio_mono": (lambda p: _write(p, channels=1), "expected_audio_format"),
    "audio_44k": (lambda p: _write(p, sample_rate=44_100), "expected_audio_format"),
    "audio_short": (lambda p: _write(p, samples=164_000), "audio_not_short"),
    # 200 samples more: decodes to the same 165 888, but declares 5.18 s.
    "audio_declared_duration": (lambda p: _write(p, samples=165_800), "audio_declared_duration"),
    # 500 samples more: one AAC frame more than the waveform needs.
    "audio_padding": (lambda p: _write(p, samples=166_100), "audio_padding"),
    "video_starts_late": (lambda p: _write_with_pts(p, video_pts=lambda i: i + 12), "video_start"),
    "audio_starts_late": (lambda p: _write_with_pts(p, video_pts=lambda i: i, audio_pts=16_000), "audio_start"),
    "skipped_timestamp": (lambda p: _write_with_pts(p, video_pts=lambda i: i + (i >= 60)), "video_pts_steps"),
    # 5.0 s of audio against a last frame at 123/24 = 5.125 s.
    "audio_ends_early": (lambda p: _write(p, samples=160_000), "audio_covers_video"),
    "no_audio": (lambda p: _write(p, samples=None), "has_audio"),
}


@pytest.mark.parametrize("case", VIOLATIONS)
def test_each_violation_fails_its_check_and_the_assertion(tmp_path, case):
    build, failing = VIOLATIONS[case]
    path = build(tmp_path / f"{case}.mp4")
    checks = _by_name(quality.expected_duration_checks(path, 5))
    assert list(checks) == ALL_CHECKS
    assert checks[failing].status is Status.FAIL, checks[failing]
    with pytest.raises(AssertionError) as raised:
        quality.assert_expected_duration(path, 5)
    message = str(raised.value)
    bad = [check for check in checks.values() if check.status is not Status.PASS]
    lines = message.splitlines()[1:]
    assert len(lines) == len(bad)
    for line, check in zip(lines, bad, strict=True):  # every failing check, with its value and threshold
        value, threshold = quality.format_value(check.value), check.threshold or "-"
        assert line == f"  [{check.status}] {check.name}: {value} (threshold {threshold}) — {check.detail}"


def test_violations_name_the_cause(tmp_path):
    checks = _by_name(quality.expected_duration_checks(_write(tmp_path / "a.mp4", frames=120), 5))
    assert checks["expected_frames"].value == 120
    assert checks["expected_frames"].threshold == "== 124"
    assert "not 17n+5" in checks["expected_frames"].detail
    checks = _by_name(quality.expected_duration_checks(VIOLATIONS["skipped_timestamp"][0](tmp_path / "b.mp4"), 5))
    assert checks["video_pts_steps"].value == 1
    assert "frame 59 → 60, 83.333 ms" in checks["video_pts_steps"].detail
    checks = _by_name(quality.expected_duration_checks(_write(tmp_path / "c.mp4", fps=25), 5))
    assert (checks["expected_fps"].value, checks["expected_fps"].threshold) == ("25/1", "== 24/1")


def test_a_file_without_video_fails_has_video(make_audio_only_mp4):
    path = make_audio_only_mp4(samples=FIVE.audio_samples)
    checks = _by_name(quality.expected_duration_checks(path, 5))
    assert checks["has_video"].status is Status.FAIL
    assert {checks[name].status for name in ALL_CHECKS[3:7]} == {Status.NOT_MEASURED}
    assert checks["audio_not_short"].status is Status.PASS
    with pytest.raises(AssertionError, match=r"\[fail\] has_video: no"):
        quality.assert_expected_duration(path, 5)


def test_missing_streams_leave_their_checks_not_measured(tmp_path):
    checks = _by_name(quality.expected_duration_checks(_write(tmp_path / "silent.mp4", samples=None), 5))
    assert checks["expected_frames"].status is Status.PASS
    assert {checks[name].status for name in ALL_CHECKS[7:]} == {Status.NOT_MEASURED}
    assert "has no decodable audio stream" in checks["audio_padding"].detail


# --- files that are not media, and bad arguments --------------------------------


@pytest.mark.parametrize("content", [b"", np.random.default_rng(0).bytes(4096)], ids=["empty", "random_bytes"])
def test_a_file_that_does_not_decode_fails_decodable(tmp_path, content):
    path = tmp_path / "broken.mp4"
    path.write_bytes(content)
    checks = _by_name(quality.expected_duration_checks(path, 5))
    assert checks["decodable"].status is Status.FAIL
    assert str(path) in checks["decodable"].detail
    assert {check.status for name, check in checks.items() if name != "decodable"} == {Status.NOT_MEASURED}
    with pytest.raises(AssertionError, match=r"\[fail\] decodable"):
        quality.assert_expected_duration(path, 5)


def test_paths_that_cannot_be_read_and_bad_durations_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="cannot be read"):
        quality.expected_duration_checks(tmp_path / "missing.mp4", 5)
    with pytest.raises(UsageError, match="is a directory"):
        quality.expected_duration_checks(tmp_path, 5)
    with pytest.raises(UsageError, match=r"within \[4, 15\]"):
        quality.expected_duration_checks(_write(tmp_path / "ok.mp4"), 16)
