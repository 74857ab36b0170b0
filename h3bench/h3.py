"""The MiniMax-H3 facts that every stage of h3bench relies on, written once.

Read from vLLM-Omni's MiniMax-H3 model code (``models/minimax_h3/``
``encoder_processing.py``, ``time_request.py`` and ``vae.py``) and its
diffusion pipeline profiler:

- output clock: 24 FPS; the requested frame count ``round(seconds * 24)`` is
  snapped **up** to the next count with ``frames % 17 == 5`` (5 s → 124
  frames, 15 s → 362), and durations lie within [4, 15] s;
- the video latent has ``T = ((frames - 5) // 17) * 5 + 2`` frames;
- audio: 32 kHz stereo, ``round(40 * frames / 24)`` latents of 800 samples per
  channel each (5 s → 165 600 samples, 15 s → 482 400), so audio and video
  lengths differ by design;
- the profiler's stage keys are ``"MiniMaxH3Pipeline.<method>"``
  (``diffusion/profiler/diffusion_pipeline_profiler.py``); repeated calls are
  summed, and the VAE ``decode_latent`` calls nest inside ``decode``. In
  request mode, the default, six keys are reported (:data:`STAGE_KEYS`):
  ``denoise_step`` is recorded under ``diffuse``'s key, and ``post_decode``
  appears only with step execution. MP4 muxing has no key.

The simulator, the gates, the audio metric, the client, the plugin's workload
markers and the expected-duration checks all take these from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from h3bench.errors import UsageError

__all__ = [
    "AUDIO_CHANNELS",
    "AUDIO_LATENTS_PER_SECOND",
    "AUDIO_SAMPLES_PER_LATENT",
    "AUDIO_SAMPLE_RATE",
    "FPS",
    "MAX_SECONDS",
    "MIN_SECONDS",
    "STAGE_KEYS",
    "STAGE_PREFIX",
    "TOP_LEVEL_STAGES",
    "ExpectedShape",
    "audio_sample_count",
    "expected_shape",
    "frame_count",
    "latent_frames",
    "mux_and_transfer_s",
    "workload_marker",
]

FPS = 24
AUDIO_SAMPLE_RATE = 32_000
AUDIO_CHANNELS = 2
AUDIO_LATENTS_PER_SECOND = 40
AUDIO_SAMPLES_PER_LATENT = AUDIO_SAMPLE_RATE // AUDIO_LATENTS_PER_SECOND  # 800
MIN_SECONDS = 4.0
MAX_SECONDS = 15.0
_FRAME_PERIOD = 17  # frames % 17 == 5: one latent frame per 17 output frames, plus the first 5
_FRAME_REMAINDER = 5

STAGE_PREFIX = "MiniMaxH3Pipeline."
# The keys the profiler reports in request mode, in the order the pipeline runs them.
STAGE_KEYS = tuple(
    STAGE_PREFIX + method
    for method in (
        "encode_prompt",
        "_encode_local_media",
        "diffuse",
        "decode",
        "video_vae.decode_latent",
        "audio_vae.decode_latent",
    )
)
# Methods that do not nest inside one another: E2E minus their sum is mux and transfer.
# post_decode is one of them when step execution reports it.
TOP_LEVEL_STAGES = ("encode_prompt", "_encode_local_media", "diffuse", "decode", "post_decode")


def frame_count(seconds: float) -> int:
    """Frames H3 generates for ``seconds``: ``round(seconds * 24)`` snapped up to ``17n + 5``.

    4 s → 107, 5 s → 124, 8 s → 192, 10 s → 243, 15 s → 362.
    """
    frames = round(seconds * FPS)
    return frames + (_FRAME_REMAINDER - frames) % _FRAME_PERIOD


def latent_frames(frames: int) -> int:
    """The video latent's T for ``frames`` output frames: ``((frames - 5) // 17) * 5 + 2``."""
    return ((frames - _FRAME_REMAINDER) // _FRAME_PERIOD) * 5 + 2


def audio_sample_count(frames: int) -> int:
    """Audio samples per channel for ``frames`` frames: ``round(40 * frames / 24)`` latents of 800."""
    return round(Fraction(AUDIO_LATENTS_PER_SECOND * frames, FPS)) * AUDIO_SAMPLES_PER_LATENT


@dataclass(frozen=True)
class ExpectedShape:
    """What H3 produces for a requested duration."""

    seconds: float
    frames: int
    audio_latents: int
    audio_samples: int
    audio_duration_s: float
    video_duration_s: float


def expected_shape(seconds: float) -> ExpectedShape:
    """The frame and audio counts H3 produces for ``seconds`` of output.

    Examples: 5 s → 124 frames, 165 600 samples; 15 s → 362 frames, 482 400 samples.

    Raises
    ------
    UsageError
        ``seconds`` is not a number, or lies outside [4, 15] s.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise UsageError(f"the expected duration must be a number of seconds, got {seconds!r}")
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UsageError(
            f"the expected duration must be within [{MIN_SECONDS:g}, {MAX_SECONDS:g}] s (H3's range), got {seconds:g}"
        )
    frames = frame_count(seconds)
    samples = audio_sample_count(frames)
    return ExpectedShape(
        seconds=float(seconds),
        frames=frames,
        audio_latents=samples // AUDIO_SAMPLES_PER_LATENT,
        audio_samples=samples,
        audio_duration_s=samples / AUDIO_SAMPLE_RATE,
        video_duration_s=frames / FPS,
    )


def mux_and_transfer_s(e2e_s: float, stage_durations: Mapping[str, float]) -> float | None:
    """E2E minus the sum of the top-level stages; None when the server reported no stages.

    Keys are ``"<Class>.<method>"``; nested ones (``.video_vae.decode_latent``,
    and ``.denoise_step`` should a profiler report it) are already inside a
    top-level stage.
    """
    top = [v for k, v in stage_durations.items() if k.count(".") <= 1 and k.rpartition(".")[2] in TOP_LEVEL_STAGES]
    return e2e_s - sum(top) if top else None


def workload_marker(seconds: float) -> str:
    """The pytest marker of a workload: ``ref2va_5s``, ``ref2va_15s``."""
    return f"ref2va_{seconds:g}s"
