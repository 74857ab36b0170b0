"""Expected-duration checks: one output MP4 against what H3 produces for the requested seconds.

The rules come from vLLM-Omni's MiniMax-H3 code (``encoder_processing.py``,
``time_request.py``; see :mod:`h3bench.h3`) and its muxer
(``diffusion/utils/media_utils.py``): PyAV writes the whole waveform as one
AudioFrame with ``pts = 0``, so the AAC priming is a negative timestamp and
the decoder keeps the last AAC frame's padding. Checks therefore read each
stream's declared duration, and allow decoded PCM to exceed the expected
count by less than one AAC frame, never to fall short.
"""

from __future__ import annotations

import os

import numpy as np

from h3bench import media
from h3bench.h3 import AUDIO_CHANNELS, AUDIO_SAMPLE_RATE, AUDIO_SAMPLES_PER_LATENT, FPS, ExpectedShape, expected_shape
from h3bench.quality.checks import Check, format_value, not_measured, passes_if
from h3bench.quality.files import Probed, decodable_check, probe_file, stream_check

__all__ = ["AAC_FRAME_SAMPLES", "duration_checks", "expected_duration_checks"]

# The decoder keeps the last AAC frame's padding, so decoded PCM may exceed the
# waveform by less than one AAC frame.
AAC_FRAME_SAMPLES = 1024
_DECLARED_DURATION_TOLERANCE_S = 1e-3
# Admits millisecond time bases (steps of 41 and 42 ms), not a skipped frame.
_PTS_STEP_TOLERANCE_S = 1e-3

_VIDEO_DURATION_CHECKS = ("expected_frames", "expected_fps", "video_start", "video_pts_steps")
_AUDIO_DURATION_CHECKS = (
    "expected_audio_format",
    "audio_declared_duration",
    "audio_not_short",
    "audio_padding",
    "audio_start",
    "audio_covers_video",
)


def duration_checks(f: Probed, shape: ExpectedShape) -> list[Check]:
    """The expected-duration checks of one probed file; those of a missing stream are not measured."""
    video, sound = f.video, f.audio
    checks: list[Check] = []
    if video is None:
        reason = f"not measured: {f.path} has no decodable video stream"
        checks += [not_measured(name, "", reason) for name in _VIDEO_DURATION_CHECKS]
    else:
        checks += _video_duration_checks(video, shape)
    if sound is None:
        reason = f"not measured: {f.path} has no decodable audio stream"
        checks += [not_measured(name, "", reason) for name in _AUDIO_DURATION_CHECKS]
    else:
        checks += _audio_duration_checks(sound, video, shape)
    return checks


def _video_duration_checks(video: media.VideoInfo, shape: ExpectedShape) -> list[Check]:
    rule = "17n+5" if video.frames % 17 == 5 else "not 17n+5"
    checks = [
        passes_if(
            video.frames == shape.frames,
            "expected_frames",
            video.frames,
            f"== {shape.frames}",
            f"{video.frames} frames decoded ({rule}); {shape.seconds:g} s at {FPS} FPS gives {shape.frames}",
        ),
        passes_if(
            video.avg_frame_rate == FPS,
            "expected_fps",
            format_value(video.avg_frame_rate),
            f"== {FPS}/1",
            f"avg_frame_rate is {format_value(video.avg_frame_rate)}; H3 writes {FPS} FPS",
        ),
        passes_if(
            video.start_time_s == 0,
            "video_start",
            video.start_time_s,
            "== 0",
            f"the video stream starts at {video.start_time_s:.6g} s",
        ),
    ]
    steps = np.diff(np.asarray(video.frame_pts_s, dtype=np.float64))
    irregular = np.flatnonzero(~(np.abs(steps - 1 / FPS) <= _PTS_STEP_TOLERANCE_S))
    if irregular.size:
        first = int(irregular[0])
        detail = (
            f"{irregular.size} of {steps.size} timestamp steps are not 1/{FPS} s; "
            f"the first is frame {first} → {first + 1}, {steps[first] * 1e3:.3f} ms"
        )
    else:
        detail = f"every timestamp step is 1/{FPS} s"
    checks.append(passes_if(not irregular.size, "video_pts_steps", int(irregular.size), "== 0 irregular steps", detail))
    return checks


