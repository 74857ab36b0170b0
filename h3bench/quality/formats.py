"""Format checks between a baseline and a candidate: the campaign requires them before any metric.

Equal frame count, frame size and ``avg_frame_rate`` (an exact fraction), as
upstream's accuracy test requires before ffmpeg's filters; equal audio rate,
channels and decoded sample count; and finite PCM.

The metrics compare decoded planes converted to 8-bit yuv420p, which hides
how a player would show them, so these must be equal too: the pixel format
and bit depth, the display matrix (a rotated file scores SSIM 1 against its
unrotated twin), the sample aspect ratio, the colour range, matrix, primaries
and transfer (:mod:`h3bench.media.tags`), and the audio channel layout and
sample format. Where the baseline is not what vLLM-Omni's muxer
(``diffusion/utils/media_utils.py``) writes, 8-bit yuv420p with no display
matrix and AAC stereo (decoded as fltp), the detail says so: the baseline
itself is then suspect.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from h3bench.quality.checks import Check, blocked_by, equal, format_value, not_measured, passes_if
from h3bench.quality.files import Probed

# What upstream's muxer writes, for the checks that say when the baseline differs.
UPSTREAM_PIXEL_FORMAT, UPSTREAM_BIT_DEPTH, UPSTREAM_DISPLAY = "yuv420p", 8, "none"
UPSTREAM_SAMPLE_FORMAT, UPSTREAM_LAYOUT = "fltp", "stereo"

__all__ = ["audio_format_checks", "finite_check", "video_format_checks"]


def video_format_checks(base: Probed, cand: Probed, has_video: Check) -> list[Check]:
    names = ("frame_count", "frame_size", "frame_rate", "pixel_format", "bit_depth", "display_matrix",
             "sample_aspect_ratio", "color_range", "color_space", "color_primaries", "color_transfer")
    reason = blocked_by([has_video])
    if reason:
        return [not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.video, cand.video
    assert b is not None and c is not None  # has_video passed
    bt, ct = b.tags, c.tags
    return [
        equal("frame_count", "frame counts", b.frames, c.frames),
        equal("frame_size", "frame sizes", f"{b.width}x{b.height}", f"{c.width}x{c.height}"),
        equal("frame_rate", "average frame rates", b.avg_frame_rate, c.avg_frame_rate),
        _as_upstream(equal("pixel_format", "pixel formats", b.pix_fmt, c.pix_fmt), b.pix_fmt, UPSTREAM_PIXEL_FORMAT),
        _as_upstream(equal("bit_depth", "bit depths", bt.bit_depth, ct.bit_depth), bt.bit_depth, UPSTREAM_BIT_DEPTH),
        _as_upstream(equal("display_matrix", "display matrices", _shown(bt.display), _shown(ct.display)),
                     _shown(bt.display), UPSTREAM_DISPLAY),
        equal("sample_aspect_ratio", "sample aspect ratios", bt.sample_aspect_ratio, ct.sample_aspect_ratio),
        equal("color_range", "colour ranges", bt.color_range, ct.color_range),
        equal("color_space", "colour matrices", bt.color_space, ct.color_space),
        equal("color_primaries", "colour primaries", bt.color_primaries, ct.color_primaries),
        equal("color_transfer", "colour transfer characteristics", bt.color_transfer, ct.color_transfer),
    ]


def audio_format_checks(base: Probed, cand: Probed, has_audio: Check) -> list[Check]:
    names = ("audio_rate", "audio_channels", "audio_samples", "audio_channel_layout", "audio_sample_format")
    reason = blocked_by([has_audio])
    if reason:
        return [not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.audio, cand.audio
    assert b is not None and c is not None  # has_audio passed
    return [
        equal("audio_rate", "audio sample rates", b.sample_rate, c.sample_rate),
        equal("audio_channels", "audio channel counts", b.channels, c.channels),
        equal("audio_samples", "decoded audio sample counts", b.samples, c.samples),
        _as_upstream(equal("audio_channel_layout", "audio channel layouts", b.layout, c.layout),
                     b.layout, UPSTREAM_LAYOUT),
        _as_upstream(equal("audio_sample_format", "decoded audio sample formats", b.sample_format, c.sample_format),
                     b.sample_format, UPSTREAM_SAMPLE_FORMAT),
    ]


def _shown(display: Any) -> str:
    return "none" if display is None else str(display)


def _as_upstream(check: Check, baseline: Any, upstream: Any) -> Check:
    """``check``, its detail also saying when the baseline is not what upstream's muxer writes."""
    if baseline == upstream:
        return check
    note = f"; the baseline is not what upstream's muxer writes ({format_value(upstream)})"
    return replace(check, detail=check.detail + note)


def finite_check(baseline_pcm: np.ndarray, candidate_pcm: np.ndarray) -> Check:
    """The ``audio_finite`` check: no NaN or inf in either decoded waveform."""
    counts = {
        "baseline": int(np.size(baseline_pcm) - np.count_nonzero(np.isfinite(baseline_pcm))),
        "candidate": int(np.size(candidate_pcm) - np.count_nonzero(np.isfinite(candidate_pcm))),
    }
    total = sum(counts.values())
    detail = ", ".join(f"{role} has {count} non-finite samples" for role, count in counts.items())
    return passes_if(total == 0, "audio_finite", total, "== 0", detail if total else "every PCM sample is finite")
