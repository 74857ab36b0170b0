"""Audio quality metrics: multi-resolution spectral cosine and RMS ratio.

Both reproduce ``_audio_quality_metrics`` of vLLM-Omni's
tests/diffusion/models/minimax_h3/test_minimax_h3_quantization_quality.py
whose gates are spectral cosine ≥ 0.80 and RMS ratio in [0.50, 2.00].
Inputs are float ``[channels, samples]`` PCM of equal shape; compare decoded
AAC only after trimming both to the expected sample count (:func:`trim_to`),
since the decoder keeps the padding of the last AAC frame.

Unlike upstream, a non-finite sample is not silently folded into a score:
it raises :class:`~h3bench.errors.MediaShapeError`, which the gate layer
reports as a failed "finite" check.
"""

from __future__ import annotations

import numpy as np
import torch

from h3bench.errors import MediaShapeError, UsageError
from h3bench.h3 import AUDIO_SAMPLE_RATE as SAMPLE_RATE

__all__ = ["N_FFTS", "SAMPLE_RATE", "rms_ratio", "spectral_cosine", "trim_to"]

N_FFTS = (512, 1024, 2048)
_COSINE_EPS = 1e-12
_RMS_FLOOR = 1e-12


def trim_to(pcm: np.ndarray, samples: int) -> np.ndarray:
    """The first ``samples`` samples of each channel of ``[channels, samples]`` PCM.

    Decoded AAC carries encoder padding at the end, so it may be longer than
    expected, never shorter.

    Raises
    ------
    MediaShapeError
        ``pcm`` is not 2-D or has fewer than ``samples`` samples per channel.
    """
    if samples < 0:
        raise UsageError(f"cannot trim PCM to a negative sample count ({samples})")
    if pcm.ndim != 2:
        raise MediaShapeError(f"expected PCM shaped [channels, samples], got shape {pcm.shape}")
    if pcm.shape[1] < samples:
        raise MediaShapeError(
            f"PCM has {pcm.shape[1]} samples per channel, fewer than the expected {samples} "
            f"({samples - pcm.shape[1]} missing)"
        )
    return pcm[:, :samples]


def spectral_cosine(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    baseline_rate: int = SAMPLE_RATE,
    candidate_rate: int = SAMPLE_RATE,
) -> float:
    """Multi-resolution STFT-magnitude cosine similarity, as vLLM-Omni gates H3 audio.

    For each ``n_fft`` in (512, 1024, 2048): magnitudes of ``torch.stft`` with
    ``hop_length = n_fft // 4``, a periodic Hann window of ``n_fft`` and
    centred reflect padding; then, per channel, the cosine similarity of the
    flattened frequency × time magnitudes (``F.cosine_similarity``, eps
    1e-12). The score is the plain mean of the ``3 × channels`` values.

    Parameters
    ----------
    baseline, candidate
        Float PCM ``[channels, samples]`` of the same shape, with at least
        1025 samples (the reflect padding of the 2048-point STFT needs them).
    baseline_rate, candidate_rate
        Both must be 32 000 Hz, MiniMax-H3's rate.

    Raises
    ------
    MediaShapeError
        Rates, shapes or dtypes that cannot be compared, too few samples, or
        NaN/inf samples.
    """
    if baseline_rate != SAMPLE_RATE or candidate_rate != SAMPLE_RATE:
        raise MediaShapeError(
            f"audio sample rates must both be {SAMPLE_RATE} Hz: baseline {baseline_rate} Hz, "
            f"candidate {candidate_rate} Hz"
        )
    base, cand = _validated(baseline, candidate)
    if base.shape[1] <= max(N_FFTS) // 2:
        raise MediaShapeError(
            f"audio too short for the spectral cosine: {base.shape[1]} samples per channel, "
            f"at least {max(N_FFTS) // 2 + 1} needed"
        )
    channels = base.shape[0]
    both = torch.cat([base, cand])
    similarities: list[float] = []
    for n_fft in N_FFTS:
        magnitude = torch.stft(
            both,
            n_fft,
            hop_length=n_fft // 4,
            window=torch.hann_window(n_fft),
            center=True,
            pad_mode="reflect",
            return_complex=True,
        ).abs()
        cosine = torch.nn.functional.cosine_similarity(
            magnitude[:channels].flatten(1), magnitude[channels:].flatten(1), dim=1, eps=_COSINE_EPS
        )
        similarities.extend(cosine.tolist())
    return float(np.mean(similarities))


def rms_ratio(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """``rms(candidate) / max(rms(baseline), 1e-12)``, RMS over all samples.

    RMS is ``sqrt(mean(x²))`` over every channel and sample, in float32 as
    upstream computes it. A silent baseline gives a ratio of 0 for a silent
    candidate, which fails the [0.5, 2] gate, as it does upstream.

    Raises
    ------
    MediaShapeError
        Shapes or dtypes that cannot be compared, or NaN/inf samples.
    """
    base, cand = _validated(baseline, candidate)
    base_rms = float(torch.sqrt(torch.mean(base.square())))
    cand_rms = float(torch.sqrt(torch.mean(cand.square())))
    return cand_rms / max(base_rms, _RMS_FLOOR)


def _validated(baseline: np.ndarray, candidate: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Check shapes, dtypes and finiteness; return both as float32 tensors."""
    for name, pcm in (("baseline", baseline), ("candidate", candidate)):
        if pcm.ndim != 2:
            raise MediaShapeError(f"{name} PCM must be [channels, samples], got shape {pcm.shape}")
        if pcm.size == 0:
            raise MediaShapeError(f"{name} PCM is empty (shape {pcm.shape})")
        if pcm.dtype.kind != "f":
            raise MediaShapeError(f"{name} PCM must be floating point (as decoded), got {pcm.dtype}")
    if baseline.shape[0] != candidate.shape[0]:
        raise MediaShapeError(
            f"audio channel counts differ: baseline {baseline.shape[0]}, candidate {candidate.shape[0]} "
            f"(e.g. mono against stereo)"
        )
    if baseline.shape[1] != candidate.shape[1]:
        raise MediaShapeError(
            f"audio sample counts differ: baseline {baseline.shape[1]}, candidate {candidate.shape[1]}; "
            f"trim both to the expected count first (trim_to)"
        )
    tensors = []
    for name, pcm in (("baseline", baseline), ("candidate", candidate)):
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        bad = pcm.size - int(np.count_nonzero(np.isfinite(pcm)))
        if bad:
            raise MediaShapeError(f"{name} PCM contains NaN/inf ({bad} non-finite of {pcm.size} samples)")
        tensors.append(torch.from_numpy(pcm))
    return tensors[0], tensors[1]