def _audio_duration_checks(sound: media.AudioInfo, video: media.VideoInfo | None, shape: ExpectedShape) -> list[Check]:
    expected = shape.audio_samples
    excess = sound.samples - expected
    fmt = f"{sound.sample_rate} Hz, {sound.channels} ch"
    want = f"{AUDIO_SAMPLE_RATE} Hz, {AUDIO_CHANNELS} ch"
    declared = sound.duration_s
    checks = [
        passes_if(fmt == want, "expected_audio_format", fmt, f"== {want}", f"the audio is {fmt}; H3 writes {want}"),
        passes_if(
            declared is not None and abs(declared - shape.audio_duration_s) <= _DECLARED_DURATION_TOLERANCE_S,
            "audio_declared_duration",
            declared,
            f"== {shape.audio_duration_s:g} s ± 1 ms",
            f"the audio stream declares {format_value(declared)} s; {shape.frames} frames give "
            f"{shape.audio_latents} latents × {AUDIO_SAMPLES_PER_LATENT} samples = {shape.audio_duration_s:g} s",
        ),
        passes_if(
            excess >= 0,
            "audio_not_short",
            sound.samples,
            f">= {expected}",
            f"{sound.samples} samples decoded per channel; {shape.seconds:g} s needs {expected}",
        ),
        passes_if(
            excess < AAC_FRAME_SAMPLES,
            "audio_padding",
            excess,
            f"< {AAC_FRAME_SAMPLES}",
            f"decoded PCM exceeds the expected {expected} samples by {excess}; "
            f"AAC padding is less than one {AAC_FRAME_SAMPLES}-sample frame",
        ),
        passes_if(
            sound.start_time_s == 0,
            "audio_start",
            sound.start_time_s,
            "== 0",
            f"the audio stream starts at {sound.start_time_s:.6g} s",
        ),
    ]
    if video is None or not video.frame_pts_s:
        checks.append(not_measured("audio_covers_video", "", "not measured: no decoded video frames"))
        return checks
    # H3's audio may end up to 1/120 s before the last frame's display ends
    # (15 s: 15.075 s of audio, 362/24 = 15.0833 s of video), so "covers"
    # means the audio reaches the last frame's timestamp.
    last_frame = video.frame_pts_s[-1]
    length = declared if declared is not None else sound.samples / sound.sample_rate
    audio_end = sound.start_time_s + length
    checks.append(
        passes_if(
            audio_end >= last_frame,
            "audio_covers_video",
            audio_end,
            f">= {last_frame:.6g} s (last frame)",
            f"the audio ends at {audio_end:.6g} s and the last video frame is shown at {last_frame:.6g} s",
        )
    )
    return checks


def expected_duration_checks(path: str | os.PathLike[str] | Probed, seconds: float) -> list[Check]:
    """Check one output MP4 (or its probe) against what H3 produces for ``seconds``.

    The checks are ``decodable``, ``has_video``, ``has_audio``, then
    ``expected_frames`` (17n+5 rule), ``expected_fps`` (24/1), ``video_start``
    (0), ``video_pts_steps`` (every step 1/24 s, within 1 ms),
    ``expected_audio_format`` (32 kHz stereo), ``audio_declared_duration``
    (800·round(40·frames/24)/32000 s within 1 ms), ``audio_not_short`` (decoded
    PCM never short), ``audio_padding`` (longer by less than one AAC frame),
    ``audio_start`` (0) and ``audio_covers_video`` (the audio reaches the last
    frame's timestamp; by design it may end up to 1/120 s before that frame's
    display ends, as at 15 s). Raises UsageError if ``seconds`` is outside [4, 15]
    or ``path`` cannot be read.
    """
    shape = expected_shape(seconds)
    probed = path if isinstance(path, Probed) else probe_file("output", path)
    decodable = decodable_check([probed])
    checks = [decodable, stream_check([probed], decodable, "video"), stream_check([probed], decodable, "audio")]
    return checks + duration_checks(probed, shape)
