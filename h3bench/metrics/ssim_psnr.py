"""SSIM and PSNR of two videos, exactly as ffmpeg's ``ssim`` and ``psnr`` filters compute them.

Upstream's accuracy gate (vLLM-Omni's ``tests/e2e/accuracy/helpers.py``)
runs ``ffmpeg -i A -i B -lavfi "[0:v][1:v]ssim"`` and the same with ``psnr``, and
reads the ``All:`` and ``average:`` figures. This module reproduces both on
yuv420p frames, from one streaming decode of each file.

SSIM (libavfilter/vf_ssim.c, after x264)
    Each plane is cut into 4x4 blocks; rows and columns past the last whole block
    are ignored. For every block the kernel sums ``a``, ``b``, ``a² + b²`` and
    ``a·b``. Each window is 2x2 neighbouring blocks (8x8 pixels, on a 4-pixel
    grid), so a plane of ``bw x bh`` blocks has ``(bw - 1)(bh - 1)`` windows. A
    window scores::

        vars  = 64·Σ(a² + b²) - (Σa)² - (Σb)²
        covar = 64·Σab - Σa·Σb
        ssim  = f32(2·Σa·Σb + C1) · f32(2·covar + C2) / (f32((Σa)² + (Σb)² + C1) · f32(vars + C2))

    with integer sums, ``C1 = int(.01²·255²·64 + .5) = 416`` and
    ``C2 = int(.03²·255²·64·63 + .5) = 235963``, each product rounded to float32
    as ffmpeg's C and SSE4 code do, and windows summed in float64 (each row's
    in eight lanes, then the rows in order; a float32 value above 5e-7 joins a
    row's sum exactly, so the order rarely shows in the last bit). A plane's
    value is the mean over its windows; a frame's ``All`` weights the planes by
    pixel count (chroma planes are ``ceil(w/2) x ceil(h/2)``); the video's SSIM
    is the mean of the frames' ``All``.

PSNR (libavfilter/vf_psnr.c)
    Per plane, MSE is the sum of squared differences over the whole plane
    divided by its pixel count. A frame's MSE weights the planes by pixel
    count, and the video's PSNR is ``10·log10(255² / mean of frame MSEs)``: one
    global figure, not a mean of per-frame PSNRs. Zero MSE gives ``inf``, which
    ffmpeg prints as ``inf``.

Notes
-----
The pixel-count weighting is done as ``Σ(count·value) / total`` rather than
ffmpeg's ``Σ(weight·value)`` with rounded weights, so identical inputs give
exactly 1.0 instead of 0.9999999999999999; the two agree to 1e-15.

Frames are paired in decoding order. ffmpeg pairs them by timestamp, which is
the same pairing once frame count, size and frame rate match (the gates check
these first); a count or size mismatch is an error here, never a truncation.

Speed: both metrics come from one pass per plane of a C kernel
(``_ssim_kernel.c``, compiled when h3bench is installed, with an AVX2 and an
AVX-512 copy chosen at load time on x86-64), and the two files decode on
their own threads while earlier frames are scored. An install built without
a C compiler uses the numba kernel of :mod:`h3bench.metrics.ssim_numba`
instead: the same bits, but half a second of start-up per process.
``KERNEL`` says which one runs. ``benchmarks/bench_ssim_psnr.py`` and
``benchmarks/bench_compare.py`` time them against the two ffmpeg runs.

References
----------
Z. Wang, A. C. Bovik, H. R. Sheikh and E. P. Simoncelli, "Image quality
assessment: From error visibility to structural similarity," IEEE Trans.
Image Processing, vol. 13, no. 4, pp. 600-612, Apr. 2004.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from h3bench.errors import MediaShapeError
from h3bench.media import YuvFrame, iter_yuv_frames
from h3bench.media.pairs import paired_frames

__all__ = [
    "KERNEL",
    "VideoComparison",
    "VideoMetrics",
    "compare_video",
]

_PathLike = str | os.PathLike[str]

_PEAK = 255  # 8-bit samples; ffmpeg's average peak lrint(Σ max·weight) is also 255
_MIN_PLANE = 8  # one 8x8 window; ffmpeg divides by zero below that
_PREFETCH = 8  # decoded frames held ahead per file


def _kernel() -> tuple[str, Callable[[np.ndarray, np.ndarray], tuple[float, int]]]:
    """The compiled kernel when the install built it, else numba's (imported only then: it is slow to load)."""
    try:
        from h3bench.metrics._ssim_kernel import plane_stats
    except ImportError:
        from h3bench.metrics.ssim_numba import plane_stats
        return "numba", plane_stats
    return "compiled", plane_stats


KERNEL, _plane_stats = _kernel()


@dataclass(frozen=True, eq=False)
class VideoMetrics:
    """ffmpeg's SSIM and PSNR of a candidate video against its baseline.

    ``eq=False``: the per-frame arrays make field-wise equality ambiguous.
    """

    ssim: float  # ffmpeg ssim "All"
    psnr_db: float  # ffmpeg psnr "average" (inf when identical)
    frames: int
    ssim_per_frame: np.ndarray  # [frames, 4]: Y, U, V, All
    psnr_per_frame: np.ndarray  # [frames, 4]: Y, U, V, All (psnr_y/u/v/avg of the stats file)
    mse_per_frame: np.ndarray  # [frames, 3]: Y, U, V


