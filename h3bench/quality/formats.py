"""Format checks between a baseline and a candidate: the campaign requires them before any metric.

Equal frame count, frame size and ``avg_frame_rate`` (an exact fraction), as
upstream's accuracy test requires before ffmpeg's filters; equal audio rate,
channels and decoded sample count; and finite PCM.
"""

from __future__ import annotations

import numpy as np

from h3bench.quality.checks import Check, blocked_by, equal, not_measured, passes_if
from h3bench.quality.files import Probed

__all__ = ["audio_format_checks", "finite_check", "video_format_checks"]


def video_format_checks(base: Probed, cand: Probed, has_video: Check) -> list[Check]:
    names = ("frame_count", "frame_size", "frame_rate")
    reason = blocked_by([has_video])
    if reason:
        return [not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.video, cand.video
    assert b is not None and c is not None  # has_video passed
    return [
        equal("frame_count", "frame counts", b.frames, c.frames),
        equal("frame_size", "frame sizes", f"{b.width}x{b.height}", f"{c.width}x{c.height}"),
        equal("frame_rate", "average frame rates", b.avg_frame_rate, c.avg_frame_rate),
    ]


def audio_format_checks(base: Probed, cand: Probed, has_audio: Check) -> list[Check]:
    names = ("audio_rate", "audio_channels", "audio_samples")
    reason = blocked_by([has_audio])
    if reason:
        return [not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.audio, cand.audio
    assert b is not None and c is not None  # has_audio passed
    return [
        equal("audio_rate", "audio sample rates", b.sample_rate, c.sample_rate),
        equal("audio_channels", "audio channel counts", b.channels, c.channels),
        equal("audio_samples", "decoded audio sample counts", b.samples, c.samples),
    ]


def finite_check(baseline_pcm: np.ndarray, candidate_pcm: np.ndarray) -> Check:
    """The ``audio_finite`` check: no NaN or inf in either decoded waveform."""
    counts = {
        "baseline": int(np.size(baseline_pcm) - np.count_nonzero(np.isfinite(baseline_pcm))),
        "candidate": int(np.size(candidate_pcm) - np.count_nonzero(np.isfinite(candidate_pcm))),
    }
    total = sum(counts.values())
    detail = ", ".join(f"{role} has {count} non-finite samples" for role, count in counts.items())
    return passes_if(total == 0, "audio_finite", total, "== 0", detail if total else "every PCM sample is finite")
