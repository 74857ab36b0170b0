"""The worst pair's pictures: the only part of the report that decodes media.

The bundle stores each pair's gate values and its worst frames, not the
per-frame series, so for the one pair a candidate's pictures show:

- per-frame SSIM and PSNR from :func:`h3bench.metrics.ssim_psnr.compare_video`
  (ffmpeg's definitions), and per-frame LPIPS from
  :func:`h3bench.metrics.lpips.lpips_video` when authenticated weights are
  given;
- the worst frame side by side, with a per-pixel SSIM map of its luma plane
  from scikit-image's ``structural_similarity(..., full=True)``. That map is a
  diagnostic picture only: the gate's value stays ffmpeg's SSIM. scikit-image
  is optional (``pip install 'h3bench[report]'``); without it this picture is
  left out with a note saying so;
- the baseline and candidate spectrograms and their difference, from
  :class:`scipy.signal.ShortTimeFFT` (librosa.stft's framing and ``amplitude_to_db``'s 80 dB floor, drawn with
  matplotlib).

The gate values shown beside them are the stored ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from h3bench import media
from h3bench.errors import H3BenchError
from h3bench.h3 import expected_shape
from h3bench.report.contents import WorstPair, number
from h3bench.report.figures import Figure, new_figure, png_figure, styled, svg_figure
from h3bench.runspec import RunSpec

__all__ = ["Pictures", "worst_pair_pictures"]

T = TypeVar("T")

_N_FFT = 2048
_HOP = 512


@dataclass(frozen=True)
class Pictures:
    """The figures drawn for one worst pair, and a note for each one that could not be drawn."""

    figures: tuple[Figure, ...]
    notes: tuple[str, ...]


@styled
def worst_pair_pictures(spec: RunSpec, worst: WorstPair, *, lpips_dir: Path | None, lpips_device: str) -> Pictures:
    """Per-frame curves, the worst frame with its SSIM map, and the spectrograms of one pair."""
    key = worst.pair.id
    if worst.paths is None:
        return Pictures((), (f"pictures of {key} not drawn: {worst.missing}",))
    baseline, candidate = worst.paths
    figures: list[Figure] = []
    notes: list[str] = []
    try:
        from h3bench.metrics.ssim_psnr import compare_video

        video = compare_video(baseline, candidate)
    except H3BenchError as exc:
        notes.append(f"per-frame SSIM/PSNR and the worst frame of {key} not drawn: {exc}")
        video = None
    lpips_frames, lpips_note = _lpips_per_frame(baseline, candidate, lpips_dir, lpips_device)
    if lpips_note:
        notes.append(lpips_note)
    if video is not None:
        ssim = np.asarray(video.ssim_per_frame)[:, -1]
        psnr = np.asarray(video.psnr_per_frame)[:, -1]
        frame = worst.frame if worst.frame is not None and worst.frame < video.frames else int(np.argmin(ssim))
        figures.append(_curves(spec, worst, ssim, psnr, lpips_frames, frame))
        try:
            figures.append(_frame_picture(worst, baseline, candidate, frame, float(ssim[frame])))
        except H3BenchError as exc:
            notes.append(f"worst frame of {key} not drawn: {exc}")
    try:
        figures.append(_spectrograms(worst, baseline, candidate))
    except H3BenchError as exc:
        notes.append(f"spectrograms of {key} not drawn: {exc}")
    return Pictures(tuple(figures), tuple(notes))


def _lpips_per_frame(baseline: Path, candidate: Path, lpips_dir: Path | None,
                     device: str) -> tuple[np.ndarray | None, str | None]:
    # None: the weights the run itself resolves (H3BENCH_LPIPS_DIR, else the h3bench cache).
    try:
        from h3bench.metrics.lpips import authenticate_weights, lpips_video

        weights = authenticate_weights(lpips_dir)
        frames = lpips_video(baseline, candidate, weights=weights, device=device).per_frame
        return np.asarray(frames), f"per-frame LPIPS drawn with the weights {weights.source.describe()}"
    except H3BenchError as exc:
        return None, f"per-frame LPIPS not drawn: {exc}"


def _curves(spec: RunSpec, worst: WorstPair, ssim: np.ndarray, psnr: np.ndarray, lpips: np.ndarray | None,
            frame: int) -> Figure:
    gates = spec.gates
    panels = [("SSIM (ffmpeg All)", ssim, gates.ssim_min), ("PSNR (dB)", psnr, gates.psnr_min_db)]
    if lpips is not None:
        panels.append(("LPIPS (alex v0.1)", lpips, gates.lpips_max))
    fig = new_figure(9, 1.2 + 1.5 * len(panels))
    axes_list = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    finite = psnr[np.isfinite(psnr)]
    for axes, (name, values, threshold) in zip(axes_list, panels, strict=True):
        shown = values
        if values is psnr:
            # Identical frames have PSNR inf; draw them at the top of the finite range.
            ceiling = float(finite.max()) + 1 if finite.size else threshold + 10
            shown = np.where(np.isfinite(values), values, ceiling)
        axes.plot(np.arange(len(shown)), shown, "-", linewidth=1, color="#4c72b0")
        axes.axhline(threshold, color="#c44e52", linestyle="--", linewidth=1, label=f"gate {threshold:g}")
        axes.axvline(frame, color="#555555", linestyle=":", linewidth=1, label=f"frame {frame}")
        axes.set_ylabel(name, fontsize=8)
        axes.legend(loc="best", fontsize=7, frameon=False)
    axes_list[-1].set_xlabel("frame")
    stored = ", ".join(f"{name} {_stored(worst, name)}" for name in ("ssim", "psnr_db", "lpips"))
    caption = (f"Per-frame values of {worst.pair.id} (worst pair by {worst.metric}: {worst.value:.6g}), computed for"
               f" this picture with the gates' own metric code; the stored gate values are {stored}.")
    return svg_figure(fig, f"fig-curves-{worst.pair.candidate.block.candidate}", "curves",
                      f"Per-frame curves of the worst pair, {worst.pair.id}", caption)


def _stored(worst: WorstPair, name: str) -> str:
    value = number(worst.result.get(name))
    return "not measured" if value is None else f"{value:.6g}"


def _nth(frames: Generator[T, None, None], index: int, what: str) -> T:
    found = next(itertools.islice(frames, index, None), None)
    frames.close()
    if found is None:
        raise H3BenchError(f"{what} has no frame {index}")
    return found


def _frame_picture(worst: WorstPair, baseline: Path, candidate: Path, index: int, ffmpeg_ssim: float) -> Figure:
    try:
        from skimage.metrics import structural_similarity
    except ImportError as exc:
        raise H3BenchError(f"its per-pixel SSIM map needs scikit-image, which does not import here ({exc}); "
                           "install it with pip install 'h3bench[report]'") from exc
    base_rgb = _nth(media.iter_rgb_frames(baseline), index, "the baseline")
    cand_rgb = _nth(media.iter_rgb_frames(candidate), index, "the candidate")
    base_y = _nth(media.iter_yuv_frames(baseline), index, "the baseline").y
    cand_y = _nth(media.iter_yuv_frames(candidate), index, "the candidate").y
    mean, ssim_map = structural_similarity(base_y, cand_y, data_range=255, full=True)
    height, width = base_rgb.shape[:2]
    fig = new_figure(10, 1.0 + 3.3 * height / width)
    panels = fig.subplots(1, 3)
    for axes, picture, title in ((panels[0], base_rgb, "baseline"), (panels[1], cand_rgb, "candidate")):
        axes.imshow(picture)
        axes.set_title(f"{title}, frame {index}", fontsize=8)
    # The map's own range, so that small differences are visible; the colour bar gives the values.
    shown = panels[2].imshow(ssim_map, cmap="magma", vmin=float(ssim_map.min()), vmax=1.0)
    panels[2].set_title(f"per-pixel SSIM of Y (scikit-image, mean {mean:.4f})", fontsize=8)
    fig.colorbar(shown, ax=panels[2], shrink=0.8)
    for axes in panels:
        axes.set_axis_off()
    caption = (f"Frame {index} of {worst.pair.id}. The SSIM map is a diagnostic picture only, from scikit-image's "
               "structural_similarity(full=True) on the luma plane (uniform 7x7 windows); the gate's value stays "
               f"ffmpeg's SSIM, {ffmpeg_ssim:.6f} for this frame (All) and {_stored(worst, 'ssim')} for the video.")
    return png_figure(fig, f"fig-frame-{worst.pair.candidate.block.candidate}", "frame",
                      f"Worst frame side by side, {worst.pair.id}", caption)


def _stft_db(mono: np.ndarray, reference: float | None = None) -> tuple[np.ndarray, float]:
    """|STFT| in dB of a mono signal, and the reference used.

    librosa.stft's framing: a periodic Hann window of ``_N_FFT``, frame ``p`` centred on sample ``p * _HOP`` with
    zeros beyond the signal, ``1 + len // _HOP`` frames, no scaling. dB against ``reference`` (default: this
    signal's peak), floored 80 dB below it as librosa's ``amplitude_to_db`` does.
    """
    from scipy.signal import ShortTimeFFT
    from scipy.signal.windows import hann

    stft = ShortTimeFFT(hann(_N_FFT, sym=False), hop=_HOP, fs=1.0)  # scale_to=None: the plain |FFT|
    # ShortTimeFFT wants half a window of signal; the zeros added are those its framing assumes past the end.
    signal = np.pad(mono.astype(np.float64), (0, max(0, _N_FFT // 2 - mono.size)))
    magnitude = np.abs(stft.stft(signal, p0=0, p1=1 + mono.size // _HOP))  # [frequency, frame]
    reference = reference if reference is not None else (float(magnitude.max()) or 1.0)
    db = 20.0 * np.log10(np.maximum(magnitude, 1e-5) / reference)
    return np.maximum(db, db.max() - 80.0), reference


def _spectrograms(worst: WorstPair, baseline: Path, candidate: Path) -> Figure:
    samples = expected_shape(worst.pair.duration).audio_samples
    base, rate = media.read_pcm(baseline)
    cand, cand_rate = media.read_pcm(candidate)
    if rate != cand_rate or not base.size or not cand.size:
        raise H3BenchError(f"the audio streams differ in rate ({rate}, {cand_rate} Hz) or one is empty")
    length = min(samples, base.shape[1], cand.shape[1])
    base_db, reference = _stft_db(base[:, :length].mean(axis=0))
    cand_db, _ = _stft_db(cand[:, :length].mean(axis=0), reference)
    difference = cand_db - base_db
    limit = float(np.abs(difference).max()) or 1.0
    extent = (0.0, length / rate, 0.0, rate / 2)
    fig = new_figure(10, 3.4)
    panels = fig.subplots(1, 3, sharey=True)
    for axes, values, title, cmap, bounds in (
        (panels[0], base_db, "baseline (dB)", "magma", (None, None)),
        (panels[1], cand_db, "candidate (dB)", "magma", (None, None)),
        (panels[2], difference, "candidate − baseline (dB)", "coolwarm", (-limit, limit)),
    ):
        shown = axes.imshow(values, origin="lower", aspect="auto", extent=extent, cmap=cmap, vmin=bounds[0],
                            vmax=bounds[1], interpolation="nearest")
        axes.set_title(title, fontsize=8)
        axes.set_xlabel("time (s)", fontsize=8)
        fig.colorbar(shown, ax=axes, shrink=0.8)
    panels[0].set_ylabel("Hz", fontsize=8)
    caption = (f"Mono mix of {worst.pair.id}, STFT n_fft {_N_FFT}, hop {_HOP}, dB against the baseline's peak; "
               f"the stored spectral cosine is {_stored(worst, 'audio_spectral_cosine')} and the RMS ratio "
               f"{_stored(worst, 'audio_rms_ratio')}.")
    return png_figure(fig, f"fig-spectrogram-{worst.pair.candidate.block.candidate}", "spectrogram",
                      f"Spectrograms of the worst pair, {worst.pair.id}", caption)