def _planes(frame: YuvFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return frame.y, frame.u, frame.v


def _plane_shapes(frame: YuvFrame) -> tuple[tuple[int, ...], ...]:
    return tuple(plane.shape for plane in _planes(frame))


def _size(frame: YuvFrame) -> str:
    return f"{frame.y.shape[1]}x{frame.y.shape[0]}"


def _check_pair(a: YuvFrame, b: YuvFrame) -> None:
    """Refuse planes that ffmpeg's filters would not compare, or could not score."""
    for name, pa, pb in zip("YUV", _planes(a), _planes(b), strict=True):
        if pa.dtype != np.uint8 or pb.dtype != np.uint8 or pa.ndim != 2 or pb.ndim != 2:
            raise MediaShapeError(
                f"plane {name} must be 2-D uint8 (8-bit yuv420p); got {pa.dtype} {pa.shape} and {pb.dtype} {pb.shape}"
            )
        if pa.shape != pb.shape:
            raise MediaShapeError(f"plane {name} shapes differ: {pa.shape} and {pb.shape}")
        if min(pa.shape) < _MIN_PLANE:
            raise MediaShapeError(
                f"plane {name} is {pa.shape[1]}x{pa.shape[0]}; SSIM needs every plane to hold one 8x8 window"
            )


def _frame_stats(a: YuvFrame, b: YuvFrame) -> tuple[list[float], list[int]]:
    """Per-plane SSIM and sum of squared differences of one frame (Y, U, V)."""
    ssim, sse = [], []
    for pa, pb in zip(_planes(a), _planes(b), strict=True):
        plane_ssim, plane_sse = _plane_stats(pa, pb)
        ssim.append(plane_ssim)
        sse.append(plane_sse)
    return ssim, sse


def _psnr(mse: np.ndarray | float) -> np.ndarray:
    """``10·log10(255² / mse)``, ``inf`` where the MSE is zero (as ffmpeg prints it)."""
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(_PEAK**2 / np.asarray(mse, dtype=np.float64))


class VideoComparison:
    """SSIM and PSNR of a candidate video against its baseline, fed one frame pair at a time.

    Whoever decodes the two files feeds the pairs in decoding order
    (:func:`compare_video` does; so does the quality engine, which decodes
    each file once for every metric and every pair it is in).
    """

    def __init__(self, baseline: _PathLike, candidate: _PathLike) -> None:
        self.baseline, self.candidate = os.fspath(baseline), os.fspath(candidate)
        self._ssim: list[list[float]] = []
        self._sse: list[list[int]] = []
        self._shapes: tuple[tuple[int, ...], ...] | None = None

    @property
    def frames(self) -> int:
        return len(self._ssim)

    def add(self, a: YuvFrame, b: YuvFrame) -> None:
        """Score the next frame pair.

        Raises
        ------
        MediaShapeError
            The frames differ in size from each other or from the first pair,
            or the first pair cannot be scored (not 8-bit, a plane under 8x8).
        """
        index = self.frames
        if self._shapes is None:
            self._shapes = _plane_shapes(a)
        if _plane_shapes(a) != self._shapes or _plane_shapes(b) != self._shapes:
            raise MediaShapeError(
                f"frame sizes differ at frame {index}: baseline {self.baseline} is {_size(a)}, "
                f"candidate {self.candidate} is {_size(b)}",
                path=self.candidate,
            )
        if index == 0:
            try:
                _check_pair(a, b)
            except MediaShapeError as exc:
                raise MediaShapeError(f"{self.baseline} and {self.candidate}: {exc}", path=self.candidate) from exc
        ssim, sse = _frame_stats(a, b)
        self._ssim.append(ssim)
        self._sse.append(sse)

    def result(self) -> VideoMetrics:
        """The figures over every pair added; MediaShapeError if there were none."""
        if self._shapes is None:
            raise MediaShapeError(f"no video frames to compare in {self.baseline} and {self.candidate}",
                                  path=self.candidate)
        counts = np.array([h * w for h, w in self._shapes], dtype=np.float64)
        return _summarise(np.array(self._ssim), np.array(self._sse, dtype=np.float64), counts)


def compare_video(baseline: _PathLike, candidate: _PathLike) -> VideoMetrics:
    """ffmpeg's SSIM ``All`` and PSNR ``average`` of ``candidate`` against ``baseline``.

    Both files are decoded once, in parallel, frame by frame; no video is held
    in memory. Frames are compared in decoding order, as the filters pair them
    when both streams have the same frames.

    Raises
    ------
    MediaShapeError
        If the frame sizes or frame counts differ (the message names both), or
        the frames are too small for one 8x8 SSIM window per plane. Nothing is
        truncated silently.
    MediaDecodeError
        If either file does not decode (from :mod:`h3bench.media`).
    """
    comparison = VideoComparison(baseline, candidate)
    with contextlib.closing(paired_frames(baseline, candidate, iter_yuv_frames, ahead=_PREFETCH)) as pairs:
        for _, a, b in pairs:
            comparison.add(a, b)
    return comparison.result()


def _summarise(ssim: np.ndarray, sse: np.ndarray, counts: np.ndarray) -> VideoMetrics:
    """Per-frame and whole-video figures from per-plane SSIM and squared-error sums."""
    total = counts.sum()
    ssim_all = ssim @ counts / total
    mse = sse / counts
    mse_all = sse.sum(axis=1) / total
    ssim_per_frame = np.column_stack([ssim, ssim_all])
    psnr_per_frame = np.column_stack([_psnr(mse), _psnr(mse_all)])
    for array in (ssim_per_frame, psnr_per_frame, mse):
        array.setflags(write=False)
    return VideoMetrics(
        ssim=float(ssim_all.mean()),
        psnr_db=float(_psnr(mse_all.mean())),
        frames=len(ssim),
        ssim_per_frame=ssim_per_frame,
        psnr_per_frame=psnr_per_frame,
        mse_per_frame=mse,
    )
