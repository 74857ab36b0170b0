"""The gates of one pair: what the quality engine measured, turned into the report's checks, in a fixed order.

1. the format checks that the campaign requires before any metric
   (:mod:`h3bench.quality.formats`);
2. optionally, the expected-duration checks of each file for a requested
   number of seconds (:mod:`h3bench.quality.expected`), prefixed
   ``baseline.`` and ``candidate.``;
3. the metric gates with upstream's definitions: SSIM ≥ 0.97 and PSNR ≥ 34 dB
   (ffmpeg's filters, as vLLM-Omni's ``tests/e2e/accuracy/helpers.py`` runs
   them), LPIPS ≤ 0.20 (alex, v0.1) and audio spectral cosine ≥ 0.80 and RMS
   ratio in [0.50, 2.00] (``test_minimax_h3_quantization_quality.py``).

A metric whose prerequisites failed is ``not_measured`` with the reason (the
verdict is FAIL anyway, because a prerequisite failed). LPIPS weights that
cannot be authenticated make the ``lpips`` check ``not_measured``, so the
verdict cannot be PASS.

Audio metrics compare PCM trimmed to an expected sample count, because the
decoder keeps the AAC padding at the end: the count for ``expect_seconds``
when given, otherwise each stream's declared duration times its rate, which
is the waveform the muxer was given.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from h3bench import media
from h3bench.errors import MediaShapeError
from h3bench.h3 import ExpectedShape, expected_shape
from h3bench.quality.checks import (
    Check,
    QualityReport,
    Status,
    Thresholds,
    at_least,
    at_most,
    blocked_by,
    not_measured,
    within,
)
from h3bench.quality.expected import duration_checks
from h3bench.quality.files import Probed, decodable_check, stream_check
from h3bench.quality.formats import audio_format_checks, finite_check, video_format_checks

if TYPE_CHECKING:
    from h3bench.metrics.lpips import LpipsResult, LpipsWeights
    from h3bench.metrics.ssim_psnr import VideoMetrics

__all__ = ["AudioMetrics", "LpipsSettings", "Measured", "assemble", "audio_trim_count"]

#: ``(baseline samples, candidate samples) → (spectral cosine, RMS ratio)``, on PCM trimmed to those counts.
AudioMetrics = Callable[[int, int], tuple[float, float]]


@dataclass(frozen=True)
class LpipsSettings:
    """Whether and how to measure LPIPS: given weights, or a directory to authenticate them from."""

    measure: bool = True
    weights: LpipsWeights | None = None
    directory: str | os.PathLike[str] | None = None
    device: str = "cpu"


@dataclass(frozen=True, eq=False)
class Measured:
    """What the engine measured for one pair, before the checks decide what counts.

    A metric is its result, or the message of why it could not be computed
    (a ``str``), or None when it was not attempted. ``lpips_unmeasured`` says
    why LPIPS is not measured at all (``--no-lpips``, refused weights).
    """

    video: VideoMetrics | str | None
    lpips: LpipsResult | str | None
    lpips_unmeasured: str | None
    lpips_weights: dict[str, Any] | None  # the authenticated source
    pcm: tuple[np.ndarray, np.ndarray] | None  # both files' decoded PCM, when both have audio
    audio: AudioMetrics | None


def audio_trim_count(sound: media.AudioInfo, shape: ExpectedShape | None) -> int:
    if shape is not None:
        return shape.audio_samples
    if sound.duration_s is None:
        return sound.samples
    return round(sound.duration_s * sound.sample_rate)


def _video_metric_checks(
    video: VideoMetrics | str | None, prerequisites: list[Check], thresholds: Thresholds
) -> tuple[list[Check], VideoMetrics | None]:
    ssim_rule, psnr_rule = f">= {thresholds.ssim_min:g}", f">= {thresholds.psnr_min_db:g}"
    reason = blocked_by(prerequisites)
    if reason:
        return [not_measured("ssim", ssim_rule, reason), not_measured("psnr_db", psnr_rule, reason)], None
    if video is None or isinstance(video, str):
        detail = f"ffmpeg-style SSIM/PSNR could not be computed: {video or 'no frames were compared'}"
        return [
            Check("ssim", Status.FAIL, None, ssim_rule, detail),
            Check("psnr_db", Status.FAIL, None, psnr_rule, detail),
        ], None
    return [
        at_least("ssim", "SSIM (ffmpeg All)", video.ssim, thresholds.ssim_min),
        at_least("psnr_db", "PSNR (ffmpeg average, dB)", video.psnr_db, thresholds.psnr_min_db),
    ], video


def _lpips_check(
    measured: Measured, prerequisites: list[Check], thresholds: Thresholds
) -> tuple[Check, LpipsResult | None]:
    rule = f"<= {thresholds.lpips_max:g}"
    reason = blocked_by(prerequisites)
    if reason:
        return not_measured("lpips", rule, reason), None
    if measured.lpips_unmeasured is not None:
        return not_measured("lpips", rule, measured.lpips_unmeasured), None
    result = measured.lpips
    if result is None or isinstance(result, str):
        return Check("lpips", Status.FAIL, None, rule,
                     f"LPIPS could not be computed: {result or 'no frames were compared'}"), None
    source = result.weights
    what = f"LPIPS (alex, v0.1, mean over frames; {source.kind} weights, sha256 {source.files[0].sha256[:12]})"
    return at_most("lpips", what, result.mean, thresholds.lpips_max), result


def _audio_metric_checks(
    base: Probed, cand: Probed, audio: AudioMetrics | None, prerequisites: list[Check], thresholds: Thresholds,
    shape: ExpectedShape | None,
) -> tuple[list[Check], float | None, float | None]:
    cosine_rule = f">= {thresholds.audio_cosine_min:g}"
    rms_rule = f"in [{thresholds.rms_ratio_min:g}, {thresholds.rms_ratio_max:g}]"
    reason = blocked_by(prerequisites)
    if reason:
        return [
            not_measured("audio_spectral_cosine", cosine_rule, reason),
            not_measured("audio_rms_ratio", rms_rule, reason),
        ], None, None
    assert audio is not None and base.audio is not None and cand.audio is not None  # the prerequisites passed
    try:
        cosine, ratio = audio(audio_trim_count(base.audio, shape), audio_trim_count(cand.audio, shape))
    except MediaShapeError as exc:
        detail = f"audio metrics could not be computed: {exc}"
        return [
            Check("audio_spectral_cosine", Status.FAIL, None, cosine_rule, detail),
            Check("audio_rms_ratio", Status.FAIL, None, rms_rule, detail),
        ], None, None
    return [
        at_least("audio_spectral_cosine", "the multi-resolution spectral cosine", cosine, thresholds.audio_cosine_min),
        within(
            "audio_rms_ratio",
            "the RMS ratio (candidate / baseline)",
            ratio,
            thresholds.rms_ratio_min,
            thresholds.rms_ratio_max,
        ),
    ], cosine, ratio


def assemble(
    base: Probed, cand: Probed, measured: Measured, *, thresholds: Thresholds, expect_seconds: float | None
) -> QualityReport:
    """Every check of one pair, in the fixed order, from what the engine measured."""
    shape = expected_shape(expect_seconds) if expect_seconds is not None else None
    files = (base, cand)
    decodable = decodable_check(files)
    has_video = stream_check(files, decodable, "video")
    has_audio = stream_check(files, decodable, "audio")
    video_format = video_format_checks(base, cand, has_video)
    audio_format = audio_format_checks(base, cand, has_audio)
    if has_audio.status is Status.PASS:
        assert measured.pcm is not None  # both files have decoded audio
        finite = finite_check(*measured.pcm)
    else:
        finite = not_measured("audio_finite", "== 0", blocked_by([has_audio]) or "not measured")
    checks = [decodable, has_video, has_audio, *video_format, *audio_format, finite]
    if shape is not None:
        for f in files:
            checks += [replace(check, name=f"{f.role}.{check.name}") for check in duration_checks(f, shape)]

    video_prerequisites = [has_video, *video_format]
    video_checks, video = _video_metric_checks(measured.video, video_prerequisites, thresholds)
    lpips_check, lpips_result = _lpips_check(measured, video_prerequisites, thresholds)
    audio_prerequisites = [has_audio, *audio_format, finite]
    audio_checks, cosine, ratio = _audio_metric_checks(base, cand, measured.audio, audio_prerequisites, thresholds,
                                                       shape)
    checks += [*video_checks, lpips_check, *audio_checks]
    return QualityReport(
        baseline=base.path,
        candidate=cand.path,
        checks=tuple(checks),
        ssim=video.ssim if video is not None else None,
        psnr_db=video.psnr_db if video is not None else None,
        lpips=lpips_result.mean if lpips_result is not None else None,
        audio_spectral_cosine=cosine,
        audio_rms_ratio=ratio,
        thresholds=thresholds,
        video=video,
        lpips_result=lpips_result,
        lpips_weights=measured.lpips_weights,
    )
